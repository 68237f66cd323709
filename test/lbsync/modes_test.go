package lbsync

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/mock"
	"github.com/nodeportlocal/npl/test/stack"
)

// startExtra starts another npl-lbsync for its own class, stopped at the end.
func (e *env) startExtra(t *testing.T, name, serviceType, class, vipPool string, leaderElect bool, replace ...string) *syncer {
	t.Helper()
	cluster := clusterName + "-" + strings.TrimPrefix(class, "npl.io/")
	cfg := strings.NewReplacer(replace...).Replace(e.config(cluster, serviceType, class, vipPool))
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
	waitPools(t, np, ns, "np", map[string][]providers.Member{
		np.poolName(ns, "np", providers.TCP, 80): {member(e.nodeIP(0), nodePort, true), member(e.nodeIP(1), nodePort, true)},
	})
	var ipA, ipB string
	waitFor(t, 20*time.Second, "pod IPs", func() (bool, error) {
		a, _ := e.client.CoreV1().Pods(ns).Get(context.Background(), "a", metav1.GetOptions{})
		b, _ := e.client.CoreV1().Pods(ns).Get(context.Background(), "b", metav1.GetOptions{})
		ipA, ipB = a.Status.PodIP, b.Status.PodIP
		return ipA != "" && ipB != "", nil
	})
	want := []providers.Member{member(ipA, 8080, true), member(ipB, 8080, true)}
	if netip.MustParseAddr(ipB).Less(netip.MustParseAddr(ipA)) { // a pool lists members in numeric IP order
		want[0], want[1] = want[1], want[0]
	}
	waitPools(t, cip, ns, "cip", map[string][]providers.Member{cip.poolName(ns, "cip", providers.TCP, 80): want})
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
	if _, ok := stack.FindLoadBalancer(st, providers.LoadBalancerName(l.cluster, ns, "keep")); !ok {
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
	pool := l.poolName(ns, "web", providers.TCP, 80)
	waitPools(t, l, ns, "web", map[string][]providers.Member{pool: {member(ip, 61000, true), member(ip, 61001, true)}})

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
	st, _ := l.MockState()
	if st.Counters.Delete != 0 {
		t.Errorf("deletes during the outage: %d", st.Counters.Delete)
	}
	// Recovery within the capped backoff (30 s) after the window ends.
	deadline := time.Now().Add(50 * time.Second)
	want := map[string][]providers.Member{pool: {member(ip, 61001, true), member(ip, 61002, true)}}
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

	// A restart with nothing changed makes no write and no delete.
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	st, err := l.MockState()
	if err != nil {
		t.Fatal(err)
	}
	if st.Counters.Writes != 0 || st.Counters.Delete != 0 || st.Counters.Ensure == 0 {
		t.Errorf("after a restart with no change: %+v, want ensures but 0 writes and 0 deletes", st.Counters)
	}
}

// TestLBSync_leaderElectionHandsOver: of two replicas only the leader
// writes; killing it hands over and convergence continues.
func TestLBSync_leaderElectionHandsOver(t *testing.T) {
	e := setup(t)
	// Both replicas share one state file, as two replicas share one LB.
	a := e.startExtra(t, "npl-lbsync-ha-a", "NodePortLocal", "npl.io/ha", "198.18.105.0/28", true)
	b := e.startExtra(t, "npl-lbsync-ha-b", "NodePortLocal", "npl.io/ha", "198.18.105.0/28", true)
	ns := e.namespace(t)
	ip := e.nodeIP(0)
	e.pod(t, ns, "a", e.nodeName(0), list(entry(8080, ip, 61000, "tcp")))
	e.createService(t, lbService(ns, "web", ptr("npl.io/ha")))
	pool := a.poolName(ns, "web", providers.TCP, 80)

	var leader, follower *syncer
	waitFor(t, 30*time.Second, "a leader", func() (bool, error) {
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
	waitPools(t, leader, ns, "web", map[string][]providers.Member{pool: {member(ip, 61000, true)}})
	var vip string
	waitFor(t, 20*time.Second, "the leader wrote the VIP", func() (bool, error) {
		in := e.service(t, ns, "web").Status.LoadBalancer.Ingress
		if len(in) == 1 {
			vip = in[0].IP
		}
		return vip != "", nil
	})
	if st, err := follower.MockState(); err != nil || st.Counters.Ensure != 0 {
		t.Errorf("the follower called the provider: %+v (err %v)", st.Counters, err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	e.pod(t, ns, "b", e.nodeName(0), list(entry(8080, ip, 61001, "tcp")))
	waitFor(t, 30*time.Second, "the follower takes over", func() (bool, error) {
		v, _ := follower.Metric("npl_lbsync_leader")
		return v == 1, nil
	})
	waitPools(t, follower, ns, "web", map[string][]providers.Member{pool: {member(ip, 61000, true), member(ip, 61001, true)}})
	st, err := follower.MockState()
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := stack.FindLoadBalancer(st, providers.LoadBalancerName(follower.cluster, ns, "web"))
	if len(lb.VIPs) != 1 || lb.VIPs[0] != vip {
		t.Errorf("VIP changed in the handover: %s -> %v", vip, lb.VIPs)
	}
	if in := e.service(t, ns, "web").Status.LoadBalancer.Ingress; len(in) != 1 || in[0].IP != vip {
		t.Errorf("status VIP after the handover: %v, want %s", in, vip)
	}
}

// TestLBSync_drainOutlivesThePod: with drainSeconds longer than the Pod's
// termination, the member stays disabled after the Pod is gone, until the
// drain period ends.
func TestLBSync_drainOutlivesThePod(t *testing.T) {
	e := setup(t)
	l := e.startExtra(t, "npl-lbsync-drain", "NodePortLocal", "npl.io/drain", "198.18.106.0/28", false, "drainSeconds: 1", "drainSeconds: 10")
	ns := e.namespace(t)
	ip := e.nodeIP(0)
	e.pod(t, ns, "stay", e.nodeName(0), list(entry(8080, ip, 61000, "tcp")))
	e.pod(t, ns, "leave", e.nodeName(0), list(entry(8080, ip, 61001, "tcp")))
	e.createService(t, lbService(ns, "web", ptr("npl.io/drain")))
	pool := l.poolName(ns, "web", providers.TCP, 80)
	waitPools(t, l, ns, "web", map[string][]providers.Member{pool: {member(ip, 61000, true), member(ip, 61001, true)}})
	deleted := time.Now()
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), "leave", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	draining := map[string][]providers.Member{pool: {member(ip, 61000, true), member(ip, 61001, false)}}
	waitPools(t, l, ns, "web", draining)
	// The Pod is gone after 4 s (TerminationDelay); the member stays.
	waitFor(t, 20*time.Second, "the Pod gone", func() (bool, error) {
		_, err := e.client.CoreV1().Pods(ns).Get(context.Background(), "leave", metav1.GetOptions{})
		return err != nil, nil
	})
	time.Sleep(time.Second)
	if got, _, _, _ := pools(l, ns, "web"); !cmp.Equal(got, draining) && time.Since(deleted) < 9*time.Second {
		t.Errorf("the draining member left with its Pod, %s after the deletion: %v", time.Since(deleted).Round(time.Second), got)
	}
	waitPools(t, l, ns, "web", map[string][]providers.Member{pool: {member(ip, 61000, true)}})
	if d := time.Since(deleted); d < 9*time.Second {
		t.Errorf("the draining member was removed %s after the deletion, before the 10 s drain period", d.Round(time.Second))
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
	waitPools(t, peer, ns, "web", map[string][]providers.Member{peer.poolName(ns, "web", providers.TCP, 80): {member(e.nodeIP(0), 61000, true)}})
	var rv string
	waitFor(t, 20*time.Second, "the peer's claim, opt-in and status", func() (bool, error) {
		s := e.service(t, ns, "web")
		rv = s.ResourceVersion
		c := condition(s)
		return s.Annotations[contract.ClaimedByKey] == peer.cluster && s.Annotations[contract.ServiceEnabledKey] == "true" &&
			len(s.Status.LoadBalancer.Ingress) == 1 && c != nil && c.Status == metav1.ConditionTrue, nil
	})
	time.Sleep(3 * time.Second)
	if s := e.service(t, ns, "web"); s.ResourceVersion != rv {
		t.Errorf("the Service was written again after it synced (annotations %v): installations fight", s.Annotations)
	}
}
