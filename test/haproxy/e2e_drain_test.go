package haproxy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// podServer is the HAProxy server name of the Pod's member for podPort:
// its NodePortLocal mapping, from the Pod annotation npl-agent wrote.
func podServer(ctx context.Context, client kubernetes.Interface, ns, pod string, podPort int32) (string, error) {
	p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	entries, err := contract.Parse(p.Annotations[contract.PodKey])
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.PodPort == int(podPort) {
			return haproxy.ServerName(lbmodel.Member{IP: e.NodeIP, Port: int32(e.NodePort)}), nil
		}
	}
	return "", fmt.Errorf("pod %s has no mapping of port %d", pod, podPort)
}

// podGone reports whether the Pod's object is gone (the stand-in kubelet
// removes it when its termination delay ends).
func podGone(ctx context.Context, client kubernetes.Interface, ns, pod string) (bool, error) {
	_, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// syncedSince makes npl-lbsync sync the Service again (an annotation
// changes) and waits until it finished that sync: whatever it decided
// then, it decided after the moment this is called.
func syncedSince(t *testing.T, client kubernetes.Interface, l *stack.LBSync, ns, svc string) {
	t.Helper()
	n, err := l.Syncs()
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.npl.io/poke":%q}}}`, strconv.FormatInt(time.Now().UnixNano(), 10))
	if _, err := client.CoreV1().Services(ns).Patch(context.Background(), svc, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.WaitSyncs(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// TestEndToEnd_terminatingPodIsDrainedThroughHAProxy: npl-agent,
// npl-lbsync (drainSeconds 10) and npl-edge on the local cluster. Two Pods
// of a Service are deleted with a grace period; the stand-in kubelet keeps
// one terminating (serving) for 20 s, the other for 1 s. As HAProxy's
// runtime state ("show servers state") shows it:
//   - both servers go to state drain while their Pods terminate, and take
//     none of N requests through the VIP (the answers and HAProxy's
//     per-server counters agree), none failing;
//   - the one whose Pod terminates longer than drainSeconds is removed only
//     once its Pod is gone (never seen absent while the Pod exists);
//   - the one whose Pod went at once is still there draining after
//     npl-lbsync synced the Service since the Pod went, and is removed
//     after drainSeconds.
//
// Neither removal reloads HAProxy.
func TestEndToEnd_terminatingPodIsDrainedThroughHAProxy(t *testing.T) {
	c, b := clusterBed(t)
	name := "e2e-haproxy-drain"
	const drain = 10 * time.Second
	l := startLBSyncTimed(t, c, b, name, "npl-lbsync-"+name, false, time.Minute, drain)
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	d := webDeployment(ns, "web", 3)
	grace := int64(60)
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = &grace
	url := serviceVIP(t, client, b, ns, name, d)
	pool := lbmodel.PoolName(lbmodel.LoadBalancerName(name, ns, "web"), lbmodel.TCP, 80)
	e := b.Edges[0]

	pods, err := readyPods(ctx, client, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	long, short := pods[0], pods[1]
	servers := map[string]string{}
	for pod, delay := range map[string]string{long: "20s", short: "1s"} {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, cluster.AnnotationTerminationDelay, delay)
		if _, err := client.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if servers[pod], err = podServer(ctx, client, ns, pod, 8080); err != nil {
			t.Fatal(err)
		}
	}
	before := status(t, b)
	deleted := time.Now()
	for _, pod := range []string{long, short} {
		if err := client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Draining: in state drain in HAProxy, no new request.
	waitForCond(t, 30*time.Second, long+" and "+short+" in state drain on HAProxy", func() (bool, error) {
		for _, pod := range []string{long, short} {
			if s, err := serverState(ctx, e, pool, servers[pod]); err != nil || !s.Draining() {
				return false, err
			}
		}
		return true, nil
	})
	const n = 60
	s0, err := e.ServerSessions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	got, err := answeredBy(ctx, b, url, n)
	if err != nil {
		t.Fatalf("requests while %s drains: %v (answered %v)", long, err, got)
	}
	s1, err := e.ServerSessions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	sessions := sessionsDelta(s0, s1)
	t.Logf("%s and %s draining: %d requests, 0 failed, per Pod %v, connections per server %v", long, short, n, got, sessions)
	if got[long] != 0 || got[short] != 0 || sessions[servers[long]] != 0 || sessions[servers[short]] != 0 {
		t.Fatalf("a draining Pod took new requests: per Pod %v, connections per server %v", got, sessions)
	}
	if s, err := serverState(ctx, e, pool, servers[long]); err != nil || !s.Draining() {
		t.Fatalf("%s no longer draining after the requests (%+v, %v): nothing was proven", long, s, err)
	}
	if gone, err := podGone(ctx, client, ns, long); err != nil || gone {
		t.Fatalf("%s gone already (%v, %v): its drain was not under test", long, gone, err)
	}

	// The short one: its Pod went at once; its member stays draining for
	// drainSeconds, also across a sync after the Pod went.
	waitForCond(t, 30*time.Second, short+" gone", func() (bool, error) { return podGone(ctx, client, ns, short) })
	syncedSince(t, client, l, ns, "web")
	if s, err := serverState(ctx, e, pool, servers[short]); err != nil || !s.Draining() {
		if time.Since(deleted) < drain {
			t.Fatalf("%s's Pod gone and the Service synced %v after the deletion: its server is %+v (%v), want draining until drainSeconds %v",
				short, time.Since(deleted).Round(time.Millisecond), s, err, drain)
		}
		t.Fatalf("the sync after %s's Pod went came after drainSeconds (%v): nothing left to check", short, time.Since(deleted).Round(time.Millisecond))
	}

	// The long one is removed when its Pod is gone, never while it exists;
	// the short one after drainSeconds.
	var shortRemoved, longRemoved time.Duration
	waitForCond(t, 90*time.Second, "both draining servers removed", func() (bool, error) {
		sts, err := haproxy.ShowServersState(ctx, e.AdminSocket())
		if err != nil {
			return false, err
		}
		has := func(server string) bool {
			return slices.ContainsFunc(sts, func(s haproxy.ServerState) bool { return s.Backend == pool && s.Name == server })
		}
		if shortRemoved == 0 && !has(servers[short]) {
			shortRemoved = time.Since(deleted)
		}
		if longRemoved == 0 && !has(servers[long]) {
			gone, err := podGone(ctx, client, ns, long)
			if err != nil {
				return false, err
			}
			if !gone {
				t.Fatalf("%s's server removed while the Pod still terminates (%v after the deletion)", long, time.Since(deleted).Round(time.Millisecond))
			}
			longRemoved = time.Since(deleted)
		}
		return shortRemoved != 0 && longRemoved != 0, nil
	})
	t.Logf("removed from HAProxy after the deletion: %s (Pod gone after 1 s, drainSeconds %v) after %v; %s (Pod gone after 20 s) after %v",
		short, drain, shortRemoved.Round(100*time.Millisecond), long, longRemoved.Round(100*time.Millisecond))
	if after := status(t, b); after.Reloads != before.Reloads {
		t.Errorf("the drains reloaded HAProxy %d times, want 0", after.Reloads-before.Reloads)
	}
	scaleAndConverge(t, client, b, ns, "web", url, 3)
}
