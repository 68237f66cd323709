package edgebed

import (
	"math"
	"testing"
)

// The API server's text format, as kube-apiserver writes a histogram: two
// series of the PATCHes selected (summed) and one of another verb (left
// out).
const apiserverMetrics = `# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",subresource="status",verb="PATCH",version="v1",le="0.1"} 40
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",subresource="status",verb="PATCH",version="v1",le="0.2"} 80
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",subresource="status",verb="PATCH",version="v1",le="+Inf"} 100
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",subresource="status",verb="PATCH",version="v2",le="0.1"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",subresource="status",verb="PATCH",version="v2",le="0.2"} 20
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",subresource="status",verb="PATCH",version="v2",le="+Inf"} 20
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",subresource="status",verb="GET",version="v1",le="0.1"} 999
apiserver_request_duration_seconds_bucket{component="apiserver",resource="pods",subresource="status",verb="GET",version="v1",le="+Inf"} 999
apiserver_request_duration_seconds_sum{component="apiserver",resource="pods",subresource="status",verb="PATCH",version="v1"} 12
`

func TestParseHistogramAndQuantile(t *testing.T) {
	h, err := parseHistogram(apiserverMetrics, "apiserver_request_duration_seconds", podStatusPatch...)
	if err != nil {
		t.Fatal(err)
	}
	want := histogram{0.1: 50, 0.2: 100, math.Inf(1): 120}
	if len(h) != len(want) {
		t.Fatalf("buckets %v, want %v", h, want)
	}
	for le, n := range want {
		if h[le] != n {
			t.Errorf("bucket le=%v: %v, want %v", le, h[le], n)
		}
	}
	for _, c := range []struct{ q, want float64 }{
		{0.25, 0.06},  // rank 30 of 50 in (0, 0.1]
		{0.5, 0.12},   // rank 60: the 10th of the 50 in (0.1, 0.2]
		{0.99, 0.2},   // rank 118.8, in +Inf: the highest finite bound
		{0.8333, 0.2}, // rank 99.996, the end of (0.1, 0.2]
	} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-3 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if q := (histogram{math.Inf(1): 0}).quantile(0.5); !math.IsNaN(q) {
		t.Errorf("quantile of no observations = %v, want NaN", q)
	}
	if _, err := parseHistogram(apiserverMetrics, "apiserver_request_duration_seconds", `verb="DELETE"`); err == nil {
		t.Error("no series selected: want an error")
	}
}

func TestLoadWindow_addsDeltas(t *testing.T) {
	var w LoadWindow
	w.Add(LoadSample{busy: 10, total: 20, patches: histogram{0.1: 1, math.Inf(1): 2}, ensures: histogram{0.01: 5, math.Inf(1): 5}},
		LoadSample{busy: 25, total: 40, patches: histogram{0.1: 3, math.Inf(1): 6}, ensures: histogram{0.01: 7, math.Inf(1): 9}})
	w.Add(LoadSample{busy: 100, total: 200, patches: histogram{0.1: 10, math.Inf(1): 10}, ensures: histogram{0.01: 9, math.Inf(1): 9}},
		LoadSample{busy: 105, total: 220, patches: histogram{0.1: 12, math.Inf(1): 14}, ensures: histogram{0.01: 10, math.Inf(1): 12}})
	if w.busy != 20 || w.total != 40 || w.patches[0.1] != 4 || w.patches[math.Inf(1)] != 8 {
		t.Errorf("window %+v, want busy 20 of 40, buckets 4 and 8", w)
	}
	if w.ensures[0.01] != 3 || w.ensures[math.Inf(1)] != 7 {
		t.Errorf("Ensure buckets %v, want 3 and 7", w.ensures)
	}
}

func TestCPUTimes(t *testing.T) {
	// guest 40 and guest_nice 4 are counted in user and nice already.
	busy, total, err := cpuTimes("cpu  100 5 50 800 20 3 2 1 40 4\ncpu0 50 2 25 400 10 1 1 0 20 2\n")
	if err != nil || busy != 161 || total != 981 {
		t.Errorf("cpuTimes = %v, %v, %v; want 161, 981", busy, total, err)
	}
	if _, _, err := cpuTimes("intr 1 2 3\n"); err == nil {
		t.Error("no cpu line: want an error")
	}
}
