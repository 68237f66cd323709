package lbsync

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/mock"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// startExtra starts another npl-lbsync for its own class, stopped at the end.
func (e *env) startExtra(t *testing.T, name, serviceType, class, vipPool string, leaderElect bool, replace ...string) *syncer {
	t.Helper()
	cluster := clusterName + "-" + strings.TrimPrefix(class, "npl.io/")
	cfg := strings.NewReplacer(replace...).Replace(e.config(cluster, serviceType, class, vipPool))
	return e.startSyncer(t, name, cluster, cfg, leaderElect)
}

// startSyncer starts an npl-lbsync of a cluster name with a configuration,
// stopped at the end of the test.
func (e *env) startSyncer(t *testing.T, name, cluster, cfg string, leaderElect bool) *syncer {
	t.Helper()
	l, err := stack.StartLBSync(context.Background(), e.c, stack.LBSyncOptions{
		Name: name, Config: cfg, LeaderElect: leaderElect,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s log tail:\n%s", name, l.Tail(40))
		}
		_ = l.Stop()
	})
	return &syncer{LBSync: l, cluster: cluster}
}

// TestLBSync_nodePortAndClusterIPModes: in NodePort mode every Ready node is
// a member on the Service's nodePort; in ClusterIP mode every Ready Pod is a
// member on its targetPort. Neither opts the Service in to NodePortLocal.
func TestLBSync_nodePortAndClusterIPModes(t *testing.T) {
	e := setup(t)
	np := e.startExtra(t, "npl-lbsync-nodeport", "NodePort", "npl.io/np", "198.18.101.0/28", false)
	cip := e.startExtra(t, "npl-lbsync-clusterip", "ClusterIP", "npl.io/cip", "198.18.102.0/28", false)
	ns := e.namespace(t)
	e.pod(t, ns, "a", e.nodeName(0), "")
	e.pod(t, ns, "b", e.nodeName(1), "")
	e.createService(t, lbService(ns, "np", ptr("npl.io/np")))
	e.createService(t, lbService(ns, "cip", ptr("npl.io/cip")))

	var nodePort int32
	waitFor(t, 20*time.Second, "nodePort allocated", func() (bool, error) {
		nodePort = e.service(t, ns, "np").Spec.Ports[0].NodePort
		return nodePort != 0, nil
	})
	waitPools(t, np, ns, "np", map[string][]lbmodel.Member{
		np.poolName(ns, "np", lbmodel.TCP, 80): {member(e.nodeIP(0), nodePort, true), member(e.nodeIP(1), nodePort, true)},
	})
	var ipA, ipB string
	waitFor(t, 20*time.Second, "pod IPs", func() (bool, error) {
		a, _ := e.client.CoreV1().Pods(ns).Get(context.Background(), "a", metav1.GetOptions{})
		b, _ := e.client.CoreV1().Pods(ns).Get(context.Background(), "b", metav1.GetOptions{})
		ipA, ipB = a.Status.PodIP, b.Status.PodIP
		return ipA != "" && ipB != "", nil
	})
	want := []lbmodel.Member{member(ipA, 8080, true), member(ipB, 8080, true)}
	if netip.MustParseAddr(ipB).Less(netip.MustParseAddr(ipA)) { // a pool lists members in numeric IP order
		want[0], want[1] = want[1], want[0]
	}
	waitPools(t, cip, ns, "cip", map[string][]lbmodel.Member{cip.poolName(ns, "cip", lbmodel.TCP, 80): want})
	for _, name := range []string{"np", "cip"} {
		if v := e.service(t, ns, name).Annotations[contract.ServiceEnabledKey]; v != "" {
			t.Errorf("service %s opted in to NodePortLocal in a non-NPL mode", name)
		}
	}
}

