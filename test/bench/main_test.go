// Package bench holds the scale runs of `make bench`: npl-agent and
// npl-lbsync, the real binaries, on the local test cluster, measured against
// the scale anchors of the design. Figures are custom benchmark metrics
// (p50-ms, p99-ms, MiB-rss, writes/change, B/pod, ...) and are never
// asserted:
//
//	go test -run '^$' -bench . -benchtime 3x -timeout 30m ./test/bench
//
// A scale fixture (110 Pods with 1000 node ports on one node, or 1000
// Services with 10000 Pods) is costly, so it is built once per test binary
// and shared by the benchmarks that need it; each b.N iteration is one
// measurement: one batch of Pod starts, one agent restart, one start of
// npl-lbsync, one batch of annotation changes, one resync. The agent
// benchmarks run on a cluster with the kubelet stand-in; the npl-lbsync ones
// on a NoKubelet cluster whose Pod status and annotations the benchmark
// writes itself. One cluster runs at a time: the binary switches between
// them as the benchmarks ask.
//
// The npl-lbsync scale can be changed with -bench.services and
// -bench.pods-per-service (after -args).
// With NPL_BENCH_LOG_DIR set, the component logs (npl-agent and npl-lbsync
// at -v=2 included) are kept there.
package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// TestMain is cluster.RunMain, but the fixtures' processes are stopped
// before their cluster closes, also on SIGINT and SIGTERM.
func TestMain(m *testing.M) { cluster.RunMainWithClose(m, closeEnv) }

// env is the cluster the benchmarks run on now and the fixtures built on it.
type env struct {
	opts   cluster.Options
	c      *cluster.Cluster
	client kubernetes.Interface // for setup: no client-side throttling
	agent  *agentFixture
	scale  *scaleFixture
	lb     *lbFixture
}

var current struct {
	sync.Mutex
	e *env
}

// logDirEnv names a directory where the clusters keep their logs (one
// subdirectory per cluster) after the run, to look into a figure.
const logDirEnv = "NPL_BENCH_LOG_DIR"

// useCluster returns the running cluster if it was started with opts, and
// otherwise closes it (and its fixtures) and starts one with opts. name
// tells the clusters' log directories apart under $NPL_BENCH_LOG_DIR.
func useCluster(b *testing.B, name string, opts cluster.Options) *env {
	b.Helper()
	if dir := os.Getenv(logDirEnv); dir != "" {
		opts.LogDir = filepath.Join(dir, name)
	}
	current.Lock()
	defer current.Unlock()
	if e := current.e; e != nil && reflect.DeepEqual(e.opts, opts) {
		return e
	}
	if err := closeEnvLocked(); err != nil {
		b.Fatalf("close the previous cluster: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		b.Fatalf("start the cluster: %v", err)
	}
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 10000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = c.Close()
		b.Fatalf("client: %v", err)
	}
	current.e = &env{opts: opts, c: c, client: client}
	b.Logf("cluster started in %s (nodes=%d, noKubelet=%t); logs in %s", c.StartDuration().Round(time.Millisecond), opts.Nodes, opts.NoKubelet, c.LogDir())
	return current.e
}

func closeEnv() error {
	current.Lock()
	defer current.Unlock()
	return closeEnvLocked()
}

// closeEnvLocked stops the fixtures' processes, then the cluster.
func closeEnvLocked() error {
	e := current.e
	if e == nil {
		return nil
	}
	current.e = nil
	var errs []error
	if e.agent != nil {
		errs = append(errs, e.agent.close())
	}
	if e.scale != nil {
		errs = append(errs, e.scale.close())
	}
	if e.lb != nil {
		errs = append(errs, e.lb.close())
	}
	errs = append(errs, e.c.Close())
	return errors.Join(errs...)
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first
// error; after an error the remaining calls are not made.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || next >= n {
			return 0, false
		}
		next++
		return next - 1, true
	}
	for range workers {
		wg.Go(func() {
			for {
				i, ok := take()
				if !ok {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

// pollUntil calls cond every interval until it returns true or an error,
// or timeout passes; what names the wait in the error.
func pollUntil(timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
		}
		time.Sleep(interval)
	}
}
