// Command npl-agent is the NodePortLocal node agent: it gives each backend
// Pod port of an opted-in Service its own port on the node, programs the DNAT
// rules and writes the nodeportlocal.antrea.io Pod annotation.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/agent/controller"
	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/agent/kubeapi"
	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/internal/cli"
)

func main() {
	cli.Main(newCommand())
}

type options struct {
	kubeconfig       *string
	nodeName         string
	portRange        string
	serviceNodePorts string
	nodeIPPreference string
	metricsAddr      string
	profiling        *bool
	healthAddr       string
	datapath         string
	checkInterval    time.Duration
	syncWindow       time.Duration
	retiredGrace     time.Duration
	workers          int
	apiQPS           float32
	apiBurst         int
}

func newCommand() *cobra.Command {
	o := &options{}
	cmd := cli.NewRoot(&cobra.Command{
		Use:   "npl-agent",
		Short: "NodePortLocal node agent: a node port per backend Pod port, with iptables or nftables DNAT",
		Long: `npl-agent runs on every node (a DaemonSet). For every Service annotated
nodeportlocal.antrea.io/enabled: "true" it gives each backend Pod port on its node
its own node port, programs DNAT nodeIP:nodePort -> podIP:podPort (iptables or
nftables), and
writes the Antrea-compatible Pod annotation nodeportlocal.antrea.io.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), o) },
	})
	o.kubeconfig = cli.AddKubeconfigFlag(cmd)
	cmd.PersistentFlags().StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	f := cmd.Flags()
	f.StringVar(&o.portRange, "port-range", contract.DefaultPortRange.String(), "node ports to allocate from, inclusive")
	f.StringVar(&o.serviceNodePorts, "service-node-port-range", "30000-32767", "the cluster's NodePort range, which --port-range must not overlap")
	f.StringVar(&o.nodeIPPreference, "node-ip-preference", "InternalIP,ExternalIP", "Node address types to publish as nodeIP, most preferred first")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":9101", "address of the Prometheus metrics listener (0 disables it)")
	o.profiling = cli.AddProfilingFlag(cmd)
	f.StringVar(&o.healthAddr, "health-probe-bind-address", ":9102", "address of the /healthz and /readyz listener (0 disables it)")
	f.StringVar(&o.datapath, "datapath", string(datapath.BackendAuto), "datapath backend: auto, iptables or nftables (auto: nftables when kube-proxy runs in nftables mode or iptables does not work, else iptables)")
	f.DurationVar(&o.checkInterval, "datapath-check-interval", time.Minute, "how often the datapath (chains, or the nftables table) is checked for drift and repaired")
	f.DurationVar(&o.syncWindow, "datapath-sync-window", 0, "when set, the changes within this window after the first are written in one datapath write; 0 writes a change at once (the changes made during a write are written together right after it)")
	f.DurationVar(&o.retiredGrace, "retired-port-grace", 30*time.Second, "after a restart with a --port-range that no longer holds a running Pod's node port, how long the old port keeps forwarding to the Pod beside its new one, while load balancers move to the new annotation; 0 drops it at once")
	f.IntVar(&o.workers, "workers", 4, "Pods synced in parallel")
	f.Float32Var(&o.apiQPS, "kube-api-qps", 50, "sustained rate of requests to the Kubernetes API (one annotation patch per Pod change)")
	f.IntVar(&o.apiBurst, "kube-api-burst", 100, "burst of requests to the Kubernetes API")
	cmd.AddCommand(newCleanupCommand(o))
	return cmd
}

// validate checks the flags and returns the port range to allocate from.
func (o *options) validate() (portalloc.Range, []corev1.NodeAddressType, error) {
	if _, err := datapath.ParseBackend(o.datapath); err != nil {
		return portalloc.Range{}, nil, cli.Usagef("--datapath: %v", err)
	}
	if o.nodeName == "" {
		return portalloc.Range{}, nil, cli.Usagef("--node-name is required (or set $NODE_NAME)")
	}
	rng, err := portalloc.ParseRange(o.portRange)
	if err != nil {
		return rng, nil, cli.Usagef("--port-range: %v", err)
	}
	nodePorts, err := portalloc.ParseRange(o.serviceNodePorts)
	if err != nil {
		return rng, nil, cli.Usagef("--service-node-port-range: %v", err)
	}
	if err := portalloc.CheckRange(rng, nodePorts); err != nil {
		return rng, nil, cli.Usagef("--port-range: %v", err)
	}
	pref, err := controller.ParseNodeIPPreference(o.nodeIPPreference)
	if err != nil {
		return rng, nil, cli.Usagef("--node-ip-preference: %v", err)
	}
	if o.workers < 1 {
		return rng, nil, cli.Usagef("--workers must be at least 1")
	}
	if o.retiredGrace < 0 {
		return rng, nil, cli.Usagef("--retired-port-grace must not be negative")
	}
	return rng, pref, nil
}

// removalWait and removalHold let a Pod replaced (deleted, and a new one
// created right after) have the old Pod's mappings removed and the new
// one's added in one datapath write: a removal waits removalWait for a
// starting Pod that a Service of ours selects to show, then up to
// removalHold in all for its IP, which ends the wait. They bound how much
// longer a removed mapping may forward to its old Pod's IP, which a Pod
// starting then could be given.
const removalWait, removalHold = 20 * time.Millisecond, 100 * time.Millisecond

// familyPath joins a family's coalescing syncer and its datapath.
type familyPath struct {
	*datapath.Syncer
	dp datapath.Datapath
}

func (f familyPath) FlushUDP(ctx context.Context, port int) error { return f.dp.FlushUDP(ctx, port) }

func run(ctx context.Context, o *options) error {
	rng, pref, err := o.validate()
	if err != nil {
		return err
	}
	d := cli.StartDaemon(ctx, "node", o.nodeName)
	d.Profiling = *o.profiling
	defer d.Stop()
	ctx, reg := d.Ctx, d.Registry

	_, client, err := cli.KubeClient(*o.kubeconfig, "npl-agent/"+o.nodeName, o.apiQPS, o.apiBurst, kubeapi.NewForConfig)
	if err != nil {
		return err
	}
	families, err := nodeFamilies(ctx, client, o.nodeName, pref)
	if err != nil {
		return err
	}

	metrics := controller.NewMetrics(reg)

	alloc, err := portalloc.New(rng, portalloc.SocketReserver{})
	if err != nil {
		return fmt.Errorf("port allocator: %w", err)
	}
	defer func() { _ = alloc.Close() }()
	backend, err := datapath.OpenFamilies(ctx, datapath.Backend(o.datapath), families)
	if err != nil {
		return cli.Usagef("--datapath %s: %v", o.datapath, err)
	}
	paths := map[contract.Family]controller.Datapath{}
	var syncers []*datapath.Syncer
	for _, dp := range backend {
		opts := datapath.SyncerOptions{Window: o.syncWindow, CheckInterval: o.checkInterval}
		if dp.Backend() == datapath.BackendNFTables {
			// Only where merging costs nothing: nftables writes elements
			// over a kept netlink socket. An iptables-restore that deletes
			// rules first reads the chain and, at its exit, waits for the
			// kernel to free them: merged, that would be on the new Pod's
			// path, while alone it is mostly done when the new Pod's IP
			// comes.
			opts.RemovalWait, opts.RemovalHold = removalWait, removalHold
		}
		s := datapath.NewSyncer(dp, opts)
		paths[dp.Family()] = familyPath{Syncer: s, dp: dp}
		syncers = append(syncers, s)
		registerDatapathMetrics(reg, dp, s)
	}
	registerAllocatorMetrics(reg, alloc, families)
	registerCommandsMetric(reg)

	ctrl := controller.New(controller.Config{
		NodeName: o.nodeName, PortRange: rng, NodeIPPreference: pref, Workers: o.workers, RetiredPortGrace: o.retiredGrace,
	}, client, alloc, paths, metrics)

	ready := func() error {
		if !ctrl.Ready() {
			return fmt.Errorf("restoring mappings")
		}
		return nil
	}
	if err := d.Serve(o.metricsAddr, nil, o.healthAddr, ready); err != nil {
		return err
	}
	for _, s := range syncers {
		go s.Run(ctx)
	}
	d.Log.Info("Starting npl-agent", "portRange", rng.String(), "families", families)
	// Rules stay in place on exit, so traffic keeps flowing while the agent
	// restarts; `npl-agent cleanup` removes them on uninstall.
	return ctrl.Run(ctx)
}

// nodeFamilies waits for the Node object and returns the IP families it has
// an address of, which decides the datapaths to run.
func nodeFamilies(ctx context.Context, client kubeapi.Interface, name string, pref []corev1.NodeAddressType) ([]contract.Family, error) {
	var families []contract.Family
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		node, err := client.GetNode(ctx, name)
		if err != nil {
			klog.FromContext(ctx).Info("Waiting for the Node", "err", err)
			return false, nil
		}
		ips := controller.NodeIPs(node, pref)
		for _, fam := range []contract.Family{contract.FamilyIPv4, contract.FamilyIPv6} {
			if _, ok := ips[fam]; ok {
				families = append(families, fam)
			}
		}
		return len(families) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for node %s and its addresses: %w", name, err)
	}
	return families, nil
}

func registerDatapathMetrics(reg prometheus.Registerer, dp datapath.Instance, s *datapath.Syncer) {
	labels := prometheus.Labels{"family": string(dp.Family()), "backend": string(dp.Backend())}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "npl_agent_datapath_writes_total", Help: "Datapath writes: iptables-restore runs or nft transactions.", ConstLabels: labels},
			func() float64 { return float64(dp.Stats().Writes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "npl_agent_datapath_execs_total", Help: "Commands run: iptables, iptables-restore, iptables-save, nft and conntrack.", ConstLabels: labels},
			func() float64 { return float64(dp.Stats().Execs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "npl_agent_drift_repairs_total", Help: "Datapath rewrites made because a check found drift.", ConstLabels: labels},
			func() float64 { return float64(s.Stats().DriftRepairs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "npl_agent_datapath_failures_total", Help: "Failed datapath writes or checks (each retried).", ConstLabels: labels},
			func() float64 { return float64(s.Stats().Failures) }),
	)
}

// registerCommandsMetric counts every command the datapath package ran:
// the probes that chose the backend and the removal of the other backend's
// rules included, which no family's counter holds.
func registerCommandsMetric(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "npl_agent_datapath_commands_total",
		Help: "Commands the datapath ran since the agent started, the backend choice and the removal of another backend's rules included.",
	}, func() float64 { return float64(datapath.Execs()) }))
}

func registerAllocatorMetrics(reg prometheus.Registerer, alloc *portalloc.Allocator, families []contract.Family) {
	for _, fam := range families {
		for _, proto := range []contract.Protocol{contract.ProtocolTCP, contract.ProtocolUDP} {
			labels := prometheus.Labels{"family": string(fam), "protocol": string(proto)}
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "npl_agent_free_ports", Help: "Node ports still free for allocation.", ConstLabels: labels,
			}, func() float64 { return float64(alloc.Free(fam, proto)) }))
		}
	}
}