// TestLBSync_garbageCollectsOrphans: a Service deleted while npl-lbsync was
// down leaves an orphan that the next start deletes, after its caches
// synced; the load balancers still claimed are not touched.
func TestLBSync_garbageCollectsOrphans(t *testing.T) {
	e := setup(t)
	l := e.startExtra(t, "npl-lbsync-gc", "NodePortLocal", "npl.io/gc", "198.18.103.0/28", false)
	ns := e.namespace(t)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, e.nodeIP(0), 61000, "tcp")))
	e.createService(t, lbService(ns, "keep", ptr("npl.io/gc")))
	e.createService(t, lbService(ns, "ghost", ptr("npl.io/gc")))
	for _, name := range []string{"keep", "ghost"} {
		waitFor(t, 20*time.Second, name+" synced", func() (bool, error) {
			_, _, ok, err := pools(l, ns, name)
			return ok, err
		})
	}
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	// Delete the Service behind npl-lbsync's back: drop the finalizer first.
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := e.client.CoreV1().Services(ns).Patch(context.Background(), "ghost", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.client.CoreV1().Services(ns).Delete(context.Background(), "ghost", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "orphan deleted", func() (bool, error) {
		_, _, ok, err := pools(l, ns, "ghost")
		return err == nil && !ok, err
	})
	st, err := l.MockState()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := stack.FindLoadBalancer(st, lbmodel.LoadBalancerName(l.cluster, ns, "keep")); !ok {
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
	e := setup(t)
	l := e.startExtra(t, "npl-lbsync-faults", "NodePortLocal", "npl.io/faults", "198.18.104.0/28", false)
	ns := e.namespace(t)
	ip := e.nodeIP(0)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, ip, 61000, "tcp")))
	e.pod(t, ns, "b", e.nodeName(0), list(entry(8080, ip, 61001, "tcp")))
	e.createService(t, lbService(ns, "web", ptr("npl.io/faults")))
	pool := l.poolName(ns, "web", lbmodel.TCP, 80)
	waitPools(t, l, ns, "web", map[string][]lbmodel.Member{pool: {member(ip, 61000, true), member(ip, 61001, true)}})

	if err := l.MockFault(mock.FaultRequest{FailFor: "30s"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.pod(t, ns, "c", e.nodeName(0), list(entry(8080, ip, 61002, "tcp")))
	e.setReady(t, ns, "a", false)
	waitFor(t, 20*time.Second, "SyncFailed condition", func() (bool, error) {
		c := condition(e.service(t, ns, "web"))
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "SyncFailed", nil
	})
	for time.Since(start) < 25*time.Second {
		got, _, ok, err := pools(l, ns, "web")
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
	want := map[string][]lbmodel.Member{pool: {member(ip, 61001, true), member(ip, 61002, true)}}
	for {
		got, _, _, _ := pools(l, ns, "web")
		if len(got[pool]) == 2 && got[pool][0] == want[pool][0] && got[pool][1] == want[pool][1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no convergence after the outage: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitFor(t, 20*time.Second, "Synced condition back", func() (bool, error) {
		c := condition(e.service(t, ns, "web"))
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
	e := setup(t)
	const vips = "198.18.105.0/28"
	backend, err := stack.StartBackend(provider, t.TempDir(), netip.MustParsePrefix(vips))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(backend.Close)
	cluster := clusterName + "-ha-" + provider
	cfg := configWith(cluster, "NodePortLocal", "npl.io/ha-"+provider, vips, backend.ProviderConfig())
	a := e.startSyncer(t, "npl-lbsync-ha-"+provider+"-a", cluster, cfg, true)
	b := e.startSyncer(t, "npl-lbsync-ha-"+provider+"-b", cluster, cfg, true)
	ns := e.namespace(t)
	ip := e.nodeIP(0)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, ip, 61000, "tcp")))
	e.createService(t, lbService(ns, "web", ptr("npl.io/ha-"+provider)))
	lbName := lbmodel.LoadBalancerName(cluster, ns, "web")
	pool := lbmodel.PoolName(lbName, lbmodel.TCP, 80)

	leader, follower := waitLeader(t, 30*time.Second, a, b)
	waitBackendPools(t, backend, lbName, map[string][]lbmodel.Member{pool: {member(ip, 61000, true)}})
	var vip string
	waitFor(t, 20*time.Second, "the leader wrote the VIP", func() (bool, error) {
		in := e.service(t, ns, "web").Status.LoadBalancer.Ingress
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
	before := snapshot(t, backend, lbName)
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, takeOverBound-time.Since(killed), "the follower takes over the expired Lease", func() (bool, error) {
		v, err := follower.Metric("npl_lbsync_leader")
		return v == 1, err
	})
	t.Logf("%s: take-over %s after the kill (bound %s)", provider, time.Since(killed).Round(10*time.Millisecond), takeOverBound)
	waitFor(t, 20*time.Second, "the new leader's first sync", func() (bool, error) { return follower.Ready(), nil })
	before.unchanged(t, backend, follower, "a take-over after a crash")

	// Convergence continues under the new leader.
	e.pod(t, ns, "b", e.nodeName(0), list(entry(8080, ip, 61001, "tcp")))
	both := map[string][]lbmodel.Member{pool: {member(ip, 61000, true), member(ip, 61001, true)}}
	waitBackendPools(t, backend, lbName, both)
	if _, got, _, _ := backend.Pools(lbName); len(got) != 1 || got[0] != vip {
		t.Errorf("VIP changed in the handover: %s -> %v", vip, got)
	}
	if in := e.service(t, ns, "web").Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IP != vip {
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
	before = snapshot(t, backend, lbName)
	stopped := time.Now()
	if err := follower.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, releaseBound-time.Since(stopped), "the take-over of the released Lease", func() (bool, error) {
		v, err := leader.Metric("npl_lbsync_leader")
		return v == 1, err
	})
	t.Logf("%s: take-over %s after SIGTERM (bound %s)", provider, time.Since(stopped).Round(10*time.Millisecond), releaseBound)
	waitFor(t, 20*time.Second, "the new leader's first sync", func() (bool, error) { return leader.Ready(), nil })
	before.unchanged(t, backend, leader, "a take-over after a graceful stop")
	if got, _, _, err := backend.Pools(lbName); err != nil || !cmp.Equal(got, both) {
		t.Errorf("pools after the second take-over (err %v), -want +got:\n%s", err, cmp.Diff(both, got))
	}
}

// waitLeader waits until exactly one of a and b leads and returns it first.
func waitLeader(t *testing.T, d time.Duration, a, b *syncer) (leader, follower *syncer) {
	t.Helper()
	waitFor(t, d, "a leader", func() (bool, error) {
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
	waitFor(t, 20*time.Second, "the pools of "+lbName, func() (bool, error) {
		var ok bool
		var err error
		got, _, ok, err = backend.Pools(lbName)
		return err == nil && ok && cmp.Equal(want, got), err
	})
}

// backendState is what a take-over must not change: the count of writes the
// load balancer received (simulators), its objects' identities (Avi), its
// pools and VIPs.
type backendState struct {
	lbName     string
	writes     int
	identities map[string]string
	pools      map[string][]lbmodel.Member
	vips       []string
}

func snapshot(t *testing.T, backend stack.Backend, lbName string) backendState {
	t.Helper()
	st := backendState{writes: backend.Writes()}
	if id, ok := backend.(stack.Identified); ok {
		st.identities = id.Identities(lbName)
		if len(st.identities) == 0 {
			t.Fatalf("no object of %s on the %s simulator", lbName, backend.Name())
		}
	}
	var ok bool
	var err error
	if st.pools, st.vips, ok, err = backend.Pools(lbName); err != nil || !ok {
		t.Fatalf("read the load balancer %s: ok %v, err %v", lbName, ok, err)
	}
	st.lbName = lbName
	return st
}

// unchanged checks that the new leader, whose first sync is done, called
// the provider but wrote and deleted nothing.
func (st backendState) unchanged(t *testing.T, backend stack.Backend, leader *syncer, what string) {
	t.Helper()
	ensures, err := leader.Count("npl_lbsync_provider_calls_total", `verb="ensure"`)
	if err != nil || ensures == 0 {
		t.Errorf("%s: the new leader made %v Ensure calls (err %v), want at least one", what, ensures, err)
	}
	if backend.Name() == "mock" {
		// The mock counts the calls of the process it runs in.
		c, err := leader.MockState()
		if err != nil {
			t.Fatalf("%s: read the mock's counters: %v", what, err)
		}
		if c.Counters.Writes != 0 || c.Counters.Delete != 0 || c.Counters.Ensure == 0 {
			t.Errorf("%s: mock counters %+v, want Ensures but 0 writes and 0 deletes", what, c.Counters)
		}
	} else if got := backend.Writes(); got != st.writes {
		t.Errorf("%s: %d writes to the %s simulator, want 0", what, got-st.writes, backend.Name())
	}
	if id, ok := backend.(stack.Identified); ok {
		if got := id.Identities(st.lbName); !cmp.Equal(got, st.identities) {
			t.Errorf("%s: objects re-created (-before +after):\n%s", what, cmp.Diff(st.identities, got))
		}
	}
	pools, vips, ok, err := backend.Pools(st.lbName)
	if err != nil || !ok || !cmp.Equal(pools, st.pools) || !cmp.Equal(vips, st.vips) {
		t.Errorf("%s: load balancer changed: pools %v VIPs %v (ok %v, err %v), before %v %v", what, pools, vips, ok, err, st.pools, st.vips)
	}
}

// TestLBSync_drainOutlivesThePod: with drainSeconds longer than the Pod's
// termination, the member stays disabled after the Pod is gone, until the
// drain period ends.
func TestLBSync_drainOutlivesThePod(t *testing.T) {
	e := setup(t)
	// Long enough for the Pod to go (TerminationDelay, 4 s) and be synced.
	const drain = 15 * time.Second
	l := e.startExtra(t, "npl-lbsync-drain", "NodePortLocal", "npl.io/drain", "198.18.106.0/28", false,
		"drainSeconds: 1", fmt.Sprintf("drainSeconds: %d", int(drain.Seconds())))
	ns := e.namespace(t)
	ip := e.nodeIP(0)
	e.pod(t, ns, "stay", e.nodeName(0), list(entry(8080, ip, 61000, "tcp")))
	e.pod(t, ns, "leave", e.nodeName(0), list(entry(8080, ip, 61001, "tcp")))
	e.createService(t, lbService(ns, "web", ptr("npl.io/drain")))
	pool := l.poolName(ns, "web", lbmodel.TCP, 80)
	waitPools(t, l, ns, "web", map[string][]lbmodel.Member{pool: {member(ip, 61000, true), member(ip, 61001, true)}})
	deleted := time.Now()
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), "leave", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	draining := map[string][]lbmodel.Member{pool: {member(ip, 61000, true), member(ip, 61001, false)}}
	waitPools(t, l, ns, "web", draining)
	waitFor(t, 20*time.Second, "the Pod gone", func() (bool, error) {
		_, err := e.client.CoreV1().Pods(ns).Get(context.Background(), "leave", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	// npl-lbsync has synced the Service since the Pod went: the member stays.
	e.syncedAfter(t, "pods", ns, "stay", l)
	if since := time.Since(deleted); since >= drain {
		t.Fatalf("the Pod took %s to go and be synced, longer than the drain period %s: nothing left to check", since.Round(time.Millisecond), drain)
	}
	got, _, _, err := pools(l, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(got, draining) {
		t.Errorf("the draining member left with its Pod, %s after the deletion (-want +got):\n%s",
			time.Since(deleted).Round(time.Millisecond), cmp.Diff(draining, got))
	}
	stayOnly := map[string][]lbmodel.Member{pool: {member(ip, 61000, true)}}
	waitFor(t, drain+20*time.Second, "the draining member removed", func() (bool, error) {
		got, _, ok, err := pools(l, ns, "web")
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
	e := setup(t)
	peer := e.startExtra(t, "npl-lbsync-peer", "NodePortLocal", "npl.io/peer", "198.18.108.0/28", false)
	ns := e.namespace(t)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, e.nodeIP(0), 61000, "tcp")))
	e.createService(t, lbService(ns, "web", ptr("npl.io/peer")))
	waitPools(t, peer, ns, "web", map[string][]lbmodel.Member{peer.poolName(ns, "web", lbmodel.TCP, 80): {member(e.nodeIP(0), 61000, true)}})
	waitFor(t, 20*time.Second, "the peer's claim, opt-in and status", func() (bool, error) {
		s := e.service(t, ns, "web")
		c := condition(s)
		return s.Annotations[contract.ClaimedByKey] == peer.cluster && s.Annotations[contract.ServiceEnabledKey] == "true" &&
			len(s.Status.LoadBalancer.Ingress) == 1 && c != nil && c.Status == metav1.ConditionTrue, nil
	})
	// Both have synced the Service since a change of it: neither wrote.
	rv := e.syncedAfter(t, "services", ns, "web", peer, e.npl)
	if s := e.service(t, ns, "web"); s.ResourceVersion != rv {
		t.Errorf("the Service was written again after it synced (annotations %v): installations fight", s.Annotations)
	}
}
