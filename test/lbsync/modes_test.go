package lbsync

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/mock"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestLBSync_nodePortAndClusterIPModes: in NodePort mode every Ready node is
// a member on the Service's nodePort; in ClusterIP mode every Ready Pod is a
// member on its targetPort. Neither opts the Service in to NodePortLocal.
func TestLBSync_nodePortAndClusterIPModes(t *testing.T) {
	e := lbsyncbed.Setup(t)
	np := e.StartExtra(t, "npl-lbsync-nodeport", "NodePort", "npl.io/np", "198.18.101.0/28", false)
	cip := e.StartExtra(t, "npl-lbsync-clusterip", "ClusterIP", "npl.io/cip", "198.18.102.0/28", false)
	ns := e.Namespace(t)
	e.Pod(t, ns, "a", e.NodeName(0), "")
	e.Pod(t, ns, "b", e.NodeName(1), "")
	e.CreateService(t, lbsyncbed.LBService(ns, "np", ptr.To("npl.io/np")))
	e.CreateService(t, lbsyncbed.LBService(ns, "cip", ptr.To("npl.io/cip")))

	var nodePort int32
	lbsyncbed.WaitFor(t, 20*time.Second, "nodePort allocated", func() (bool, error) {
		nodePort = e.Service(t, ns, "np").Spec.Ports[0].NodePort
		return nodePort != 0, nil
	})
	lbsyncbed.WaitPools(t, np, ns, "np", map[string][]lbmodel.Member{
		np.PoolName(ns, "np", lbmodel.TCP, 80): {lbsyncbed.Member(e.NodeIP(0), nodePort, true), lbsyncbed.Member(e.NodeIP(1), nodePort, true)},
	})
	var ipA, ipB string
	lbsyncbed.WaitFor(t, 20*time.Second, "pod IPs", func() (bool, error) {
		a, _ := e.Client.CoreV1().Pods(ns).Get(context.Background(), "a", metav1.GetOptions{})
		b, _ := e.Client.CoreV1().Pods(ns).Get(context.Background(), "b", metav1.GetOptions{})
		ipA, ipB = a.Status.PodIP, b.Status.PodIP
		return ipA != "" && ipB != "", nil
	})
	want := []lbmodel.Member{lbsyncbed.Member(ipA, 8080, true), lbsyncbed.Member(ipB, 8080, true)}
	if netip.MustParseAddr(ipB).Less(netip.MustParseAddr(ipA)) { // a pool lists members in numeric IP order
		want[0], want[1] = want[1], want[0]
	}
	lbsyncbed.WaitPools(t, cip, ns, "cip", map[string][]lbmodel.Member{cip.PoolName(ns, "cip", lbmodel.TCP, 80): want})
	for _, name := range []string{"np", "cip"} {
		if v := e.Service(t, ns, name).Annotations[contract.ServiceEnabledKey]; v != "" {
			t.Errorf("service %s opted in to NodePortLocal in a non-NPL mode", name)
		}
	}
}

// TestLBSync_garbageCollectsOrphans: a Service deleted while npl-lbsync was
// down leaves an orphan that the next start deletes, after its caches
// synced; the load balancers still claimed are not touched.
func TestLBSync_garbageCollectsOrphans(t *testing.T) {
	e := lbsyncbed.Setup(t)
	l := e.StartExtra(t, "npl-lbsync-gc", "NodePortLocal", "npl.io/gc", "198.18.103.0/28", false)
	ns := e.Namespace(t)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "keep", ptr.To("npl.io/gc")))
	e.CreateService(t, lbsyncbed.LBService(ns, "ghost", ptr.To("npl.io/gc")))
	for _, name := range []string{"keep", "ghost"} {
		lbsyncbed.WaitFor(t, 20*time.Second, name+" synced", func() (bool, error) {
			_, _, ok, err := lbsyncbed.Pools(l, ns, name)
			return ok, err
		})
	}
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	// Delete the Service behind npl-lbsync's back: drop the finalizer first.
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := e.Client.CoreV1().Services(ns).Patch(context.Background(), "ghost", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.CoreV1().Services(ns).Delete(context.Background(), "ghost", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 20*time.Second, "orphan deleted", func() (bool, error) {
		_, _, ok, err := lbsyncbed.Pools(l, ns, "ghost")
		return err == nil && !ok, err
	})
	st, err := l.MockState()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := stack.FindLoadBalancer(st, lbmodel.LoadBalancerName(l.ClusterName, ns, "keep")); !ok {
		t.Error("the claimed load balancer was deleted")
	}
	if st.Counters.Delete != 1 {
		t.Errorf("deletes after restart = %d, want exactly 1 (the orphan)", st.Counters.Delete)
	}
}

