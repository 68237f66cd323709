// Command npl-cluster runs the local test cluster until SIGINT or SIGTERM,
// for the demo and for poking at it by hand:
//
//	go run ./test/harness/cluster/cmd/npl-cluster --nodes 3
//
// It re-executes itself inside private network and mount namespaces, so the
// cluster is only reachable from inside them; it prints how to enter them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// config is what the flags say.
type config struct {
	nodes     int
	binDir    string
	keepLogs  bool
	dualStack bool
	// realNodes is the number of real nodes; 0 means stand-in nodes.
	realNodes int
	// kubeProxyMode is the real nodes' kube-proxy mode.
	kubeProxyMode string
}

// maxRealNodes bounds --real-nodes: each real node takes about 220 MB.
const maxRealNodes = 10

// parseFlags reads the flags; the error is one line. help is true for -h.
func parseFlags(args []string) (cfg config, help bool, err error) {
	fs := flag.NewFlagSet("npl-cluster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.nodes, "nodes", 3, "number of nodes (1-200)")
	fs.StringVar(&cfg.binDir, "bin-dir", "", "directory of etcd and the Kubernetes binaries (default: bin/ at the repository root)")
	fs.BoolVar(&cfg.keepLogs, "keep-logs", false, "keep the component logs after exit, in a directory printed at start")
	fs.BoolVar(&cfg.dualStack, "dual-stack", false, "give the bridge, nodes, Pods and Services IPv6 addresses too (fd00:198:18::/48 and fd00:198:19::/48)")
	fs.StringVar(&cfg.kubeProxyMode, "kube-proxy-mode", "iptables", "mode of the real nodes' kube-proxy: iptables or nftables")
	fs.IntVar(&cfg.realNodes, "real-nodes", 0, "run N real nodes (containerd, kubelet, kube-proxy, the images of `make images`) instead of --nodes stand-ins")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, true, nil
		}
		return cfg, false, fmt.Errorf("npl-cluster: %w", err)
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("npl-cluster: unexpected argument %q", fs.Arg(0))
	}
	if cfg.nodes < 1 || cfg.nodes > 200 {
		return cfg, false, fmt.Errorf("npl-cluster: --nodes must be between 1 and 200, not %d", cfg.nodes)
	}
	if cfg.realNodes < 0 || cfg.realNodes > maxRealNodes {
		return cfg, false, fmt.Errorf("npl-cluster: --real-nodes must be between 1 and %d, not %d", maxRealNodes, cfg.realNodes)
	}
	if cfg.kubeProxyMode != "iptables" && cfg.kubeProxyMode != "nftables" {
		return cfg, false, fmt.Errorf("npl-cluster: --kube-proxy-mode is %q; want iptables or nftables", cfg.kubeProxyMode)
	}
	return cfg, false, nil
}

const usage = `Usage: npl-cluster [--nodes N | --real-nodes N [--kube-proxy-mode M]] [--bin-dir DIR] [--keep-logs] [--dual-stack]

Runs a local Kubernetes control plane with N nodes (network namespaces) and a
kubelet stand-in, inside private namespaces, until interrupted. With
--dual-stack, nodes, Pods and Services also get IPv6 addresses. With
--real-nodes N, the N nodes are real: containerd, a kubelet and kube-proxy
(iptables or nftables mode) each, with the images of 'make images' loaded
(dual-stack too with --dual-stack).
`

func run(args []string, stdout, stderr io.Writer) int {
	cfg, help, err := parseFlags(args)
	if help {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if cfg.binDir == "" {
		if cfg.binDir, err = cluster.DefaultBinDir(); err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	if err := cluster.CheckBinaries(cfg.binDir); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	done, code, err := cluster.Reexec()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if done {
		return code
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	opts := cluster.Options{Nodes: cfg.nodes, BinDir: cfg.binDir, DualStack: cfg.dualStack}
	if cfg.realNodes > 0 {
		opts.Nodes, opts.RealNodes, opts.KubeProxyMode = cfg.realNodes, true, cfg.kubeProxyMode
	}
	if cfg.keepLogs {
		if opts.LogDir, err = os.MkdirTemp("", "npl-cluster-logs-"); err != nil {
			fmt.Fprintf(stderr, "npl-cluster: %v\n", err)
			return 1
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	c, err := cluster.Start(startCtx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "npl-cluster: %v\n", err)
		return 1
	}
	printInfo(stdout, c, cfg.keepLogs)
	<-ctx.Done()
	fmt.Fprintln(stdout, "Stopping the cluster...")
	if err := c.Close(); err != nil {
		fmt.Fprintf(stderr, "npl-cluster: close: %v\n", err)
		return 1
	}
	return 0
}

func printInfo(w io.Writer, c *cluster.Cluster, keepLogs bool) {
	pid := os.Getpid()
	enter := fmt.Sprintf("nsenter --target %d --net --mount", pid)
	fmt.Fprintf(w, "Cluster ready in %v: %d nodes, apiserver %s\n", c.StartDuration().Round(time.Millisecond), len(c.Nodes()), c.APIServerURL())
	fmt.Fprintf(w, "KUBECONFIG=%s\n", c.Kubeconfig())
	fmt.Fprintf(w, "The cluster lives in private namespaces; enter them to use it:\n")
	fmt.Fprintf(w, "  %s kubectl --kubeconfig %s get nodes,pods -A\n", enter, c.Kubeconfig())
	fmt.Fprintf(w, "  %s bash     # a shell in the test namespace\n", enter)
	for _, n := range c.Nodes() {
		ips, cidrs := fmt.Sprint(n.IP), fmt.Sprint(n.PodCIDR)
		if c.DualStack() {
			ips, cidrs = fmt.Sprintf("%s,%s", n.IP, n.IPv6), fmt.Sprintf("%s,%s", n.PodCIDR, n.PodCIDRv6)
		}
		fmt.Fprintf(w, "  node %s  ip %s  pods %s  netns %s: %s ip netns exec %s bash\n", n.Name, ips, cidrs, n.Netns, enter, n.Netns)
	}
	if keepLogs {
		fmt.Fprintf(w, "Component logs (kept after exit): %s\n", c.LogDir())
	}
	fmt.Fprintln(w, "Press Ctrl-C to stop and remove everything.")
}
