package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/test/stack"
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
// Event NotServed and a condition naming it while its TCP port is served; an edge whose API does not answer for a while
// makes the Service SyncFailed with the edge's address, removes no member
// (requests keep landing on the Pods), and the change converges after.
func TestEndToEnd_statusOfTheHAProxyProvider(t *testing.T) {
	c, b := clusterBedUDP(t, "off")
	l := startLBSync(t, c, b, "e2e-haproxy-status")
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	d := webDeployment(ns, "web", 2)
	d.Spec.Template.Spec.Containers[0].Ports = append(d.Spec.Template.Spec.Containers[0].Ports,
		corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP})
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, "web", "e2e-haproxy-status"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip string
	waitForCond(t, 90*time.Second, "the Service's VIP", func() (bool, error) {
		s, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		vip = s.Status.LoadBalancer.Ingress[0].IP
		return true, nil
	})
	url := URL(vip, 80)
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

	// The edge API stops answering (its port dropped in the edge's own
	// namespace; HAProxy keeps serving): SyncFailed names the edge, no
	// member goes, and the scale-up converges once it answers again.
	drop := []string{"netns", "exec", b.EdgeNetns, "iptables", "-w", "-I", "INPUT", "-p", "tcp", "--dport", "8443", "-j", "DROP"}
	if out, err := exec.Command("ip", drop...).CombinedOutput(); err != nil {
		t.Fatalf("drop the edge API: %v: %s", err, out)
	}
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
	stream := StartStream(ctx, b.ClientHTTP(3*time.Second), url, 2, 3*time.Minute)
	dep, err := client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	three := int32(3)
	dep.Spec.Replicas = &three
	if _, err := client.AppsV1().Deployments(ns).Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCond(t, 60*time.Second, "SyncFailed naming the edge", func() (bool, error) {
		cond, err := syncedCondition(ctx, client, ns, "web")
		if err != nil || cond == nil {
			return false, err
		}
		return cond.Status == metav1.ConditionFalse && cond.Reason == "SyncFailed" && strings.Contains(cond.Message, "edge "+b.EdgeURL), nil
	})
	cond, _ := syncedCondition(ctx, client, ns, "web")
	t.Logf("edge unreachable: condition %s: %s", cond.Reason, cond.Message)
	ok, failed := stream.Snapshot()
	if failed != 0 {
		t.Fatalf("%d of %d requests failed while the edge API was unreachable; errors %v", failed, ok+failed, stream.Errors)
	}
	undrop()
	scaleAndConverge(t, client, b, ns, "web", url, 3)
	stopStream(t, stream)
	t.Logf("edge API unreachable, then back: %d requests, %d failed; converged to 3 Pods", stream.OK+stream.Failed, stream.Failed)
	if stream.Failed != 0 {
		t.Fatalf("%d requests failed, want 0; errors %v", stream.Failed, stream.Errors)
	}
}
