package stack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// AgentOptions configure the agents. Zero values take the defaults.
type AgentOptions struct {
	// PortRange is --port-range (default 61000-62000).
	PortRange string
	// CheckInterval is --datapath-check-interval (default 2s, so drift
	// repair is observable in tests).
	CheckInterval time.Duration
	// RetiredPortGrace is --retired-port-grace (default 10s, so that a
	// test sees an old port forward and then stop).
	RetiredPortGrace time.Duration
	// Datapath is --datapath: auto (the default when empty), iptables or
	// nftables.
	Datapath string
	// ExtraArgs are appended to every agent's command line.
	ExtraArgs []string
	// LogDir receives one log file per agent.
	LogDir string
}

// Agent is npl-agent running in one node's network namespace, as a
// DaemonSet Pod with hostNetwork runs on a real node, and as the chart's
// ServiceAccount, with the chart's grants only.
type Agent struct {
	*Process
	Node *cluster.Node
	opts AgentOptions
	bin  string
	kube string
}

// Agent ports, on the node's own address.
const (
	AgentMetricsPort = 9101
	AgentHealthPort  = 9102
)

// StartAgents starts npl-agent on every node and waits until each is ready
// (mappings restored, workers running). The first start on a cluster
// installs the chart's ServiceAccounts and RBAC.
func StartAgents(ctx context.Context, c *cluster.Cluster, opts AgentOptions) ([]*Agent, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if opts.PortRange == "" {
		opts.PortRange = "61000-62000"
	}
	if opts.RetiredPortGrace == 0 {
		opts.RetiredPortGrace = 10 * time.Second
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = 2 * time.Second
	}
	if opts.LogDir == "" {
		opts.LogDir = c.LogDir()
	}
	access, err := accessFor(ctx, c)
	if err != nil {
		return nil, err
	}
	var agents []*Agent
	for _, n := range c.Nodes() {
		a := &Agent{Node: n, opts: opts, bin: filepath.Join(bin, "npl-agent"), kube: access.agentKubeconfig}
		a.Process = &Process{Name: "npl-agent/" + n.Name, LogPath: filepath.Join(opts.LogDir, "npl-agent-"+n.Name+".log"), newCmd: a.command}
		if err := a.Start(ctx); err != nil {
			StopAgents(agents)
			return nil, err
		}
		agents = append(agents, a)
	}
	for _, a := range agents {
		if err := a.WaitReady(ctx); err != nil {
			StopAgents(agents)
			return nil, err
		}
	}
	return agents, nil
}

// StopAgents stops every agent; their rules stay, as after a real shutdown.
func StopAgents(agents []*Agent) {
	for _, a := range agents {
		_ = a.Stop()
	}
}

// SetPortRange changes --port-range for the next Start.
func (a *Agent) SetPortRange(r string) { a.opts.PortRange = r }

// RetiredPortGrace is the agent's --retired-port-grace.
func (a *Agent) RetiredPortGrace() time.Duration { return a.opts.RetiredPortGrace }

// SetDatapath changes --datapath for the next Start.
func (a *Agent) SetDatapath(backend string) { a.opts.Datapath = backend }

// Datapath is the --datapath of the agent's next (or current) start; empty
// means the agent's default.
func (a *Agent) Datapath() string { return a.opts.Datapath }

func (a *Agent) command(ctx context.Context) *exec.Cmd {
	args := []string{
		"--kubeconfig", a.kube, "--node-name", a.Node.Name, "--port-range", a.opts.PortRange,
		"--metrics-bind-address", a.Node.IP.String() + ":" + strconv.Itoa(AgentMetricsPort),
		"--health-probe-bind-address", a.Node.IP.String() + ":" + strconv.Itoa(AgentHealthPort),
		"--datapath-check-interval", a.opts.CheckInterval.String(), "--retired-port-grace", a.opts.RetiredPortGrace.String(), "-v", "2",
	}
	if a.opts.Datapath != "" {
		args = append(args, "--datapath", a.opts.Datapath)
	}
	args = append(args, a.opts.ExtraArgs...)
	return a.Node.Command(ctx, a.bin, args...)
}

// Cleanup runs `npl-agent cleanup` for the agent's node and returns its output.
func (a *Agent) Cleanup(ctx context.Context) (string, error) {
	out, err := a.Node.Command(ctx, a.bin, "cleanup", "--kubeconfig", a.kube, "--node-name", a.Node.Name).CombinedOutput()
	return string(out), err
}

// RunOnce runs the agent's binary once in its node, as the agent (its
// kubeconfig and node name) with args and, when env is not nil, that
// environment, and returns its combined output.
func (a *Agent) RunOnce(ctx context.Context, env []string, args ...string) (string, error) {
	cmd := a.Node.Command(ctx, a.bin, append([]string{"--kubeconfig", a.kube, "--node-name", a.Node.Name}, args...)...)
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// MetricsURL is the agent's /metrics, reachable from the test namespace.
func (a *Agent) MetricsURL() string {
	return fmt.Sprintf("http://%s:%d/metrics", a.Node.IP, AgentMetricsPort)
}

// Metric reads one of the agent's metrics (summed over matching labels).
func (a *Agent) Metric(name string, labels ...string) (float64, error) {
	return Metric(a.MetricsURL(), name, labels...)
}

// WaitReady waits until the agent's /readyz answers ok, or fails with the
// tail of its log.
func (a *Agent) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s:%d/readyz", a.Node.IP, AgentHealthPort)
	if err := waitHTTP(ctx, url, a.Process); err != nil {
		return fmt.Errorf("%s not ready: %w\n%s", a.Name, err, a.Tail(20))
	}
	return nil
}
