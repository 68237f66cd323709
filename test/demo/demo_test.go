package demo

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

// TestDemo runs the demo of `make demo PROVIDER=mock|avi|bigip` (the same
// code; avi and bigip through the real alb-sdk and go-bigip clients against
// their simulators) and checks what it shows: every member answers with its
// own Pod, the NodePort opens on every node while NodePortLocal opens only
// where a backend runs, and the pool follows a scale-down.
func TestDemo(t *testing.T) {
	for _, provider := range []string{"mock", "avi", "bigip"} {
		t.Run(provider, func(t *testing.T) { demoWithoutDataPlane(t, provider) })
	}
}

func demoWithoutDataPlane(t *testing.T, provider string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := Run(ctx, Options{Provider: provider, Out: &out, StateDir: t.TempDir()})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	if len(res.Expected) != 4 {
		t.Errorf("web has %d pool members, want 4", len(res.Expected))
	}
	for target, want := range res.Expected {
		if res.Answers[target] != want {
			t.Errorf("member %s answered %q, want %q", target, res.Answers[target], want)
		}
	}
	if len(res.UDPExpected) != 2 {
		t.Errorf("dns has %d UDP members, want 2", len(res.UDPExpected))
	}
	owners := map[string]bool{}
	for target, pod := range res.UDPExpected {
		// The test server echoes "<pod name>: <payload>".
		if want := pod + ": ping"; pod == "" || res.UDPAnswers[target] != want {
			t.Errorf("UDP member %s replied %q, want %q from its Pod %q", target, res.UDPAnswers[target], want, pod)
		}
		owners[pod] = true
	}
	if len(owners) != len(res.UDPExpected) {
		t.Errorf("the UDP members belong to %d Pods, want one each: %v", len(owners), res.UDPExpected)
	}
	for _, node := range []string{"npl-node-0", "npl-node-1", "npl-node-2"} {
		if !res.NodePortOpen[node] {
			t.Errorf("the NodePort is not open on %s", node)
		}
		if want := res.Backends[node] > 0; res.NPLOpen[node] != want {
			t.Errorf("%s runs %d web Pods but NodePortLocal open = %v", node, res.Backends[node], res.NPLOpen[node])
		}
	}
	if res.Backends["npl-node-2"] != 0 {
		t.Errorf("web runs on npl-node-2 despite the example's affinity")
	}
	if res.ScaleConvergence <= 0 {
		t.Error("the scale to 2 was not measured")
	}
	for _, section := range []string{"1. Pods", "2. nplctl pools", "3. One request", "4. NodePort vs NodePortLocal", "5. Scaling web"} {
		if !strings.Contains(out.String(), section) {
			t.Errorf("the output lacks section %q", section)
		}
	}
}

// TestDemo_haproxy runs the demo of `make demo` as it runs by default, on
// HAProxy on an edge host, and checks what it shows through the VIPs: each
// request to web's VIP reached the Pod behind the member HAProxy chose (one
// hop) and every Pod answered; requests to the NodePort VIP took second
// hops (the third node runs no web Pod, so each request HAProxy sends there
// takes one). Once it returned, nothing of its edge runs: npl-edge and
// every HAProxy process it started have exited.
func TestDemo_haproxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := Run(ctx, Options{Out: &out, StateDir: t.TempDir()})
	left := edgebed.LeftBehind()
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo failed: %v", err)
	}
	if len(left) > 0 {
		t.Errorf("processes of the demo's edge still run after it returned: %v", left)
	}
	if !strings.Contains(out.String(), "load balancer: haproxy") {
		t.Error("the demo does not run on HAProxy by default")
	}
	total := 0
	for _, n := range res.VIPAnswers {
		total += n
	}
	if total != VIPRequests || len(res.VIPAnswers) != 4 || res.VIPWrong != 0 || res.VIPFailed != 0 {
		t.Errorf("web's VIP: answers %v (want %d over 4 Pods), %d second hops, %d failed (want 0)",
			res.VIPAnswers, VIPRequests, res.VIPWrong, res.VIPFailed)
	}
	if got := strings.Count(out.String(), "one hop, the member's Pod"); got != VIPRequests {
		t.Errorf("the output shows %d one-hop requests to web's VIP, want %d", got, VIPRequests)
	}
	if res.NodePortRequests != NodePortVIPRequests || res.NodePortFailed != 0 {
		t.Errorf("the NodePort VIP: %d requests, %d failed; want %d, 0", res.NodePortRequests, res.NodePortFailed, NodePortVIPRequests)
	}
	// Round robin sends a third of the requests to npl-node-2, where no web
	// Pod runs.
	if min := NodePortVIPRequests / 3; res.NodePortSecondHops < min {
		t.Errorf("the NodePort VIP: %d second hops, want at least %d", res.NodePortSecondHops, min)
	}
	if got := strings.Count(out.String(), "SECOND HOP"); got != res.NodePortSecondHops {
		t.Errorf("the output shows %d second hops, the result %d", got, res.NodePortSecondHops)
	}
	udpTotal := 0
	for _, n := range res.UDPVIPAnswers {
		udpTotal += n
	}
	if udpTotal != UDPVIPRequests || len(res.UDPVIPAnswers) != 2 || res.UDPVIPWrong != 0 || res.UDPVIPFailed != 0 {
		t.Errorf("dns's VIP over UDP: answers %v (want %d over 2 Pods), %d to another Pod than the member's, %d failed (want 0)",
			res.UDPVIPAnswers, UDPVIPRequests, res.UDPVIPWrong, res.UDPVIPFailed)
	}
	if got := strings.Count(out.String(), "one hop, the chosen member's Pod"); got != UDPVIPRequests {
		t.Errorf("the output shows %d one-hop UDP flows to dns's VIP, want %d", got, UDPVIPRequests)
	}
	if len(res.UDPExpected) != 2 {
		t.Errorf("dns has %d UDP members, want 2", len(res.UDPExpected))
	}
	for target, pod := range res.UDPExpected {
		if want := pod + ": ping"; res.UDPAnswers[target] != want {
			t.Errorf("UDP member %s replied %q, want %q", target, res.UDPAnswers[target], want)
		}
	}
	if res.ScaleConvergence <= 0 {
		t.Error("the scale to 2 was not measured")
	}
	// Source persistence: one client stays on one Pod through the
	// NodePortLocal VIP, on one node through the NodePort VIP, where the
	// kube-proxy stand-in spreads it over the Pods.
	if res.StickyRequests != StickyRequests || res.StickyFailed != 0 || res.StickyNPLPods != 1 ||
		res.StickyNodePortMembers != 1 || res.StickyNodePortPods < 2 {
		t.Errorf("session persistence: %d requests, %d failed, NodePortLocal VIP %d Pods (want 1), NodePort VIP %d members (want 1) and %d Pods (want several)",
			res.StickyRequests, res.StickyFailed, res.StickyNPLPods, res.StickyNodePortMembers, res.StickyNodePortPods)
	}
	want := fmt.Sprintf("session persistence: NodePortLocal VIP %d requests from one client reached 1 Pod; NodePort VIP %d requests reached %d Pods\n",
		StickyRequests, StickyRequests, res.StickyNodePortPods)
	if !strings.Contains(out.String(), want) {
		t.Errorf("the output lacks the line %q", want)
	}
}
