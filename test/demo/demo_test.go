package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/test/cluster"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

// TestDemo runs the demo of `make demo` (the same code) with the mock load
// balancer and checks what it shows: every member answers with its own Pod,
// the NodePort opens on every node while NodePortLocal opens only where a
// backend runs, and the pool follows a scale-down.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := Run(ctx, Options{Provider: "mock", Out: &out, StateDir: t.TempDir()})
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
