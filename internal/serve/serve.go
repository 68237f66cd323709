// Package serve runs the metrics and health-probe HTTP listeners that the
// binaries share.
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// Check reports an error when a probe should fail.
type Check func() error

// Probes returns a handler for /healthz and /readyz.
func Probes(healthy, ready Check) http.Handler {
	mux := http.NewServeMux()
	probe := func(c Check) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if c != nil {
				if err := c(); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
			}
			_, _ = w.Write([]byte("ok\n"))
		}
	}
	mux.Handle("/healthz", probe(healthy))
	mux.Handle("/readyz", probe(ready))
	return mux
}

// Metrics returns a mux serving /metrics from gatherer; callers may add more
// paths to it.
func Metrics(gatherer prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	return mux
}

// Profiling adds net/http/pprof's handlers under /debug/pprof/ to mux, as
// the Kubernetes components serve them with --profiling.
func Profiling(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// Listen binds addr now, so a port in use is reported at start, and serves h
// on it until ctx ends. An empty addr or "0" disables the listener.
func Listen(ctx context.Context, name, addr string, h http.Handler) error {
	return ListenTLS(ctx, name, addr, h, nil)
}

// ListenTLS is Listen with TLS when cfg is not nil.
func ListenTLS(ctx context.Context, name, addr string, h http.Handler, cfg *tls.Config) error {
	if addr == "" || addr == "0" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listener on %s: %w", name, addr, err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server stopped", "listener", name)
		}
	}()
	klog.FromContext(ctx).Info("Serving", "listener", name, "address", ln.Addr().String())
	return nil
}
