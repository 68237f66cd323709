package haproxy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// serviceVIP creates the Deployment and its Service and waits for the VIP
// and for requests through it to reach every ready Pod.
func serviceVIP(t *testing.T, client kubernetes.Interface, b *edgebed.Bed, ns, lbsync string, d *appsv1.Deployment) string {
	t.Helper()
	ctx := context.Background()
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, lbService(ns, d.Name, lbsync), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip := waitForVIP(t, client, ns, d.Name, 90*time.Second)
	url := edgebed.URL(vip, 80)
	scaleAndConverge(t, client, b, ns, d.Name, url, *d.Spec.Replicas)
	return url
}

// TestEndToEnd_agentRestartAndLeaderChangeFailNoRequest: under a
// continuous stream of requests through the VIP, every npl-agent restarts,
// then the leading npl-lbsync of two replicas is killed and the other
// applies the next change: 0 failed.
func TestEndToEnd_agentRestartAndLeaderChangeFailNoRequest(t *testing.T) {
	c, b := clusterBed(t)
	name := "e2e-haproxy-ha"
	replicas := []*stack.LBSync{
		startLBSyncReplica(t, c, b, name, "npl-lbsync-ha-a", true),
		startLBSyncReplica(t, c, b, name, "npl-lbsync-ha-b", true),
	}
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	url := serviceVIP(t, client, b, ns, name, webDeployment(ns, "web", 3))

	stream := edgebed.StartStream(ctx, b.ClientHTTP(3*time.Second), url, 4, 4*time.Minute)
	defer func() { _ = stream.Stop() }() // on a failure; the test stops it itself otherwise
	for _, a := range agents {
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := a.WaitReady(wctx)
		cancel()
		if err != nil {
			t.Fatalf("%s not ready after its restart: %v", a.Name, err)
		}
	}
	time.Sleep(time.Second)
	ok, failed := stream.Snapshot()
	t.Logf("every npl-agent restarted: %d requests, %d failed", ok+failed, failed)

	var leader, follower *stack.LBSync
	waitForCond(t, 30*time.Second, "a leader", func() (bool, error) {
		for i, l := range replicas {
			if v, err := l.Metric("npl_lbsync_leader"); err == nil && v == 1 {
				leader, follower = l, replicas[1-i]
				return true, nil
			}
		}
		return false, nil
	})
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitForCond(t, 30*time.Second, "the other replica leads", func() (bool, error) {
		v, err := follower.Metric("npl_lbsync_leader")
		return err == nil && v == 1, err
	})
	t.Logf("leader %s killed: %s leads after %v", leader.Name, follower.Name, time.Since(killed).Round(time.Millisecond))
	scaleAndConverge(t, client, b, ns, "web", url, 4)
	stopStream(t, stream)
	t.Logf("agent restarts and a leader change under a stream: %d requests, %d failed", stream.OK+stream.Failed, stream.Failed)
	if stream.Failed != 0 || stream.OK == 0 {
		t.Fatalf("%d of %d requests failed, want 0; errors %v", stream.Failed, stream.OK+stream.Failed, stream.Errors)
	}
}

