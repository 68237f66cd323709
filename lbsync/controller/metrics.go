package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// Metrics are npl-lbsync's Prometheus metrics (npl_lbsync_*).
type Metrics struct {
	ReconcileDuration *prometheus.HistogramVec
	ProviderCalls     *prometheus.CounterVec
	ProviderDuration  *prometheus.HistogramVec
	SyncFailures      prometheus.Counter
	// ReadinessGatePatches counts writes of the npl.io/lb-registered Pod
	// condition by status.
	ReadinessGatePatches *prometheus.CounterVec
	members              *prometheus.GaugeVec

	mu         sync.Mutex
	queueDepth func() float64
	perService map[string][2]int // enabled, disabled members per Service
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ReconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "npl_lbsync_reconcile_duration_seconds", Help: "Time to sync one Service, provider call included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"result"}),
		ProviderCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "npl_lbsync_provider_calls_total", Help: "Calls to the load balancer provider by verb and result.",
		}, []string{"verb", "result"}),
		ProviderDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "npl_lbsync_provider_call_duration_seconds", Help: "Duration of provider calls by verb.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"verb"}),
		SyncFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "npl_lbsync_sync_failures_total", Help: "Service syncs that failed and were queued for retry.",
		}),
		ReadinessGatePatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "npl_lbsync_readiness_gate_patches_total", Help: "Writes of the npl.io/lb-registered Pod condition by status.",
		}, []string{"status"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "npl_lbsync_members", Help: "Pool members of the load balancers by state.",
		}, []string{"state"}),

		perService: map[string][2]int{},
	}
	if reg != nil {
		reg.MustRegister(m.ReconcileDuration, m.ProviderCalls, m.ProviderDuration, m.SyncFailures, m.ReadinessGatePatches, m.members,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "npl_lbsync_queue_depth", Help: "Services waiting to be synced."},
				func() float64 {
					m.mu.Lock()
					f := m.queueDepth
					m.mu.Unlock()
					if f == nil {
						return 0
					}
					return f()
				}))
	}
	return m
}

func (m *Metrics) setQueueDepth(f func() float64) {
	m.mu.Lock()
	m.queueDepth = f
	m.mu.Unlock()
}

func (m *Metrics) observeReconcile(d time.Duration, err error) {
	m.ReconcileDuration.WithLabelValues(result(err)).Observe(d.Seconds())
}

func (m *Metrics) observeMembers(key string, lb *lbmodel.LoadBalancer) {
	var n [2]int
	for _, l := range lb.Listeners {
		for _, mem := range l.Pool.Members {
			if mem.Enabled {
				n[0]++
			} else {
				n[1]++
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.perService[key] = n
	var total [2]int
	for _, v := range m.perService {
		total[0] += v[0]
		total[1] += v[1]
	}
	m.members.WithLabelValues("enabled").Set(float64(total[0]))
	m.members.WithLabelValues("disabled").Set(float64(total[1]))
}

// result labels a provider call: an error, a model the check refused
// before any call to the load balancer, or a success.
func result(err error) string {
	var invalid *lbmodel.InvalidModelError
	switch {
	case errors.As(err, &invalid):
		return "invalid"
	case err != nil:
		return "error"
	}
	return "success"
}

// instrumented is a provider behind the provider-call metrics: every call
// is counted by verb and result and timed.
type instrumented struct {
	next providers.Provider
	m    *Metrics
}

// instrument returns p with its calls measured.
func (m *Metrics) instrument(p providers.Provider) providers.Provider {
	return &instrumented{next: p, m: m}
}

func (i *instrumented) observe(verb string, start time.Time, err error) {
	i.m.ProviderDuration.WithLabelValues(verb).Observe(time.Since(start).Seconds())
	i.m.ProviderCalls.WithLabelValues(verb, result(err)).Inc()
}

func (i *instrumented) Ensure(ctx context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
	start := time.Now()
	st, err := i.next.Ensure(ctx, lb)
	i.observe("ensure", start, err)
	return st, err
}

func (i *instrumented) Delete(ctx context.Context, name string, kind lbmodel.Kind) error {
	start := time.Now()
	err := i.next.Delete(ctx, name, kind)
	i.observe("delete", start, err)
	return err
}

func (i *instrumented) List(ctx context.Context) ([]lbmodel.LoadBalancer, error) {
	start := time.Now()
	lbs, err := i.next.List(ctx)
	i.observe("list", start, err)
	return lbs, err
}
