package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/lbsync/config"
	"github.com/nodeportlocal/npl/lbsync/uninstall"
)

// cleanupOptions are the flags of `npl-lbsync cleanup` and its subcommand.
type cleanupOptions struct {
	workloads uninstall.Workloads
	timeout   time.Duration
}

func newCleanupCommand(o *options) *cobra.Command {
	c := &cleanupOptions{workloads: uninstall.Workloads{PollInterval: time.Second}}
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete this cluster's load balancers and npl-lbsync's marks on Services and Ingresses (on uninstall)",
		Long: `cleanup undoes what npl-lbsync did, for an uninstall. It first stops the
workloads named by --stop-deployment (scaled to 0) and --stop-daemonset
(deleted) and waits until their Pods are gone, so that nothing re-creates
what it removes. Then it deletes every load balancer the provider lists for this
cluster, and removes from Services and Ingresses every mark of npl-lbsync: the
NodePortLocal opt-ins it added (the ones users set stay), its claim record and
finalizer, its condition and the load balancer status it wrote; and from the
status of LoadBalancerPolicies its own entries (other controllers' and other
installations' stay). An object whose
load balancer could not be deleted keeps its marks, so that running cleanup
again finishes the job. Any failure is reported and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCleanup(cmd.Context(), o, c) },
	}
	f := cmd.Flags()
	f.StringVar(&o.configPath, "config", "/etc/npl/config.yaml", "configuration file, the one npl-lbsync runs with")
	f.StringSliceVar(&c.workloads.Deployments, "stop-deployment", nil, "Deployment of --namespace to scale to 0 before cleaning (repeatable)")
	f.StringSliceVar(&c.workloads.DaemonSets, "stop-daemonset", nil, "DaemonSet of --namespace to delete before cleaning (repeatable)")
	pf := cmd.PersistentFlags()
	pf.StringVar(&c.workloads.Namespace, "namespace", envOr("POD_NAMESPACE", "default"), "namespace of the workloads to stop or wait for (default $POD_NAMESPACE)")
	pf.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	cmd.AddCommand(newWaitDaemonSetCommand(o, c))
	return cmd
}

func newWaitDaemonSetCommand(o *options, c *cleanupOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "wait-daemonset NAME",
		Short: "Wait until DaemonSet NAME has a ready Pod on every node it targets",
		Long: `wait-daemonset returns once the DaemonSet NAME of --namespace has a ready, up to
date Pod on every node it should run on. The chart's uninstall hook uses it to
wait until ` + "`npl-agent cleanup`" + ` (the init container of such a DaemonSet) has run on
every node. It exits 1 at --timeout, naming the nodes still not done.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel, clients, err := cleanupClient(cmd.Context(), o, c)
			if err != nil {
				return err
			}
			defer cancel()
			return uninstall.WaitDaemonSetReady(ctx, clients.kube, c.workloads.Namespace, args[0], c.workloads.PollInterval)
		},
	}
}

// cleanupClients are the API clients of cleanup: typed, and dynamic for
// LoadBalancerPolicies.
type cleanupClients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

// cleanupClient bounds ctx by the timeout and signals and builds the
// clients.
func cleanupClient(ctx context.Context, o *options, c *cleanupOptions) (context.Context, context.CancelFunc, cleanupClients, error) {
	var clients cleanupClients
	if c.timeout <= 0 {
		return nil, nil, clients, cli.Usagef("--timeout must be positive")
	}
	restCfg, err := cli.RESTConfig(*o.kubeconfig, "npl-lbsync-cleanup")
	if err != nil {
		return nil, nil, clients, cli.Usagef("%v", err)
	}
	if clients.kube, err = kubernetes.NewForConfig(restCfg); err != nil {
		return nil, nil, clients, cli.Usagef("kubernetes client: %v", err)
	}
	if clients.dyn, err = dynamic.NewForConfig(restCfg); err != nil {
		return nil, nil, clients, cli.Usagef("dynamic client: %v", err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	return ctx, func() { cancel(); stop() }, clients, nil
}

func runCleanup(ctx context.Context, o *options, c *cleanupOptions) error {
	cfg, err := config.Load(o.configPath)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	ctx, cancel, clients, err := cleanupClient(ctx, o, c)
	if err != nil {
		return err
	}
	defer cancel()
	logger := klog.FromContext(ctx).WithValues("cluster", cfg.ClusterName(), "provider", cfg.ProviderName())
	ctx = klog.NewContext(ctx, logger)

	// Open the provider first: when the load balancer cannot be reached,
	// cleanup fails before it stops anything.
	provider, err := cfg.Provider().Open(ctx)
	if err != nil {
		return fmt.Errorf("open provider %s: %w", cfg.ProviderName(), err)
	}
	// A running npl-lbsync would re-create load balancers and marks, and a
	// running agent would keep its mappings: stop both before cleaning.
	if err := uninstall.StopWorkloads(ctx, clients.kube, c.workloads); err != nil {
		return err
	}
	inst := uninstall.Installation{ClusterName: cfg.ClusterName(), Claim: cfg.Claim(), IngressClass: cfg.IngressClass()}
	return errors.Join(uninstall.Clean(ctx, clients.kube, provider, inst),
		uninstall.CleanPolicies(ctx, clients.kube, clients.dyn, inst))
}
