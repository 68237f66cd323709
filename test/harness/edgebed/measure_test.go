package edgebed

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestReadyWatch_readyNowFollowsThePods: ReadyNow names the Pods the watch
// last saw Ready, and drops one that turns unready, terminates or is
// deleted; Times keeps when each was first seen Ready.
func TestReadyWatch_readyNowFollowsThePods(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	rw, err := WatchReady(ctx, client, "ns", "app=web")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	pod := func(name string, ready corev1.ConditionStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": "web"}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}}
	}
	pods := client.CoreV1().Pods("ns")
	want := func(what string, names ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !slices.Equal(rw.ReadyNow(), names) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: ReadyNow() = %v, want %v", what, rw.ReadyNow(), names)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, p := range []*corev1.Pod{pod("a", corev1.ConditionTrue), pod("b", corev1.ConditionTrue), pod("c", corev1.ConditionFalse), pod("d", corev1.ConditionTrue)} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want("created", "a", "b", "d")

	if _, err := pods.Update(ctx, pod("a", corev1.ConditionFalse), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	terminating := pod("b", corev1.ConditionTrue)
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := pods.Update(ctx, terminating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "d", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// c's containers turn ready before c does, as a readiness gate has it.
	held := pod("c", corev1.ConditionFalse)
	held.Status.Conditions = append(held.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue})
	if _, err := pods.Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); rw.TrueAt("c", corev1.ContainersReady).IsZero(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("TrueAt(c, ContainersReady) is zero after its containers turned ready")
		}
	}
	held.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := pods.Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("a unready, b terminating, d deleted, c ready", "c")
	if ready, _ := rw.Times("a"); ready.IsZero() {
		t.Error("Times(a): the first Ready is forgotten once a turns unready")
	}
	if ready, _ := rw.Times("c"); !rw.TrueAt("c", corev1.ContainersReady).Before(ready) {
		t.Errorf("c seen with its containers ready at %v, not before it was seen Ready at %v", rw.TrueAt("c", corev1.ContainersReady), ready)
	}
}

// TestControlPath_splitsReadyToServedIntoItsParts: the parts of a Pod's
// Ready → served time sum to it, whatever came before Ready counting 0.
func TestControlPath_splitsReadyToServedIntoItsParts(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name                          string
		t                             PodTimeline
		served, agent, lbsync, health time.Duration
	}{
		{"annotated after Ready", PodTimeline{Annotated: ms(40), Added: ms(90), Up: ms(100)}, ms(100), ms(40), ms(50), ms(10)},
		{"annotated before Ready, as real kubelets have it", PodTimeline{Annotated: ms(-300), Added: ms(60), Up: ms(60)}, ms(60), 0, ms(60), 0},
		{"the server up as it is added", PodTimeline{Annotated: ms(10), Added: ms(30), Up: ms(30)}, ms(30), ms(10), ms(20), 0},
		{"served before Ready (a readiness gate)", PodTimeline{Annotated: ms(-900), Added: ms(-500), Up: ms(-400)}, 0, 0, 0, 0},
	} {
		served, agent, lbsync, health := controlPath(tc.t)
		if served != tc.served || agent != tc.agent || lbsync != tc.lbsync || health != tc.health {
			t.Errorf("%s: served %v = agent %v + lbsync %v + health %v; want %v = %v + %v + %v",
				tc.name, served, agent, lbsync, health, tc.served, tc.agent, tc.lbsync, tc.health)
		}
	}
}
