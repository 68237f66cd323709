package haproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// syncedCondition returns the Service's npl.io/LoadBalancerSynced condition.
func syncedCondition(ctx context.Context, client kubernetes.Interface, ns, name string) (*metav1.Condition, error) {
	s, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for _, c := range s.Status.Conditions {
		if c.Type == contract.SyncedConditionType {
			return &c, nil
		}
	}
	return nil, nil
}

func hasEvent(ctx context.Context, client kubernetes.Interface, ns, object, reason, contains string) (bool, error) {
	evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == object && e.Reason == reason && strings.Contains(e.Message, contains) {
			return true, nil
		}
	}
	return false, nil
}

// nplctl runs bin/nplctl and returns its stdout and exit code.
func nplctl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bin, err := stack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "nplctl"), args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String() + stderr.String(), exit.ExitCode()
	}
	t.Fatalf("run nplctl: %v", err)
	return "", -1
}

// TestEndToEnd_statusOfTheHAProxyProvider: `nplctl pools --config` shows
// HAProxy's actual members in sync with the expected ones; on an edge that
// serves no UDP (--udp=off), a Service with a UDP port gets the Warning
// Event NotServed and a condition naming it while its TCP port is served.
// Then the edge's API does not answer for 30 s (npl-lbsync's resyncPeriod
// 5 s: resyncs and garbage collections run into the error) while web
// scales down 3 -> 1 and the unrelated Service other is deleted: web is
// SyncFailed naming the edge; HAProxy, read on its admin socket, keeps
// every server of both, in rotation; requests to both VIPs keep flowing,
// 0 failed; once the API answers the scale-down and the delete converge.
func TestEndToEnd_statusOfTheHAProxyProvider(t *testing.T) {
	c, b := clusterBedUDP(t, "off")
	// resyncPeriod 5 s: resyncs and garbage collections run inside the
	// edge's 30 s outage below.
	l := startLBSyncTimed(t, c, b, "e2e-haproxy-status", "npl-lbsync-e2e-haproxy-status", false, 5*time.Second, 5*time.Second)
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	d := webDeployment(ns, "web", 2)
	grace := int64(90) // the stand-in kubelet's termination delay decides; this bounds it
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = &grace
	d.Spec.Template.Spec.Containers[0].Ports = append(d.Spec.Template.Spec.Containers[0].Ports,
		corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP})
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, "web", "e2e-haproxy-status"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip := waitForVIP(t, client, ns, "web", 90*time.Second)
	url := edgebed.URL(vip, 80)
	scaleAndConverge(t, client, b, ns, "web", url, 2)

	// nplctl pools --config reads HAProxy's members through the edges.
	args := []string{"pools", "--kubeconfig", c.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check", "-o", "json"}
	waitForCond(t, 30*time.Second, "nplctl pools --check in sync", func() (bool, error) {
		out, code := nplctl(t, args...)
		var report struct {
			Pools []struct {
				State    string `json:"state"`
				Expected []any  `json:"expected"`
				Actual   []any  `json:"actual"`
			} `json:"pools"`
		}
		if err := json.Unmarshal([]byte(out), &report); err != nil {
			return false, errors.New(out)
		}
		if code != 0 || len(report.Pools) != 1 || report.Pools[0].State != inspect.StateInSync || len(report.Pools[0].Actual) != 2 {
			return false, errors.New(out)
		}
		return true, nil
	})

	// A UDP port, on an edge that serves no UDP: said so; the TCP port
	// still served.
	s, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: corev1.ProtocolUDP})
	if _, err := client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCond(t, 30*time.Second, "the NotServed Event and the condition naming UDP/53", func() (bool, error) {
		ok, err := hasEvent(ctx, client, ns, "web", "NotServed", "UDP/53")
		if !ok || err != nil {
			return false, err
		}
		cond, err := syncedCondition(ctx, client, ns, "web")
		if err != nil || cond == nil {
			return false, err
		}
		return cond.Status == metav1.ConditionTrue && cond.Reason == "SyncedWithWarnings" && strings.Contains(cond.Message, "UDP/53"), nil
	})
	answers(t, b, url, 10)

	// The edge API stops answering for 30 s (its port dropped in the edge's
	// own namespace; HAProxy keeps serving), long enough for several
	// resyncs and garbage collections (resyncPeriod 5 s). Meanwhile web
	// scales down and the unrelated Service other is deleted: both fail on
	// the edge, so HAProxy must keep every server it had.
	if _, err := client.CoreV1().Services(ns).Create(ctx, otherService(ns, "other", "web", "e2e-haproxy-status"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	otherVIP := waitForVIP(t, client, ns, "other", 60*time.Second)
	otherURL := edgebed.URL(otherVIP, 80)
	scaleAndConverge(t, client, b, ns, "web", url, 3)
	waitForCond(t, 30*time.Second, "requests to other's VIP", func() (bool, error) {
		_, err := answeredBy(ctx, b, otherURL, 3)
		return err == nil, err
	})
	e := b.Edges[0]
	webPool := lbmodel.PoolName(lbmodel.LoadBalancerName("e2e-haproxy-status", ns, "web"), lbmodel.TCP, 80)
	otherPool := lbmodel.PoolName(lbmodel.LoadBalancerName("e2e-haproxy-status", ns, "other"), lbmodel.TCP, 80)
	had, err := serversOf(ctx, e, webPool, otherPool)
	if err != nil {
		t.Fatal(err)
	}
	if len(had[webPool]) != 3 || len(had[otherPool]) != 3 {
		t.Fatalf("before the outage HAProxy serves %v, want 3 servers in %s and %s", had, webPool, otherPool)
	}
	calls := func(verb string) float64 {
		t.Helper()
		v, err := l.Count("npl_lbsync_provider_calls_total", `verb="`+verb+`"`, `result="error"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	failedBefore := map[string]float64{"ensure": calls("ensure"), "delete": calls("delete"), "list": calls("list")}

	drop := []string{"netns", "exec", b.EdgeNetns, "iptables", "-w", "-I", "INPUT", "-p", "tcp", "--dport", "8443", "-j", "DROP"}
	if out, err := exec.Command("ip", drop...).CombinedOutput(); err != nil {
		t.Fatalf("drop the edge API: %v: %s", err, out)
	}
	outage := time.Now()
	dropped := true
	undrop := func() {
		if dropped {
			drop[5] = "-D"
			if out, err := exec.Command("ip", drop...).CombinedOutput(); err != nil {
				t.Errorf("restore the edge API: %v: %s", err, out)
			}
			dropped = false
		}
	}
	t.Cleanup(undrop)
	// Bound by count and time: far more than the outage and convergence
	// need at this rate, so a stream that ends by its bound fails the test.
	stream := edgebed.StartStreamN(ctx, b.ClientHTTP(3*time.Second), url, 2, 200000, 3*time.Minute)
	defer func() { _ = stream.Stop() }() // on a failure; the test stops it itself otherwise
	otherStream := edgebed.StartStreamN(ctx, b.ClientHTTP(3*time.Second), otherURL, 1, 100000, 3*time.Minute)
	defer func() { _ = otherStream.Stop() }()
	// The Pods the scale-down removes serve through the outage and beyond
	// (a grace period longer than it, as a preStop sleep makes it): npl
	// cannot drain them on an edge it cannot reach, so a Pod that exited
	// meanwhile would cut the TCP connections HAProxy has just opened to
	// it (measured: 1 of ~2000 requests, EOF), as any server exit without a
	// drain does. Their members are the scale-down's change: disabled in
	// the model, still enabled on HAProxy until the API answers.
	pods, err := readyPods(ctx, client, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"45s"}}}`, cluster.AnnotationTerminationDelay)
		if _, err := client.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Services(ns).Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCond(t, 30*time.Second, "SyncFailed naming the edge", func() (bool, error) {
		cond, err := syncedCondition(ctx, client, ns, "web")
		if err != nil || cond == nil {
			return false, err
		}
		return cond.Status == metav1.ConditionFalse && cond.Reason == "SyncFailed" && strings.Contains(cond.Message, "edge "+b.EdgeURL), nil
	})
	cond, _ := syncedCondition(ctx, client, ns, "web")
	t.Logf("edge unreachable: condition %s: %s", cond.Reason, cond.Message)
	// Until 30 s of outage: HAProxy, read on its admin socket (the API
	// does not answer), keeps every server, and no request fails.
	checks := 0
	for time.Since(outage) < 30*time.Second {
		now, err := serversOf(ctx, e, webPool, otherPool)
		if err != nil {
			t.Fatal(err)
		}
		for _, pool := range []string{webPool, otherPool} {
			for _, s := range had[pool] {
				if !slices.Contains(now[pool], s) || !slices.Contains(now[pool+" enabled"], s) {
					t.Fatalf("%v into the outage, server %s/%s is gone from HAProxy or out of its rotation: changed because of the error (now %v)", time.Since(outage).Round(time.Second), pool, s, now)
				}
			}
		}
		if ok, failed := stream.Snapshot(); failed != 0 {
			t.Fatalf("%d of %d requests to web failed in the outage; errors %v", failed, ok+failed, stream.Errors)
		}
		if ok, failed := otherStream.Snapshot(); failed != 0 {
			t.Fatalf("%d of %d requests to other failed in the outage; errors %v", failed, ok+failed, otherStream.Errors)
		}
		checks++
		time.Sleep(time.Second)
	}
	cond, err = syncedCondition(ctx, client, ns, "web")
	if err != nil || cond == nil || cond.Reason != "SyncFailed" {
		t.Fatalf("after 30 s of outage the condition is %+v (%v), want SyncFailed", cond, err)
	}
	failed := map[string]float64{}
	for verb, n := range failedBefore {
		failed[verb] = calls(verb) - n
	}
	ok, _ := stream.Snapshot()
	okOther, _ := otherStream.Snapshot()
	t.Logf("30 s of outage: %d checks of HAProxy found every server; failed provider calls %v; %d and %d requests, 0 failed", checks, failed, ok, okOther)
	// Several resyncs and garbage collections ran into the error.
	if failed["list"] < 2 || failed["ensure"] < 2 || failed["delete"] < 1 {
		t.Fatalf("in 30 s of outage npl-lbsync's failed calls were %v: want the resyncs' Ensures, garbage collection's Lists (2 or more each) and other's Delete", failed)
	}
	if _, err := client.CoreV1().Services(ns).Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Fatalf("Service other went while its load balancer could not be deleted: %v", err)
	}

	// other's VIP serves until the API answers again; then its delete is
	// applied, as it should.
	stopStream(t, otherStream)
	if otherStream.Failed != 0 {
		t.Fatalf("%d requests to other failed in the outage, want 0; errors %v", otherStream.Failed, otherStream.Errors)
	}

	// The API answers again: the scale-down and the delete converge.
	undrop()
	scaleAndConverge(t, client, b, ns, "web", url, 1)
	waitForCond(t, 60*time.Second, "Service other and its load balancer gone", func() (bool, error) {
		gone, err := serviceGone(ctx, client, ns, "other")
		if err != nil || !gone {
			return false, err
		}
		now, err := serversOf(ctx, e, webPool, otherPool)
		return err == nil && len(now[otherPool]) == 0 && len(now[webPool]) == 1, err // the scaled-down Pods' servers drained, then gone with them
	})
	waitForCond(t, 30*time.Second, "the condition True again", func() (bool, error) {
		cond, err := syncedCondition(ctx, client, ns, "web")
		return err == nil && cond != nil && cond.Status == metav1.ConditionTrue, err
	})
	stopStream(t, stream)
	t.Logf("edge API unreachable for 30 s, then back: %d requests to web (through the outage and the convergence), %d to other (through the outage), %d and %d failed; converged to 1 Pod, other deleted",
		stream.OK+stream.Failed, otherStream.OK+otherStream.Failed, stream.Failed, otherStream.Failed)
	if stream.Failed != 0 {
		t.Fatalf("%d requests to web failed, want 0; errors %v", stream.Failed, stream.Errors)
	}
}

// otherService is a second LoadBalancer Service of the class
// npl.io/<lbsync> over the Pods of the Deployment app.
func otherService(ns, name, app, lbsync string) *corev1.Service {
	s := lbService(ns, app, lbsync)
	s.Name = name
	return s
}

// serviceGone reports whether the Service's object is gone.
func serviceGone(ctx context.Context, client kubernetes.Interface, ns, name string) (bool, error) {
	_, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// serversOf reads, from HAProxy's admin socket on edge e, the servers of
// each of the backends, and under "<backend> enabled" those not drained
// nor in maintenance.
func serversOf(ctx context.Context, e *edgebed.EdgeHost, backends ...string) (map[string][]string, error) {
	sts, err := haproxy.ShowServersState(ctx, e.AdminSocket())
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, s := range sts {
		if slices.Contains(backends, s.Backend) {
			out[s.Backend] = append(out[s.Backend], s.Name)
			if s.Enabled() {
				out[s.Backend+" enabled"] = append(out[s.Backend+" enabled"], s.Name)
			}
		}
	}
	return out, nil
}
