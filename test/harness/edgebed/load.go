package edgebed

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/test/harness/stack"
)

// The machine's share of the Pod Ready → VIP benchmarks: how busy the host's
// CPUs were and how long the API server took for the Pod status patches
// (npl-agent's annotation is one, the kubelets' statuses the others) while
// the stream ran. npl's own work cannot be faster than the API server that
// carries its annotation, nor than CPUs that are never idle. Beside them,
// npl-lbsync's own time for its Ensure calls (to npl-edge and back: the
// edge's apply included) splits what is left of the control path.

// podStatusPatch selects the API server's request-duration histogram of
// Pod status PATCHes.
var podStatusPatch = []string{`resource="pods"`, `subresource="status"`, `verb="PATCH"`}

// lbsyncEnsure names npl-lbsync's histogram of its provider's Ensure calls.
const lbsyncEnsure = "npl_lbsync_provider_call_duration_seconds"

// LoadSample is a reading of the host's CPU times, the API server's Pod
// status PATCH histogram and npl-lbsync's Ensure histogram; LoadWindow.Add
// takes the load between two.
type LoadSample struct {
	busy, total float64
	loadavg     float64 // the host's 1-minute load average
	patches     histogram
	ensures     histogram
}

// SampleLoad reads /proc/stat, the API server's /metrics and npl-lbsync's
// (at lbsyncMetrics, its /metrics URL).
func SampleLoad(ctx context.Context, client kubernetes.Interface, lbsyncMetrics string) (LoadSample, error) {
	var s LoadSample
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, fmt.Errorf("read the host's CPU times: %w", err)
	}
	if s.busy, s.total, err = cpuTimes(string(stat)); err != nil {
		return s, err
	}
	if s.loadavg, err = loadAverage(); err != nil {
		return s, err
	}
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return s, fmt.Errorf("scrape the API server's metrics: %w", err)
	}
	if s.patches, err = parseHistogram(string(raw), "apiserver_request_duration_seconds", podStatusPatch...); err != nil {
		return s, err
	}
	text, err := stack.Scrape(lbsyncMetrics)
	if err != nil {
		return s, fmt.Errorf("scrape npl-lbsync's metrics: %w", err)
	}
	s.ensures, err = parseHistogram(text, lbsyncEnsure, `verb="ensure"`)
	return s, err
}

// cpuTimes sums the aggregate cpu line of /proc/stat over its first eight
// fields (user, nice, system, idle, iowait, irq, softirq, steal; guest
// and guest_nice are already inside user and nice): busy is all but idle
// and iowait.
func cpuTimes(stat string) (busy, total float64, err error) {
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		for i, v := range f[1:min(len(f), 9)] {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("/proc/stat field %q: %w", v, err)
			}
			total += n
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
		return busy, total, nil
	}
	return 0, 0, fmt.Errorf("/proc/stat has no cpu line")
}

// loadAverage is the host's 1-minute load average (/proc/loadavg).
func loadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, fmt.Errorf("read the host's load average: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/loadavg is empty")
	}
	return strconv.ParseFloat(f[0], 64)
}

// histogram is a cumulative Prometheus histogram: counts by upper bound
// (le), summed over the series selected.
type histogram map[float64]float64

// parseHistogram sums the _bucket samples of name whose labels contain
// every one of labels, by le.
func parseHistogram(text, name string, labels ...string) (histogram, error) {
	h := histogram{}
	prefix := name + "_bucket{"
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(line, l) }) {
			continue
		}
		_, rest, _ := strings.Cut(line, `le="`)
		bound, rest, ok := strings.Cut(rest, `"`)
		f := strings.Fields(rest)
		if !ok || len(f) == 0 {
			return nil, fmt.Errorf("malformed bucket %q", line)
		}
		le, err := strconv.ParseFloat(bound, 64) // "+Inf" parses as +Inf
		if err != nil {
			return nil, fmt.Errorf("bucket bound of %q: %w", line, err)
		}
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("bucket count of %q: %w", line, err)
		}
		h[le] += n
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("no %s buckets with %v", name, labels)
	}
	return h, nil
}

// quantile is the q-quantile (0 < q < 1) of the observations of h, in
// seconds, interpolated linearly inside its bucket as PromQL's
// histogram_quantile does; NaN without observations, and the highest
// finite bound when it falls in the +Inf bucket.
func (h histogram) quantile(q float64) float64 {
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	total := h[math.Inf(1)]
	if total <= 0 {
		return math.NaN()
	}
	rank, lower, below := q*total, 0.0, 0.0
	for _, le := range bounds {
		c := h[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			if c == below {
				return le
			}
			return lower + (le-lower)*(rank-below)/(c-below)
		}
		lower, below = le, c
	}
	return lower
}

// LoadWindow is the machine's load between two samples, summed over the
// benchmark's iterations with Add.
type LoadWindow struct {
	busy, total float64
	loadavg     float64 // the highest 1-minute load average sampled
	patches     histogram
	ensures     histogram
}

// Add adds the load between samples from and to.
func (w *LoadWindow) Add(from, to LoadSample) {
	w.busy += to.busy - from.busy
	w.total += to.total - from.total
	w.loadavg = max(w.loadavg, from.loadavg, to.loadavg)
	w.patches = w.patches.addDelta(from.patches, to.patches)
	w.ensures = w.ensures.addDelta(from.ensures, to.ensures)
}

// addDelta returns h with the observations between from and to added.
func (h histogram) addDelta(from, to histogram) histogram {
	if h == nil {
		h = histogram{}
	}
	for le, n := range to {
		h[le] += n - from[le]
	}
	return h
}

// Report adds the window's figures to b: host-busy-% (the share of the
// host's CPU time spent busy), loadavg-1m (the highest 1-minute load
// average at the window's samples), apiserver-patch-p50/p99-ms (the API
// server's time for the window's Pod status PATCHes, from its histogram,
// so interpolated inside buckets) and apiserver-patches (how many);
// lbsync-ensure-p50/p99-ms, npl-lbsync's time for its Ensure calls in the
// window, and lbsync-ensures (how many).
func (w LoadWindow) Report(b *testing.B) {
	if w.total > 0 {
		b.ReportMetric(100*w.busy/w.total, "host-busy-%")
	}
	b.ReportMetric(w.loadavg, "loadavg-1m")
	b.ReportMetric(1000*w.patches.quantile(0.50), "apiserver-patch-p50-ms")
	b.ReportMetric(1000*w.patches.quantile(0.99), "apiserver-patch-p99-ms")
	b.ReportMetric(w.patches[math.Inf(1)], "apiserver-patches")
	b.ReportMetric(1000*w.ensures.quantile(0.50), "lbsync-ensure-p50-ms")
	b.ReportMetric(1000*w.ensures.quantile(0.99), "lbsync-ensure-p99-ms")
	b.ReportMetric(w.ensures[math.Inf(1)], "lbsync-ensures")
}

// LoadAverage is the machine's 1-minute load average, reported beside the
// figures measured on a shared machine; 0 when it cannot be read.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
