package realnodes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/webhook"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// The readiness gate on real kubelets: the gate step of the story.

const (
	// rollNS and rollApp are the namespace and name of the rolled
	// Deployment and its Service.
	rollNS, rollApp = "rollout", "roll"
	// rollReplicas is its size.
	rollReplicas = 6
)

// rollout is what one rolling update of rollApp measured.
type rollout struct {
	gated bool
	// windows is, per new Pod, the time from the Pod first seen Ready (a
	// watch) to its member first seen up and enabled in HAProxy's runtime
	// (the admin socket, polled every 10 ms): positive when the Pod was
	// Ready before the load balancer sent it anything.
	windows map[string]time.Duration
	stream  streamResult
	took    time.Duration
}

func (r rollout) String() string {
	var ws []string
	for _, pod := range slices.Sorted(maps.Keys(r.windows)) {
		ws = append(ws, fmt.Sprintf("%s %v", pod[strings.LastIndex(pod, "-")+1:], r.windows[pod].Round(time.Millisecond)))
	}
	return fmt.Sprintf("gate %v: rollout in %v; Ready → member up, per new Pod: %s; through the VIP: %s",
		r.gated, r.took.Round(100*time.Millisecond), strings.Join(ws, ", "), r.stream)
}

// readinessGateRollout: a Deployment of rollReplicas behind a LoadBalancer
// Service on HAProxy rolls out twice under a request stream through its
// VIP, the same rollout (maxSurge 25 %, maxUnavailable 25 %): first
// without the readiness gate, then with the namespace labelled for the
// chart's webhook, which injects npl.io/lb-registered into the new Pods.
// What makes the gate necessary is asserted, not its luck: without it,
// the new Pods turn Ready before HAProxy has their members (a positive
// window, while the Deployment removes old Pods as new ones turn Ready);
// with it, no Pod is counted Ready before it is a member, and no request
// fails. The failures of the run without the gate are reported.
func (s *story) readinessGateRollout(t *testing.T) {
	ctx := s.ctx
	if _, err := s.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rollNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer s.deleteNamespace(t, rollNS)
	// The Service first: the webhook injects the gate into Pods that a
	// Service of ours selects.
	if _, err := s.client.CoreV1().Services(rollNS).Create(ctx, loadBalancerService(rollNS, rollApp), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := workloadDeployment(rollNS, rollApp, s.tag)
	d.Spec.Replicas = ptr.To[int32](rollReplicas)
	if _, err := s.client.AppsV1().Deployments(rollNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, fmt.Sprintf("%d Pods Ready and served by HAProxy", rollReplicas), func(ctx context.Context) error {
		if _, err := s.rolledOut(ctx, ""); err != nil {
			return err
		}
		return s.waitServed(ctx, rollNS, rollApp, rollReplicas)
	})

	without := s.roll(t, "2", false)
	t.Logf("without the gate: %s", without)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"enabled"}}}`, webhook.NamespaceLabel)
	if _, err := s.client.CoreV1().Namespaces().Patch(ctx, rollNS, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	with := s.roll(t, "3", true)
	t.Logf("with the gate: %s", with)

	// Without the gate a Pod is Ready before the load balancer has it:
	// the median new Pod's window is positive (the watch and the poll may
	// see one Pod's two events a few milliseconds apart in either order).
	if m := median(without.windows); m <= 0 {
		t.Errorf("without the gate, the median new Pod turned Ready %v after its member was up: want it Ready first, which is what makes the gate necessary (%s)", -m, without)
	}
	for pod, w := range with.windows {
		if w > 0 {
			t.Errorf("with the gate, %s was counted Ready %v before its member was up in HAProxy", pod, w.Round(time.Millisecond))
		}
	}
	if with.stream.failed > 0 || with.stream.sent < 100 {
		t.Errorf("with the gate, through the VIP: %s; want no failure among at least 100", with.stream)
	}
	t.Logf("failed requests through the VIP: %d of %d without the gate, %d of %d with it",
		without.stream.failed, without.stream.sent, with.stream.failed, with.stream.sent)
}

// roll changes rollApp's Pod template (the label rev) and waits until the
// rollout is done, its old Pods gone, measuring it (rollout).
func (s *story) roll(t *testing.T, rev string, gated bool) rollout {
	t.Helper()
	ctx := s.ctx
	rw, err := edgebed.WatchReady(ctx, s.client, rollNS, "app="+rollApp)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	su := edgebed.StartServersUp(ctx, s.bed.Edges[0], poolName(rollNS, rollApp))
	defer su.Stop()
	// The servers there before (the old Pods', and those of an earlier
	// rollout still draining): a new Pod's member must be new.
	before := map[string]bool{}
	sts, err := haproxy.ShowServersState(ctx, s.bed.Edges[0].AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Backend == poolName(rollNS, rollApp) {
			before[st.Name] = true
		}
	}
	stream := s.vipStream(t, rollNS, rollApp)
	began := time.Now()
	patch := fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"labels":{"rev":%q}}}}}`, rev)
	if _, err := s.client.AppsV1().Deployments(rollNS).Patch(ctx, rollApp, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		stream.stop()
		t.Fatal(err)
	}
	var pods []corev1.Pod
	eventually(t, ctx, fmt.Sprintf("the rollout to rev %s done, the old Pods gone", rev), func(ctx context.Context) error {
		var err error
		pods, err = s.rolledOut(ctx, rev)
		return err
	})
	r := rollout{gated: gated, windows: map[string]time.Duration{}, took: time.Since(began), stream: stream.stop()}
	for _, p := range pods {
		hasGate := slices.ContainsFunc(p.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool {
			return g.ConditionType == contract.RegisteredReadinessGate
		})
		if hasGate != gated {
			t.Fatalf("new Pod %s has the readiness gate %v; want %v (the chart's webhook, namespace label %s)", p.Name, hasGate, gated, webhook.NamespaceLabel)
		}
		entries, err := contract.Parse(p.Annotations[contract.PodKey])
		if err != nil || len(entries) != 1 {
			t.Fatalf("new Pod %s: annotation %q (%v)", p.Name, p.Annotations[contract.PodKey], err)
		}
		server := haproxy.ServerName(lbmodel.Member{IP: entries[0].NodeIP, Port: int32(entries[0].NodePort)})
		if before[server] {
			t.Fatalf("new Pod %s's member %s was in the pool before the rollout: its window cannot be measured", p.Name, server)
		}
		ready := rw.TrueAt(p.Name, corev1.PodReady)
		_, up := su.Times(server)
		if ready.IsZero() || up.IsZero() {
			t.Fatalf("new Pod %s: seen Ready at %v, its member %s up at %v: want both seen", p.Name, ready, server, up)
		}
		r.windows[p.Name] = up.Sub(ready)
	}
	return r
}

