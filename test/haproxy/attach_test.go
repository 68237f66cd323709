package haproxy

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// TestEdge_attachedToTheHostsHAProxy: npl-edge drives an HAProxy the edge
// host runs itself, as Debian's haproxy.service does (chroot, workers as
// nobody, a frontend of the host's own, npl-edge's npl.cfg as a second
// -f): the load balancers are served through the host's master, reloads
// under a stream fail no request, members change without a reload, the
// invalid share reaches its socket from inside the chroot, the host's
// proxies are neither listed nor touched, a restarted HAProxy gets its
// runtime state back, one that does not load npl.cfg is named in the
// error, and HAProxy serves on when npl-edge stops. With and without a
// chroot: the invalid share's socket is inside it, or in the state
// directory.
func TestEdge_attachedToTheHostsHAProxy(t *testing.T) {
	t.Run("chroot", func(t *testing.T) { testAttached(t, edgebed.Options{Attach: true}) })
	t.Run("no chroot", func(t *testing.T) { testAttached(t, edgebed.Options{Attach: true, HostNoChroot: true}) })
}

func testAttached(t *testing.T, o edgebed.Options) {
	b, bs := newBedOptions(t, o)
	host := b.Edges[0]
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the host's HAProxy log:\n%s", tail(host.HostLog(), 40))
		}
	})
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	hostOwn := edgebed.URL(edgebed.HostVIP, 80)
	checkHostOwn := func(when string) {
		t.Helper()
		if got, err := edgebed.Get(ctx, b.ClientHTTP(3*time.Second), hostOwn); err != nil || got != edgebed.HostAnswer {
			t.Fatalf("%s: the host's own frontend answers %q, %v; want %q", when, got, err, edgebed.HostAnswer)
		}
	}
	checkHostOwn("attached")
	st0 := status(t, b)
	if st0.MasterPID != host.HostMasterPID() || st0.WorkerPID == 0 {
		t.Fatalf("npl-edge's status %+v does not name the host's HAProxy master %d", st0, host.HostMasterPID())
	}

	// A load balancer with a draining member: a reload of the host's
	// master, the drain set through the host's admin socket.
	members := startBackends(t, bs, "web", 3)
	members[0].Enabled = false
	lb := model("web", 80, members)
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	waitAnswers(t, b, url, []string{"web-1", "web-2"})
	pool, drained := lb.Listeners[0].Pool.Name, haproxy.ServerName(members[0])
	checkDraining := func(when string) {
		t.Helper()
		// Loaded disabled (maintenance), then drained through the admin
		// socket: it keeps its health check and its connections.
		if s, err := serverState(ctx, host, pool, drained); err != nil || !s.Draining() {
			t.Fatalf("%s: the draining member's server %s is %+v, %v; want it draining, not in maintenance", when, drained, s, err)
		}
	}
	checkDraining("after the reload of a new listener")
	// The operator's own reload (systemctl reload haproxy) loads the
	// member disabled, in maintenance; the edge's next resync drains it.
	if err := (&haproxy.Attached{MasterSocket: host.HostMasterSocket()}).Reload(ctx); err != nil {
		t.Fatalf("the operator's reload: %v", err)
	}
	s, _ := serverState(ctx, host, pool, drained)
	t.Logf("after the operator's reload the draining member's server has admin state %d", s.AdminState)
	waitForCond(t, 10*time.Second, "the edge's resync to drain the member again after the operator's reload", func() (bool, error) {
		s, err := serverState(ctx, host, pool, drained)
		return err == nil && s.Draining(), err
	})
	st1 := status(t, b)
	if st1.Reloads != st0.Reloads+1 || st1.MasterPID != st0.MasterPID || st1.WorkerPID == st0.WorkerPID {
		t.Fatalf("a new listener: status %+v -> %+v; want one reload of the host's master", st0, st1)
	}
	applied := *lb.Clone()
	applied.VIPs = st.VIPs
	applied.Listeners[0].Pool.Members = lbmodel.SortMembers(applied.Listeners[0].Pool.Members)
	lbs, err := p.List(ctx)
	if err != nil || len(lbs) != 1 {
		t.Fatalf("List = %v, %v; want the one load balancer, not the host's proxies", lbs, err)
	}
	if diff := cmp.Diff(applied, lbs[0]); diff != "" {
		t.Fatalf("List (-applied +listed):\n%s", diff)
	}

	// Members: the runtime API, no reload.
	added := startBackends(t, bs, "new", 1)[0]
	changed := model("web", 80, []lbmodel.Member{members[0], members[2], added})
	if _, err := p.Ensure(ctx, changed); err != nil {
		t.Fatalf("Ensure with member changes: %v", err)
	}
	waitAnswers(t, b, url, []string{"web-2", "new-0"})
	if st2 := status(t, b); st2.Reloads != st1.Reloads || st2.WorkerPID != st1.WorkerPID {
		t.Fatalf("member changes reloaded the host's HAProxy: %+v -> %+v", st1, st2)
	}

	// Reloads of the host's master under a stream: 0 failed, on the
	// edge's VIP and on the host's own frontend.
	stream := edgebed.StartStream(ctx, b.ClientHTTP(3*time.Second), url, 2, 60*time.Second)
	own := edgebed.StartStream(ctx, b.ClientHTTP(3*time.Second), hostOwn, 2, 60*time.Second)
	other := startBackends(t, bs, "other", 1)
	const reloads = 4
	if err := reloadByNewServices(ctx, p, reloads, other); err != nil {
		_, _ = stream.Stop(), own.Stop()
		t.Fatal(err)
	}
	stopStream(t, stream)
	stopStream(t, own)
	t.Logf("%d reloads of the host's HAProxy: the edge's VIP %d ok, %d failed; the host's frontend %d ok, %d failed",
		reloads, stream.OK, stream.Failed, own.OK, own.Failed)
	if stream.Failed != 0 || own.Failed != 0 || stream.OK < 20 || own.OK < 20 {
		t.Fatalf("requests failed during the reloads (want 0): VIP %d of %d (%v), host's %d of %d (%v)",
			stream.Failed, stream.OK+stream.Failed, stream.Errors, own.Failed, own.OK+own.Failed, own.Errors)
	}

	// The invalid share: the workers, chrooted and nobody, reach the
	// frontend that answers 500.
	gw := &lbmodel.LoadBalancer{Name: testCluster + "--gw-ns-share", Gateway: "ns/share", Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}},
		Pools:     []lbmodel.Pool{{Name: testCluster + "--gw-ns-share-only", Members: []lbmodel.Member{}, InvalidWeight: 1}},
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{
			{Path: "/", PathType: lbmodel.PathPrefix, Pool: testCluster + "--gw-ns-share-only"},
		}},
	}
	gst, err := p.Ensure(ctx, gw)
	if err != nil {
		t.Fatalf("Ensure of the Gateway: %v", err)
	}
	c := b.ClientHTTP(3 * time.Second)
	for range 5 {
		if a := send(t, c, "GET", "http://"+net.JoinHostPort(gst.VIPs[0], "80")+"/", "shop.example", nil); a.status != 500 || a.backend != "" {
			t.Fatalf("the invalid share answered %d from %q; want 500 from HAProxy", a.status, a.backend)
		}
	}
	checkHostOwn("after the reloads")

	// The host restarts HAProxy (killed, started again by systemd): the
	// edge attaches to the new master and sets the drain again.
	before := listOne(t, p, lb.Name)
	host.KillHostHAProxy()
	killed := time.Now()
	if err := host.StartHostHAProxy(); err != nil {
		t.Fatal(err)
	}
	var attached time.Duration
	for time.Since(killed) < 20*time.Second {
		if st, err := b.Status(ctx); err == nil && st.MasterPID == host.HostMasterPID() {
			attached = time.Since(killed)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if attached == 0 {
		t.Fatalf("npl-edge did not attach to the restarted HAProxy %d in 20s", host.HostMasterPID())
	}
	t.Logf("the host's HAProxy restarted: npl-edge attached to the new master in %v", attached.Round(time.Millisecond))
	waitAnswers(t, b, url, []string{"web-2", "new-0"})
	if diff := cmp.Diff(before, listOne(t, p, lb.Name)); diff != "" {
		t.Fatalf("after the restart (-before +after):\n%s", diff)
	}
	checkDraining("after the restart")
	checkHostOwn("restarted")

	// A host whose HAProxy does not load npl.cfg: the edge says so.
	host.KillHostHAProxy()
	if err := host.StartHostHAProxyWithoutTheEdgesFile(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err = p.Ensure(ctx, model("late", 8081, other))
		if err != nil && strings.Contains(err.Error(), "does not load") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ensure with a host HAProxy that does not load npl.cfg = %v; want an error that says so", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("HAProxy without npl.cfg: %v", err)
	host.KillHostHAProxy()
	if err := host.StartHostHAProxy(); err != nil {
		t.Fatal(err)
	}
	late := lbmodel.LoadBalancerName(testCluster, "ns", "late")
	var lateVIP string
	for deadline := time.Now().Add(20 * time.Second); lateVIP == ""; time.Sleep(100 * time.Millisecond) {
		lbs, err := p.List(ctx)
		if i := slices.IndexFunc(lbs, func(l lbmodel.LoadBalancer) bool { return l.Name == late }); err == nil && i >= 0 {
			lateVIP = lbs[i].VIPs[0]
		} else if time.Now().After(deadline) {
			t.Fatalf("the change saved while HAProxy did not load npl.cfg is not served once it does: %v, %v", lbs, err)
		}
	}
	lateURL := edgebed.URL(lateVIP, 8081)
	waitAnswers(t, b, lateURL, []string{"other-0"})

	// npl-edge stopped: the host's HAProxy serves on.
	host.StopEdge()
	if host.HostMasterPID() == 0 {
		t.Fatal("the host's HAProxy stopped with npl-edge")
	}
	waitAnswers(t, b, url, []string{"web-2", "new-0"})
	checkHostOwn("npl-edge stopped")
}
