package cli

import (
	"context"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/internal/serve"
)

// Daemon is the start the long-running binaries share: a context that ends
// on SIGINT or SIGTERM, their logger, and the registry of their metrics.
type Daemon struct {
	// Ctx ends on SIGINT or SIGTERM; it holds Log.
	Ctx context.Context
	Log klog.Logger
	// Registry holds the Go runtime and process collectors; the binary
	// adds its own metrics.
	Registry *prometheus.Registry
	// Profiling serves net/http/pprof beside /metrics (AddProfilingFlag).
	Profiling bool
	stop      context.CancelFunc
}

// StartDaemon starts a binary's run on ctx; keysAndValues name it in
// every log line (the node, say). Stop releases the signals.
func StartDaemon(ctx context.Context, keysAndValues ...any) *Daemon {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	log := klog.FromContext(ctx).WithValues(keysAndValues...)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Daemon{Ctx: klog.NewContext(ctx, log), Log: log, Registry: reg, stop: stop}
}

// Stop stops the signals from ending Ctx and ends it.
func (d *Daemon) Stop() { d.stop() }

// Serve starts the daemon's listeners until Ctx ends: on metricsAddr,
// /metrics from Registry, /debug/pprof/ when Profiling, and handlers beside
// it (by pattern); on
// healthAddr, /healthz and /readyz, which fails while ready does (nil:
// never). An address that is empty or "0" disables its listener; one that
// cannot be bound is a UsageError.
func (d *Daemon) Serve(metricsAddr string, handlers map[string]http.Handler, healthAddr string, ready serve.Check) error {
	mux := serve.Metrics(d.Registry)
	if d.Profiling {
		serve.Profiling(mux)
	}
	for pattern, h := range handlers {
		mux.Handle(pattern, h)
	}
	if err := serve.Listen(d.Ctx, "metrics", metricsAddr, mux); err != nil {
		return Usagef("%v", err)
	}
	if err := serve.Listen(d.Ctx, "health", healthAddr, serve.Probes(nil, ready)); err != nil {
		return Usagef("%v", err)
	}
	return nil
}

// KubeClient returns the configuration of a client of the Kubernetes API
// (RESTConfig) limited to qps requests per second with bursts of burst,
// and the client newClient makes on it: client-go's
// kubernetes.NewForConfig, or a binary's own smaller one. Either failing is
// a UsageError.
func KubeClient[C any](kubeconfig, userAgent string, qps float32, burst int, newClient func(*rest.Config) (C, error)) (*rest.Config, C, error) {
	var none C
	cfg, err := RESTConfig(kubeconfig, userAgent)
	if err != nil {
		return nil, none, Usagef("%v", err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	client, err := newClient(cfg)
	if err != nil {
		return nil, none, Usagef("kubernetes client: %v", err)
	}
	return cfg, client, nil
}