// rolledOut returns rollApp's Pods once there are exactly rollReplicas,
// every one Ready, none terminating, each of the revision rev ("" any).
func (s *story) rolledOut(ctx context.Context, rev string) ([]corev1.Pod, error) {
	pods, err := s.client.CoreV1().Pods(rollNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + rollApp})
	if err != nil {
		return nil, err
	}
	ready := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podutils.IsPodReady(&p) && (rev == "" || p.Labels["rev"] == rev) {
			ready++
		}
	}
	if len(pods.Items) != rollReplicas || ready != rollReplicas {
		return nil, fmt.Errorf("%d Pods, %d of them Ready of rev %q; want %d", len(pods.Items), ready, rev, rollReplicas)
	}
	return pods.Items, nil
}

// deleteNamespace deletes ns and waits until its Pods are gone, so that
// the next steps (a node drained) meet none of them.
func (s *story) deleteNamespace(t *testing.T, ns string) {
	t.Helper()
	if err := s.client.CoreV1().Namespaces().Delete(s.ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete namespace %s: %v", ns, err)
		return
	}
	eventually(t, s.ctx, "the Pods of namespace "+ns+" gone", func(ctx context.Context) error {
		pods, err := s.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) > 0 {
			err = fmt.Errorf("%d Pods left", len(pods.Items))
		}
		return err
	})
}

// median is the median of the durations (0 for none).
func median(ds map[string]time.Duration) time.Duration {
	var all []time.Duration
	for _, d := range ds {
		all = append(all, d)
	}
	if len(all) == 0 {
		return 0
	}
	slices.Sort(all)
	return all[len(all)/2]
}
