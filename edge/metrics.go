package edge

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Register registers the edge's Prometheus metrics (npl_edge_*) with reg.
func (e *Edge) Register(reg prometheus.Registerer) {
	counter := func(name, help string, v func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v()) })
	}
	reg.MustRegister(
		counter("npl_edge_reloads_total", "Hitless reloads of HAProxy (new or changed listeners).", e.reloads.Load),
		counter("npl_edge_haproxy_starts_total", "Starts of HAProxy (more than one after it exited).", e.starts.Load),
		counter("npl_edge_writes_total", "API calls that changed something.", e.writes.Load),
		counter("npl_edge_runtime_commands_total", "Runtime API commands that changed a server (no reload).", e.runtimeCommands.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "npl_edge_load_balancers", Help: "Load balancers in the desired state."},
			func() float64 {
				e.mu.Lock()
				defer e.mu.Unlock()
				return float64(len(e.desired))
			}),
		e.applyDuration,
	)
	e.registerUDP(reg)
}