// rollout rolls a 4-replica Deployment (maxUnavailable 0, maxSurge 1; a
// deleted Pod serves 5 s more, as a preStop sleep makes it) under a stream
// of requests through the VIP and returns the stream.
func rollout(t *testing.T, gate bool) *edgebed.Stream {
	t.Helper()
	c, b := clusterBed(t)
	name := fmt.Sprintf("e2e-haproxy-rollout-%v", gate)
	startLBSync(t, c, b, name)
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	d := webDeployment(ns, "web", 4)
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}}
	d.Spec.Template.Annotations = map[string]string{cluster.AnnotationTerminationDelay: "5s"}
	grace := int64(30)
	d.Spec.Template.Spec.TerminationGracePeriodSeconds = &grace
	d.Spec.Template.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable = corev1.ScheduleAnyway
	if gate {
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: contract.RegisteredReadinessGate}}
	}
	url := serviceVIP(t, client, b, ns, name, d)

	stream := edgebed.StartStream(ctx, b.ClientHTTP(3*time.Second), url, 4, 4*time.Minute)
	start := time.Now()
	dep, err := client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"spec":{"template":{"metadata":{"labels":{"rev":"2"}}}}}`), metav1.PatchOptions{})
	if err != nil {
		_ = stream.Stop()
		t.Fatal(err)
	}
	waitForCond(t, 3*time.Minute, "the rollout", func() (bool, error) {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := d.Status
		return st.ObservedGeneration >= dep.Generation && st.UpdatedReplicas == 4 && st.AvailableReplicas == 4 && st.Replicas == 4, nil
	})
	t.Logf("rolled out in %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(6 * time.Second) // the old Pods' last seconds
	stopStream(t, stream)
	return stream
}

// TestEndToEnd_rollingUpdateThroughTheVIP: with the npl.io/lb-registered
// readiness gate a rolling update fails no request through the VIP; the
// same rollout without the gate is measured and reported.
func TestEndToEnd_rollingUpdateThroughTheVIP(t *testing.T) {
	t.Run("with the readiness gate", func(t *testing.T) {
		s := rollout(t, true)
		t.Logf("rolling update with the gate: %d requests, %d failed", s.OK+s.Failed, s.Failed)
		if s.Failed != 0 || s.OK == 0 {
			t.Fatalf("%d of %d requests failed, want 0; errors %v", s.Failed, s.OK+s.Failed, s.Errors)
		}
	})
	t.Run("without the readiness gate", func(t *testing.T) {
		s := rollout(t, false)
		// Measured, not asserted: without the gate the rollout may outrun
		// the load balancer.
		t.Logf("rolling update without the gate: %d requests, %d failed (%v)", s.OK+s.Failed, s.Failed, s.Errors)
		if s.OK == 0 {
			t.Fatal("no request succeeded")
		}
	})
}

// TestEndToEnd_restartedLBSyncChangesNothingOnHAProxy: npl-lbsync stopped
// and started again with nothing changed, under a stream of requests
// through the VIP: its first sync (every Service ensured, then garbage
// collection's List) makes the edge write nothing (its write, runtime
// command and reload counters unchanged, the same HAProxy worker, every
// server in the state it had), the Service's condition stays True with its
// transition time, and no request fails. As the Avi and BIG-IP tests of
// test/lbsync prove with their simulators' write counts.
func TestEndToEnd_restartedLBSyncChangesNothingOnHAProxy(t *testing.T) {
	c, b := clusterBed(t)
	name := "e2e-haproxy-restart"
	l := startLBSync(t, c, b, name)
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	url := serviceVIP(t, client, b, ns, name, webDeployment(ns, "web", 3))
	var cond *metav1.Condition
	waitForCond(t, 30*time.Second, "the Service synced", func() (bool, error) {
		var err error
		cond, err = syncedCondition(ctx, client, ns, "web")
		return err == nil && cond != nil && cond.Status == metav1.ConditionTrue, err
	})
	e := b.Edges[0]
	servers, err := haproxy.ShowServersState(ctx, e.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	before := status(t, b)

	stream := edgebed.StartStream(ctx, b.ClientHTTP(3*time.Second), url, 2, 2*time.Minute)
	defer func() { _ = stream.Stop() }() // on a failure; the test stops it itself otherwise
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Ready: every Service synced once, then the garbage collected.
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	stopStream(t, stream)
	ensures, err := l.Count("npl_lbsync_provider_calls_total", `verb="ensure"`)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := l.Count("npl_lbsync_provider_calls_total", `verb="list"`, `result="success"`)
	if err != nil {
		t.Fatal(err)
	}
	after := status(t, b)
	t.Logf("npl-lbsync restarted: %v Ensure and %v List calls; edge writes %d -> %d, runtime commands %d -> %d, reloads %d -> %d, worker %d -> %d; %d requests, %d failed",
		ensures, lists, before.Writes, after.Writes, before.RuntimeCommands, after.RuntimeCommands, before.Reloads, after.Reloads,
		before.WorkerPID, after.WorkerPID, stream.OK+stream.Failed, stream.Failed)
	if ensures == 0 || lists == 0 {
		t.Fatalf("the restarted npl-lbsync made %v Ensure and %v List calls, want both: nothing was proven", ensures, lists)
	}
	if after.Writes != before.Writes || after.RuntimeCommands != before.RuntimeCommands || after.Reloads != before.Reloads ||
		after.WorkerPID != before.WorkerPID || after.MasterPID != before.MasterPID {
		t.Errorf("a restart with nothing changed changed the edge: %+v -> %+v", before, after)
	}
	got, err := haproxy.ShowServersState(ctx, e.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(servers, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("HAProxy's servers after the restart (-before +after):\n%s", diff)
	}
	now, err := syncedCondition(ctx, client, ns, "web")
	if err != nil || now == nil || now.Status != metav1.ConditionTrue || !now.LastTransitionTime.Equal(&cond.LastTransitionTime) {
		t.Errorf("the Service's condition after the restart: %+v (%v), before %+v", now, err, cond)
	}
	if stream.Failed != 0 || stream.OK == 0 {
		t.Fatalf("%d of %d requests failed across the restart, want 0; errors %v", stream.Failed, stream.OK+stream.Failed, stream.Errors)
	}
}

// TestEndToEnd_upgradeRenamesTheLoadBalancerThroughTheVIP: npl-lbsync
// 0.x named a Service's load balancer <cluster>--<namespace>-<name>; the
// upgraded npl-lbsync takes it over under <cluster>--<namespace>_<name>
// under a stream of requests through the VIP: the edge swaps the old
// frontend and backend for the renamed ones in one reload, the VIP stays
// (on the edge and in the Service's status), no request fails, and the old
// name is gone.
func TestEndToEnd_upgradeRenamesTheLoadBalancerThroughTheVIP(t *testing.T) {
	c, b := clusterBed(t)
	name := "e2e-haproxy-upgrade"
	l := startLBSync(t, c, b, name)
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	url := serviceVIP(t, client, b, ns, name, webDeployment(ns, "web", 3))
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}

	// What npl-lbsync 0.x left: the same load balancer, VIP and members
	// under the old name.
	p, err := b.OpenProvider(ctx, name, b.ProviderSection(name))
	if err != nil {
		t.Fatal(err)
	}
	current := lbmodel.LoadBalancerName(name, ns, "web")
	served := listOne(t, p, current)
	old := served.Clone()
	old.Name = lbmodel.LegacyName(name, &served)
	for i, ln := range old.Listeners {
		old.Listeners[i].Pool.Name = lbmodel.PoolName(old.Name, ln.Protocol, ln.Port)
	}
	old.RequestedVIP, old.VIPs = served.VIPs[0], nil
	if old.Name != name+"--"+ns+"-web" {
		t.Fatalf("the old name is %q", old.Name)
	}
	if err := p.Delete(ctx, current, lbmodel.L4); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Ensure(ctx, old); err != nil || st.VIPs[0] != served.VIPs[0] {
		t.Fatalf("the old load balancer: %v, %v", st, err)
	}
	waitForCond(t, 20*time.Second, "the old name serving", func() (bool, error) {
		_, err := edgebed.Get(ctx, b.ClientHTTP(time.Second), url)
		return err == nil, nil
	})
	before := status(t, b)

	stream := edgebed.StartStream(ctx, b.ClientHTTP(3*time.Second), url, 4, 2*time.Minute)
	defer func() { _ = stream.Stop() }() // on a failure; the test stops it itself otherwise
	time.Sleep(time.Second)
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Ready: every Service synced once (the takeover), then the garbage
	// collected (nothing: the old name is gone).
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	stopStream(t, stream)
	after := status(t, b)

	lbs, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(lbs) != 1 || lbs[0].Name != current || !slices.Equal(lbs[0].VIPs, served.VIPs) {
		t.Errorf("after the upgrade the edge serves %v, want %s on %v alone", lbs, current, served.VIPs)
	}
	if vip := waitForVIP(t, client, ns, "web", 10*time.Second); vip != served.VIPs[0] {
		t.Errorf("the Service's VIP is %s, want %s", vip, served.VIPs[0])
	}
	t.Logf("upgrade: %s taken over as %s on %s; %d reload(s), worker %d -> %d; %d requests, %d failed",
		old.Name, current, served.VIPs[0], after.Reloads-before.Reloads, before.WorkerPID, after.WorkerPID, stream.OK+stream.Failed, stream.Failed)
	if after.Reloads != before.Reloads+1 {
		t.Errorf("the takeover made %d reloads, want 1: the old and new names swapped in one", after.Reloads-before.Reloads)
	}
	if stream.Failed != 0 || stream.OK == 0 {
		t.Fatalf("%d of %d requests failed across the upgrade, want 0; errors %v", stream.Failed, stream.OK+stream.Failed, stream.Errors)
	}
}