// TestLBSync_failingProviderLosesNothing: while every provider call fails
// for 30 s, nothing is deleted and the Service reports SyncFailed; the pools
// converge once the provider recovers. A restart afterwards writes nothing.
func TestLBSync_failingProviderLosesNothing(t *testing.T) {
	e := lbsyncbed.Setup(t)
	l := e.StartExtra(t, "npl-lbsync-faults", "NodePortLocal", "npl.io/faults", "198.18.104.0/28", false)
	ns := e.Namespace(t)
	ip := e.NodeIP(0)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
	e.Pod(t, ns, "b", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61001, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", ptr.To("npl.io/faults")))
	pool := l.PoolName(ns, "web", lbmodel.TCP, 80)
	lbsyncbed.WaitPools(t, l, ns, "web", map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true), lbsyncbed.Member(ip, 61001, true)}})

	if err := l.MockFault(mock.FaultRequest{FailFor: "30s"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.Pod(t, ns, "c", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61002, "tcp")))
	e.SetReady(t, ns, "a", false)
	lbsyncbed.WaitFor(t, 20*time.Second, "SyncFailed condition", func() (bool, error) {
		c := lbsyncbed.Condition(e.Service(t, ns, "web"))
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "SyncFailed", nil
	})
	for time.Since(start) < 25*time.Second {
		got, _, ok, err := lbsyncbed.Pools(l, ns, "web")
		if err != nil || !ok || len(got[pool]) != 2 {
			t.Fatalf("during the outage the pool changed: %v (ok %v, err %v)", got, ok, err)
		}
		time.Sleep(time.Second)
	}
	st, err := l.MockState()
	if err != nil {
		t.Fatalf("read the mock's counters after the outage: %v", err)
	}
	if st.Counters.Delete != 0 {
		t.Errorf("deletes during the outage: %d", st.Counters.Delete)
	}
	// Recovery within the capped backoff (30 s) after the window ends.
	deadline := time.Now().Add(50 * time.Second)
	want := map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61001, true), lbsyncbed.Member(ip, 61002, true)}}
	for {
		got, _, _, _ := lbsyncbed.Pools(l, ns, "web")
		if len(got[pool]) == 2 && got[pool][0] == want[pool][0] && got[pool][1] == want[pool][1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no convergence after the outage: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	lbsyncbed.WaitFor(t, 20*time.Second, "Synced condition back", func() (bool, error) {
		c := lbsyncbed.Condition(e.Service(t, ns, "web"))
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})

	// A restart with nothing changed makes no write and no delete. Ready
	// means the first sync is done: every Service synced once, then the
	// garbage collected (a List).
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err = l.MockState()
	if err != nil {
		t.Fatal(err)
	}
	if st.Counters.Writes != 0 || st.Counters.Delete != 0 || st.Counters.Ensure == 0 || st.Counters.List == 0 {
		t.Errorf("after a restart with no change: %+v, want ensures and a list but 0 writes and 0 deletes", st.Counters)
	}
}

// TestLBSync_leaderElectionHandsOver: of two replicas only the leader calls
// the provider. When the leader dies, the follower takes over once the Lease
// expires; when the leader stops gracefully, it releases the Lease and the
// follower takes over at its next retry. A take-over with nothing changed
// writes and deletes nothing (on Avi a delete and re-create would also show
// as new uuids, though the mock would hand out the same VIP again), and
// convergence continues under the new leader. Run against the mock and the
// Avi simulator.
func TestLBSync_leaderElectionHandsOver(t *testing.T) {
	for _, provider := range []string{"mock", "avi"} {
		t.Run(provider, func(t *testing.T) { testHandOver(t, provider) })
	}
}

// Take-over bounds. A follower tries to acquire the Lease every retry
// period stretched by up to JitterFactor; it deems the Lease expired a
// lease duration after it last saw it renewed, which it sees at its next
// try after the renewal. A released Lease is free at the next try.
const (
	retryBound    = stack.RetryPeriod + time.Duration(leaderelection.JitterFactor*float64(stack.RetryPeriod))
	pollSlack     = 500 * time.Millisecond
	takeOverBound = stack.LeaseDuration + 2*retryBound + pollSlack
	releaseBound  = retryBound + time.Second
)

func testHandOver(t *testing.T, provider string) {
	e := lbsyncbed.Setup(t)
	const vips = "198.18.105.0/28"
	backend, err := stack.StartBackend(provider, t.TempDir(), netip.MustParsePrefix(vips))
	if err != nil {
		t.Fatal(err)
	}
	stack.CloseAtEnd(t, backend)
	cluster := lbsyncbed.ClusterName + "-ha-" + provider
	cfg := lbsyncbed.ConfigWith(cluster, "NodePortLocal", "npl.io/ha-"+provider, vips, backend.ProviderConfig())
	a := e.StartSyncer(t, "npl-lbsync-ha-"+provider+"-a", cluster, cfg, true)
	b := e.StartSyncer(t, "npl-lbsync-ha-"+provider+"-b", cluster, cfg, true)
	ns := e.Namespace(t)
	ip := e.NodeIP(0)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", ptr.To("npl.io/ha-"+provider)))
	lbName := lbmodel.LoadBalancerName(cluster, ns, "web")
	pool := lbmodel.PoolName(lbName, lbmodel.TCP, 80)

	leader, follower := waitLeader(t, 30*time.Second, a, b)
	waitBackendPools(t, backend, lbName, map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true)}})
	var vip string
	lbsyncbed.WaitFor(t, 20*time.Second, "the leader wrote the VIP", func() (bool, error) {
		in := e.Service(t, ns, "web").Status.LoadBalancer.Ingress
		if len(in) == 1 {
			vip = in[0].IP
		}
		return vip != "", nil
	})
	if n, err := follower.Count("npl_lbsync_provider_calls_total"); err != nil || n != 0 {
		t.Errorf("the follower called the provider %v times (err %v)", n, err)
	}

	// The leader dies: the follower takes over once the Lease expires, and
	// its first sync (every Service, then garbage collection) writes nothing.
	before := lbsyncbed.Snapshot(t, backend, lbName)
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, takeOverBound-time.Since(killed), "the follower takes over the expired Lease", func() (bool, error) {
		v, err := follower.Metric("npl_lbsync_leader")
		return v == 1, err
	})
	t.Logf("%s: take-over %s after the kill (bound %s)", provider, time.Since(killed).Round(10*time.Millisecond), takeOverBound)
	lbsyncbed.WaitFor(t, 20*time.Second, "the new leader's first sync", func() (bool, error) { return follower.Ready(), nil })
	before.Unchanged(t, backend, follower, "a take-over after a crash")

	// Convergence continues under the new leader.
	e.Pod(t, ns, "b", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61001, "tcp")))
	both := map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true), lbsyncbed.Member(ip, 61001, true)}}
	waitBackendPools(t, backend, lbName, both)
	if _, got, _, _ := backend.Pools(lbName); len(got) != 1 || got[0] != vip {
		t.Errorf("VIP changed in the handover: %s -> %v", vip, got)
	}
	if in := e.Service(t, ns, "web").Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IP != vip {
		t.Errorf("status VIP after the handover: %v, want %s", in, vip)
	}

	// The dead replica comes back as a follower; the leader stops
	// gracefully and releases the Lease: the take-over is at the next try.
	if err := leader.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := leader.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, err := leader.Metric("npl_lbsync_leader"); err != nil || v != 0 {
		t.Fatalf("the restarted replica leads (%v, err %v) while the other holds the Lease", v, err)
	}
	before = lbsyncbed.Snapshot(t, backend, lbName)
	stopped := time.Now()
	if err := follower.Stop(); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, releaseBound-time.Since(stopped), "the take-over of the released Lease", func() (bool, error) {
		v, err := leader.Metric("npl_lbsync_leader")
		return v == 1, err
	})
	t.Logf("%s: take-over %s after SIGTERM (bound %s)", provider, time.Since(stopped).Round(10*time.Millisecond), releaseBound)
	lbsyncbed.WaitFor(t, 20*time.Second, "the new leader's first sync", func() (bool, error) { return leader.Ready(), nil })
	before.Unchanged(t, backend, leader, "a take-over after a graceful stop")
	if got, _, _, err := backend.Pools(lbName); err != nil || !cmp.Equal(got, both) {
		t.Errorf("pools after the second take-over (err %v), -want +got:\n%s", err, cmp.Diff(both, got))
	}
}

