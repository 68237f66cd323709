package bench

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// samples, 0 when there are none.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportLatency reports the p50, p99 and max of samples in milliseconds,
// each unit prefixed with prefix ("annotation-p50-ms").
func reportLatency(b *testing.B, prefix string, samples []time.Duration) {
	b.ReportMetric(ms(percentile(samples, 50)), prefix+"-p50-ms")
	b.ReportMetric(ms(percentile(samples, 99)), prefix+"-p99-ms")
	b.ReportMetric(ms(percentile(samples, 100)), prefix+"-max-ms")
}

// median returns the median of durations, 0 when there are none.
func median(samples []time.Duration) time.Duration { return percentile(samples, 50) }

const mib = 1 << 20

// medianFloat returns the median of values (the lower middle one of an
// even count), 0 when there are none.
func medianFloat(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// loadAverage is the machine's 1-minute load average (edgebed's reading).
func loadAverage() float64 { return edgebed.LoadAverage() }

func TestPercentile_nearestRank(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond // reversed: percentile sorts
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"none", nil, 50, 0},
		{"one", []time.Duration{7}, 99, 7},
		{"p50 of 100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 100", hundred, 99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 100, 100 * time.Millisecond},
		{"p99 of 3 is the max", []time.Duration{3, 1, 2}, 99, 3},
		{"p50 of 4 is the second", []time.Duration{4, 1, 3, 2}, 50, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.samples, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.samples, tc.p, got, tc.want)
			}
		})
	}
}

func TestPercentile_leavesSamplesUnsorted(t *testing.T) {
	s := []time.Duration{3, 1, 2}
	_ = percentile(s, 50)
	if !slices.Equal(s, []time.Duration{3, 1, 2}) {
		t.Errorf("percentile reordered its input: %v", s)
	}
}
