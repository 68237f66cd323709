package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/mock"
	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// LBSyncOptions configure one npl-lbsync replica.
type LBSyncOptions struct {
	// Name tells replicas apart in logs (default "npl-lbsync").
	Name string
	// Config is the YAML configuration file content.
	Config string
	// LeaderElect runs with --leader-elect and short lease timings.
	LeaderElect bool
	// ExtraArgs are appended to the command line.
	ExtraArgs []string
	// LogDir receives the log (default: the cluster's log directory).
	LogDir string
}

// Leader election timings of the replicas started with LeaderElect, short
// so that a take-over is quick to observe.
const (
	LeaseDuration = 4 * time.Second
	RenewDeadline = 3 * time.Second
	RetryPeriod   = 500 * time.Millisecond
)

// LBSync is npl-lbsync running beside the control plane, in the test
// namespace, where it reaches the apiserver and the load balancer
// simulators on loopback, as the chart's ServiceAccount with the chart's
// grants only (the Lease too: the chart's, in ChartNamespace).
type LBSync struct {
	*Process
	ConfigPath  string
	MetricsAddr string
	HealthAddr  string
	args        []string
}

// StartLBSync writes the configuration, starts npl-lbsync and waits until it
// is ready (caches synced and, when leading, the first sync done). The
// first start on a cluster installs the chart's ServiceAccounts and RBAC.
func StartLBSync(ctx context.Context, c *cluster.Cluster, opts LBSyncOptions) (*LBSync, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "npl-lbsync"
	}
	if opts.LogDir == "" {
		opts.LogDir = c.LogDir()
	}
	cfgPath := filepath.Join(opts.LogDir, opts.Name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(opts.Config), 0o600); err != nil {
		return nil, fmt.Errorf("write npl-lbsync config: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	metricsPort, healthPort := ports[0], ports[1]
	l := &LBSync{
		ConfigPath:  cfgPath,
		MetricsAddr: "127.0.0.1:" + strconv.Itoa(metricsPort),
		HealthAddr:  "127.0.0.1:" + strconv.Itoa(healthPort),
	}
	access, err := accessFor(ctx, c)
	if err != nil {
		return nil, err
	}
	l.args = []string{
		"--kubeconfig", access.lbsyncKubeconfig, "--config", cfgPath,
		"--metrics-bind-address", l.MetricsAddr, "--health-probe-bind-address", l.HealthAddr, "-v", "2",
	}
	if opts.LeaderElect {
		l.args = append(l.args, "--leader-elect", "--leader-elect-namespace", ChartNamespace, "--leader-elect-lease-name", access.leaseName,
			"--leader-elect-lease-duration", LeaseDuration.String(), "--leader-elect-renew-deadline", RenewDeadline.String(),
			"--leader-elect-retry-period", RetryPeriod.String())
	}
	l.args = append(l.args, opts.ExtraArgs...)
	binPath := filepath.Join(bin, "npl-lbsync")
	l.Process = &Process{Name: opts.Name, LogPath: filepath.Join(opts.LogDir, opts.Name+".log"),
		newCmd: func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, binPath, l.args...) }}
	if err := l.Start(ctx); err != nil {
		return nil, err
	}
	if !opts.LeaderElect {
		if err := l.WaitReady(ctx); err != nil {
			_ = l.Stop()
			return nil, err
		}
	}
	return l, nil
}

// WaitReady waits until /readyz answers ok.
func (l *LBSync) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := waitHTTP(ctx, "http://"+l.HealthAddr+"/readyz", l.Process); err != nil {
		return fmt.Errorf("%s not ready: %w\n%s", l.Name, err, l.Tail(30))
	}
	return nil
}

// MetricsURL is npl-lbsync's /metrics.
func (l *LBSync) MetricsURL() string { return "http://" + l.MetricsAddr + "/metrics" }

// Metric reads one of npl-lbsync's metrics.
func (l *LBSync) Metric(name string, labels ...string) (float64, error) {
	return Metric(l.MetricsURL(), name, labels...)
}

// Count reads a counter of npl-lbsync's that may not have counted yet: a
// counter vector without a sample is 0.
func (l *LBSync) Count(name string, labels ...string) (float64, error) {
	v, err := l.Metric(name, labels...)
	if errors.Is(err, ErrNoSample) {
		return 0, nil
	}
	return v, err
}

// Syncs is how many syncs (of a Service or an Ingress, failed or not) this
// run of npl-lbsync has finished: the count of its reconcile duration
// histogram, observed when a sync returns, after its writes.
func (l *LBSync) Syncs() (float64, error) {
	return l.Count("npl_lbsync_reconcile_duration_seconds_count")
}

// WaitSyncs waits until Syncs exceeds n. A test reads Syncs, makes a change
// that queues a sync, and waits for it: npl-lbsync then finished a sync
// begun after the value was read, and the test can assert that it chose not
// to write, without sleeping.
func (l *LBSync) WaitSyncs(ctx context.Context, n float64) error {
	var got float64
	for {
		var err error
		if got, err = l.Syncs(); err == nil && got > n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s finished %v syncs, waited for more than %v: %w", l.Name, got, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Ready reports whether /readyz answers ok now: caches synced and, when
// leading, the first sync (every Service once, then garbage collection)
// done.
func (l *LBSync) Ready() bool {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + l.HealthAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freePorts returns n distinct free ports of 127.0.0.1. The listeners that
// find them stay open until all are found: closed one by one, the kernel
// may hand the same port out twice (it did, on a loaded machine).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// MockState reads the mock provider's state and counters from npl-lbsync's
// metrics listener.
func (l *LBSync) MockState() (mock.State, error) {
	var st mock.State
	resp, err := http.Get("http://" + l.MetricsAddr + mock.StatePath)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s: %s", mock.StatePath, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// MockFault injects or clears faults in the mock provider (the configuration
// must set allowFaultInjection).
func (l *LBSync) MockFault(req mock.FaultRequest) error {
	body, _ := json.Marshal(req)
	resp, err := http.Post("http://"+l.MetricsAddr+mock.FaultPath, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %s: %s", mock.FaultPath, resp.Status, b)
	}
	return nil
}

// FindLoadBalancer returns the load balancer of a name from a mock state.
func FindLoadBalancer(st mock.State, name string) (lbmodel.LoadBalancer, bool) {
	for _, lb := range st.LoadBalancers {
		if lb.Name == name {
			return lb, true
		}
	}
	return lbmodel.LoadBalancer{}, false
}