// waitLeader waits until exactly one of a and b leads and returns it first.
func waitLeader(t *testing.T, d time.Duration, a, b *lbsyncbed.Syncer) (leader, follower *lbsyncbed.Syncer) {
	t.Helper()
	lbsyncbed.WaitFor(t, d, "a leader", func() (bool, error) {
		va, _ := a.Metric("npl_lbsync_leader")
		vb, _ := b.Metric("npl_lbsync_leader")
		switch {
		case va == 1 && vb == 0:
			leader, follower = a, b
		case vb == 1 && va == 0:
			leader, follower = b, a
		default:
			return false, nil
		}
		return true, nil
	})
	return leader, follower
}

// waitBackendPools waits until the load balancer itself holds exactly want.
func waitBackendPools(t *testing.T, backend stack.Backend, lbName string, want map[string][]lbmodel.Member) {
	t.Helper()
	var got map[string][]lbmodel.Member
	lbsyncbed.WaitFor(t, 20*time.Second, "the pools of "+lbName, func() (bool, error) {
		var ok bool
		var err error
		got, _, ok, err = backend.Pools(lbName)
		return err == nil && ok && cmp.Equal(want, got), err
	})
}

// TestLBSync_drainOutlivesThePod: with drainSeconds longer than the Pod's
// termination, the member stays disabled after the Pod is gone, until the
// drain period ends.
func TestLBSync_drainOutlivesThePod(t *testing.T) {
	e := lbsyncbed.Setup(t)
	// Long enough for the Pod to go (TerminationDelay, 4 s) and be synced.
	const drain = 15 * time.Second
	l := e.StartExtra(t, "npl-lbsync-drain", "NodePortLocal", "npl.io/drain", "198.18.106.0/28", false,
		"drainSeconds: 1", fmt.Sprintf("drainSeconds: %d", int(drain.Seconds())))
	ns := e.Namespace(t)
	ip := e.NodeIP(0)
	e.Pod(t, ns, "stay", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
	e.Pod(t, ns, "leave", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61001, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", ptr.To("npl.io/drain")))
	pool := l.PoolName(ns, "web", lbmodel.TCP, 80)
	lbsyncbed.WaitPools(t, l, ns, "web", map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true), lbsyncbed.Member(ip, 61001, true)}})
	deleted := time.Now()
	if err := e.Client.CoreV1().Pods(ns).Delete(context.Background(), "leave", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	draining := map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true), lbsyncbed.Member(ip, 61001, false)}}
	lbsyncbed.WaitPools(t, l, ns, "web", draining)
	lbsyncbed.WaitFor(t, 20*time.Second, "the Pod gone", func() (bool, error) {
		_, err := e.Client.CoreV1().Pods(ns).Get(context.Background(), "leave", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	// npl-lbsync has synced the Service since the Pod went: the member stays.
	e.SyncedAfter(t, "pods", ns, "stay", l)
	if since := time.Since(deleted); since >= drain {
		t.Fatalf("the Pod took %s to go and be synced, longer than the drain period %s: nothing left to check", since.Round(time.Millisecond), drain)
	}
	got, _, _, err := lbsyncbed.Pools(l, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(got, draining) {
		t.Errorf("the draining member left with its Pod, %s after the deletion (-want +got):\n%s",
			time.Since(deleted).Round(time.Millisecond), cmp.Diff(draining, got))
	}
	stayOnly := map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true)}}
	lbsyncbed.WaitFor(t, drain+20*time.Second, "the draining member removed", func() (bool, error) {
		got, _, ok, err := lbsyncbed.Pools(l, ns, "web")
		return ok && cmp.Equal(got, stayOnly), err
	})
	if d := time.Since(deleted); d < drain-time.Second {
		t.Errorf("the draining member was removed %s after the deletion, before the %s drain period", d.Round(time.Second), drain)
	}
}

