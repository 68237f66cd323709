package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the agent's Prometheus metrics (npl_agent_*).
type Metrics struct {
	Mappings           prometheus.Gauge
	AllocationFailures prometheus.Counter
	AnnotationPatches  prometheus.Counter
	SyncDuration       *prometheus.HistogramVec
}

// NewMetrics creates the controller's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Mappings: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "npl_agent_mappings", Help: "Node-port mappings programmed on this node.",
		}),
		AllocationFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "npl_agent_allocation_failures_total", Help: "Pod syncs that could not allocate every node port (range exhausted or bind failures).",
		}),
		AnnotationPatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "npl_agent_annotation_patches_total", Help: "Patches of the nodeportlocal.antrea.io Pod annotation.",
		}),
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "npl_agent_pod_sync_duration_seconds", Help: "Time to sync one Pod, datapath write and annotation patch included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Mappings, m.AllocationFailures, m.AnnotationPatches, m.SyncDuration)
	}
	return m
}

func (m *Metrics) observeSync(d time.Duration, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.SyncDuration.WithLabelValues(result).Observe(d.Seconds())
}
