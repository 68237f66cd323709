package controller_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeportlocal/npl/agent/controller"
	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/agent/portalloc/portalloctest"
)

// TestSync_saysAdditionsArePendingWhileASelectedPodAwaitsItsIP: a Pod
// replaced (the old one deleted, the new one without an IP yet) gives an
// update that removes the old mappings and says additions are pending, so
// that the datapath may write both at once; once the new Pod has its IP,
// nothing is pending. A Pod no Service of ours selects is not waited for.
func TestSync_saysAdditionsArePendingWhileASelectedPodAwaitsItsIP(t *testing.T) {
	for _, tc := range []struct {
		name, app string
		pending   bool
	}{
		{"a selected Pod starting", "web", true},
		{"a Pod no Service selects starting", "other", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := oldPod(t, "web-old", "198.19.0.5", "web")
			starting := oldPod(t, "starting", "", tc.app)
			starting.Status = corev1.PodStatus{Phase: corev1.PodPending}
			client := fake.NewClientset(testNode(), old, starting, service("web", "web", svcPort("http", corev1.ProtocolTCP, 8080)))
			rng := portalloc.Range{Start: 61000, End: 61009}
			alloc, err := portalloc.New(rng, portalloctest.NewReserver())
			if err != nil {
				t.Fatal(err)
			}
			dp, ctx := runController(t, controller.Config{PortRange: rng}, client, alloc)
			waitFor := func(what string, mappings int) datapath.Desired {
				t.Helper()
				var last datapath.Desired
				err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					dp.mu.Lock()
					defer dp.mu.Unlock()
					last = dp.last
					return len(last.Mappings) == mappings && dp.gen > 0, nil
				})
				if err != nil {
					t.Fatalf("%s: last update %+v", what, last)
				}
				return last
			}
			waitFor("the old Pod's mapping", 1)

			pods := client.CoreV1().Pods("ns")
			if err := pods.Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if d := waitFor("the removal", 0); d.AdditionsPending != tc.pending {
				t.Errorf("the removal says additions pending %v, want %v", d.AdditionsPending, tc.pending)
			}
			if !tc.pending {
				return
			}
			starting.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.0.6", PodIPs: []corev1.PodIP{{IP: "198.19.0.6"}}}
			if _, err := pods.UpdateStatus(ctx, starting, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if d := waitFor("the new Pod's mapping", 1); d.AdditionsPending {
				t.Error("additions still pending once the new Pod has its IP")
			}
		})
	}
}
