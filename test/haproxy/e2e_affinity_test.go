package haproxy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// TestEndToEnd_clientIPAffinityKeepsEachClientOnItsPod: a LoadBalancer
// Service with sessionAffinity ClientIP, nothing else: npl-lbsync gives its
// pool source-address persistence (the Service's timeoutSeconds), and
// through the VIP each of 3 client addresses reaches exactly one Pod for
// its 200 requests. Scaled 3 -> 6 under a stream from each client (new
// members come by the runtime API, no reload), every client keeps its Pod
// and no request fails.
func TestEndToEnd_clientIPAffinityKeepsEachClientOnItsPod(t *testing.T) {
	c, b := clusterBed(t)
	startLBSync(t, c, b, "e2e-affinity")
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, webDeployment(ns, "web", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := lbService(ns, "web", "e2e-affinity")
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(int32(600))}}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip := waitForVIP(t, client, ns, "web", 90*time.Second)
	url := edgebed.URL(vip, 80)
	// Ready Pods and pool agree (a single client address would stay on one
	// Pod, so wait on the pool itself).
	lbName := lbmodel.LoadBalancerName("e2e-affinity", ns, "web")
	pool := lbmodel.PoolName(lbName, lbmodel.TCP, 80)
	waitForCond(t, 90*time.Second, "3 members up in HAProxy", func() (bool, error) {
		pods, err := readyPods(ctx, client, ns, "web")
		if err != nil || len(pods) != 3 {
			return false, err
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return b.Edges[0].WaitUp(wctx, pool, 3) == nil, nil
	})
	p, err := b.OpenProvider(ctx, "e2e-affinity", b.ProviderSection("e2e-affinity"))
	if err != nil {
		t.Fatal(err)
	}
	got := listOne(t, p, lbName)
	want := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600}}
	if diff := cmp.Diff(want, got.Listeners[0].Pool.Policy); diff != "" {
		t.Fatalf("the policy the edge serves (-want +got):\n%s", diff)
	}

	clients, err := b.ClientSources(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[netip.Addr]string{}
	for _, src := range clients {
		got, err := answeredByClient(ctx, b.ClientHTTPFrom(src, 3*time.Second), url, 200)
		if err != nil {
			t.Fatalf("client %s: %v (answered %v)", src, err, got)
		}
		if len(got) != 1 {
			t.Fatalf("client %s: 200 requests reached %v, want one Pod", src, got)
		}
		for pod := range got {
			pods[src] = pod
		}
	}
	t.Logf("sessionAffinity ClientIP: 3 clients × 200 requests, each reached one Pod: %v", pods)

	before := status(t, b)
	streams := map[netip.Addr]*edgebed.Stream{}
	for _, src := range clients {
		streams[src] = edgebed.StartStream(ctx, b.ClientHTTPFrom(src, 3*time.Second), url, 2, 3*time.Minute)
	}
	scaleTo(t, client, ns, "web", 6)
	waitForCond(t, 90*time.Second, "6 members up in HAProxy", func() (bool, error) {
		ready, err := readyPods(ctx, client, ns, "web")
		if err != nil || len(ready) != 6 {
			return false, err
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return b.Edges[0].WaitUp(wctx, pool, 6) == nil, nil
	})
	time.Sleep(2 * time.Second) // the streams run on the 6 members
	for _, src := range clients {
		s := streams[src]
		stopStream(t, s)
		answered := map[string]int{}
		for k, v := range s.Answered {
			answered[strings.TrimSpace(k)] += v
		}
		if s.Failed != 0 || len(answered) != 1 || answered[pods[src]] == 0 {
			t.Errorf("client %s during the scale to 6: %d ok, %d failed (%v), answered by %v; want its Pod %s only",
				src, s.OK, s.Failed, s.Errors, answered, pods[src])
		}
		t.Logf("client %s during 3 -> 6: %d requests, 0 failed, all to %s", src, s.OK, pods[src])
	}
	if after := status(t, b); after.Reloads != before.Reloads {
		t.Errorf("the scale reloaded HAProxy %d times", after.Reloads-before.Reloads)
	}
}

// scaleTo sets the Deployment's replicas (a patch: its controller writes
// it meanwhile).
func scaleTo(t testing.TB, client kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := client.AppsV1().Deployments(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