// TestLBSync_installationsDoNotFight: a Service claimed and opted in by
// another installation (another class) is left alone by this one: once
// synced, nobody writes it again.
func TestLBSync_installationsDoNotFight(t *testing.T) {
	e := lbsyncbed.Setup(t)
	peer := e.StartExtra(t, "npl-lbsync-peer", "NodePortLocal", "npl.io/peer", "198.18.108.0/28", false)
	ns := e.Namespace(t)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", ptr.To("npl.io/peer")))
	lbsyncbed.WaitPools(t, peer, ns, "web", map[string][]lbmodel.Member{peer.PoolName(ns, "web", lbmodel.TCP, 80): {lbsyncbed.Member(e.NodeIP(0), 61000, true)}})
	lbsyncbed.WaitFor(t, 20*time.Second, "the peer's claim, opt-in and status", func() (bool, error) {
		s := e.Service(t, ns, "web")
		c := lbsyncbed.Condition(s)
		return s.Annotations[contract.ClaimedByKey] == peer.ClusterName && s.Annotations[contract.ServiceEnabledKey] == "true" &&
			len(s.Status.LoadBalancer.Ingress) == 1 && c != nil && c.Status == metav1.ConditionTrue, nil
	})
	// Both have synced the Service since a change of it: neither wrote.
	rv := e.SyncedAfter(t, "services", ns, "web", peer, e.NPL)
	if s := e.Service(t, ns, "web"); s.ResourceVersion != rv {
		t.Errorf("the Service was written again after it synced (annotations %v): installations fight", s.Annotations)
	}
}
