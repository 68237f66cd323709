package haproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// TestEndToEnd_udpServiceThroughTheVIP: a Service with a TCP and a UDP port
// on the haproxy provider, whose edge serves UDP with nftables: UDP flows
// through the VIP land on every ready Pod (and TCP beside it), the Service
// has no warning, `nplctl pools --check` finds both pools in sync (List
// reads the UDP members back from the table), a scale-down takes the gone
// Pod out of the UDP pool, and deleting the Service removes its listener
// from the table.
func TestEndToEnd_udpServiceThroughTheVIP(t *testing.T) {
	c, b := clusterBed(t)
	l := startLBSync(t, c, b, "e2e-haproxy-udp")
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	d := webDeployment(ns, "dns", 3)
	d.Spec.Template.Spec.Containers[0].Ports = append(d.Spec.Template.Spec.Containers[0].Ports,
		corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP})
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := lbService(ns, "dns", "e2e-haproxy-udp")
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: corev1.ProtocolUDP})
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip := waitForVIP(t, client, ns, "dns", 90*time.Second)
	url, addr := edgebed.URL(vip, 80), net.JoinHostPort(vip, "53")
	scaleAndConverge(t, client, b, ns, "dns", url, 3)

	// UDP: 90 new flows reach exactly the ready Pods.
	udpReachesReadyPods := func(n int) map[string]int {
		return udpFlowsReach(t, b, addr, n, func() ([]string, error) { return readyPods(ctx, client, ns, "dns") })
	}
	counts := udpReachesReadyPods(90)
	t.Logf("90 UDP flows through the VIP: %v", counts)
	answers(t, b, url, 9)

	cond, err := syncedCondition(ctx, client, ns, "dns")
	if err != nil || cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason == "SyncedWithWarnings" {
		t.Fatalf("condition %+v (%v); want synced without warnings: the edge serves UDP", cond, err)
	}
	if ok, err := hasEvent(ctx, client, ns, "dns", "NotServed", "UDP/53"); ok || err != nil {
		t.Fatalf("a NotServed Event for UDP/53 (%v); want none", err)
	}

	// nplctl pools --check: both pools in sync, the UDP one read back from
	// the edge's nftables table.
	args := []string{"pools", "--kubeconfig", c.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check", "-o", "json"}
	waitForCond(t, 30*time.Second, "nplctl pools --check: the TCP and UDP pools in sync", func() (bool, error) {
		out, code := nplctl(t, args...)
		var report struct {
			Pools []struct {
				Protocol string `json:"protocol"`
				State    string `json:"state"`
				Actual   []any  `json:"actual"`
			} `json:"pools"`
		}
		if err := json.Unmarshal([]byte(out), &report); err != nil {
			return false, errors.New(out)
		}
		if code != 0 || len(report.Pools) != 2 {
			return false, errors.New(out)
		}
		for _, p := range report.Pools {
			if p.State != inspect.StateInSync || len(p.Actual) != 3 {
				return false, errors.New(out)
			}
		}
		return true, nil
	})

	// Scaled to 2: the gone Pod takes no more flows.
	scaleAndConverge(t, client, b, ns, "dns", url, 2)
	counts = udpReachesReadyPods(60)
	t.Logf("60 UDP flows after the scale-down: %v", counts)

	// The Service deleted: its listener leaves the table.
	if err := client.CoreV1().Services(ns).Delete(ctx, "dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	udpListenerGone(t, b, addr, "after the Service was deleted")
}

// udpFlowsReach waits until n new UDP flows to addr from the client
// namespace are answered by exactly the Pods want names, and returns how
// many each answered.
func udpFlowsReach(t *testing.T, b *edgebed.Bed, addr string, n int, want func() ([]string, error)) map[string]int {
	t.Helper()
	ctx := context.Background()
	var counts map[string]int
	waitForCond(t, 60*time.Second, fmt.Sprintf("UDP flows to %s reach exactly the ready Pods", addr), func() (bool, error) {
		pods, err := want()
		if err != nil {
			return false, err
		}
		counts = map[string]int{}
		for range n {
			name, err := askNew(ctx, b, addr)
			if err != nil {
				return false, err
			}
			counts[name]++
		}
		if got := slices.Sorted(maps.Keys(counts)); !slices.Equal(got, pods) {
			return false, fmt.Errorf("UDP answered by %v, want %v", counts, pods)
		}
		return true, nil
	})
	return counts
}

// udpListenerGone waits until the edge's table has no listener chain left,
// then checks that a new flow to addr gets no answer.
func udpListenerGone(t *testing.T, b *edgebed.Bed, addr, when string) {
	t.Helper()
	waitForCond(t, 60*time.Second, when+": the UDP listener gone from the edge's table", func() (bool, error) {
		if chains := udpChains(t, b.Edges[0]); len(chains) != 0 {
			return false, fmt.Errorf("listener chains %q", chains)
		}
		return true, nil
	})
	if name, err := askNew(context.Background(), b, addr); err == nil {
		t.Fatalf("%s: UDP answered by %q; want nothing", when, name)
	}
}
