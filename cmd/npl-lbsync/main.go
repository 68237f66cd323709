// Command npl-lbsync is the cluster syncer: it claims LoadBalancer Services,
// turns the NodePortLocal annotations of their Pods into pools of
// nodeIP:nodePort members, pushes them to a load balancer provider and writes
// the VIP into the Service status. It runs leader-elected.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/lbsync/config"
	"github.com/nodeportlocal/npl/lbsync/controller"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/providers"
)

func main() {
	cli.Main(newCommand())
}

type options struct {
	kubeconfig     *string
	configPath     string
	leaderElect    bool
	leaseNamespace string
	leaseName      string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	metricsAddr    string
	profiling      *bool
	healthAddr     string
	workers        int
	maxBackoff     time.Duration
	webhookAddr    string
	webhookCertDir string
	apiQPS         float32
	apiBurst       int
}

func newCommand() *cobra.Command {
	o := &options{}
	cmd := cli.NewRoot(&cobra.Command{
		Use:   "npl-lbsync",
		Short: "Feed external load balancers from NodePortLocal Pod annotations",
		Long: `npl-lbsync claims LoadBalancer Services (by loadBalancerClass), opts them in to
NodePortLocal, builds a pool of nodeIP:nodePort members per Service port from the
Pods' nodeportlocal.antrea.io annotations, makes the configured load balancer
(avi, bigip, haproxy or mock) match, and writes the VIP into the Service status.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), o) },
	})
	o.kubeconfig = cli.AddKubeconfigFlag(cmd)
	f := cmd.Flags()
	f.StringVar(&o.configPath, "config", "/etc/npl/config.yaml", "configuration file (YAML, validated strictly)")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader through a Lease so that only one replica writes")
	f.StringVar(&o.leaseNamespace, "leader-elect-namespace", envOr("POD_NAMESPACE", "default"), "namespace of the Lease (default $POD_NAMESPACE)")
	f.StringVar(&o.leaseName, "leader-elect-lease-name", "npl-lbsync", "name of the Lease")
	f.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a follower waits before taking over an unrenewed Lease")
	f.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it steps down")
	f.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew the Lease")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":9103", "address of the Prometheus metrics listener (0 disables it)")
	o.profiling = cli.AddProfilingFlag(cmd)
	f.StringVar(&o.healthAddr, "health-probe-bind-address", ":9104", "address of the /healthz and /readyz listener (0 disables it)")
	f.IntVar(&o.workers, "workers", 4, "Services synced in parallel")
	f.DurationVar(&o.maxBackoff, "max-backoff", 30*time.Second, "cap of the retry delay of a failed sync")
	f.Float32Var(&o.apiQPS, "kube-api-qps", 100, "sustained rate of requests to the Kubernetes API (writes at a first start: one per Service, its claim and status together)")
	f.IntVar(&o.apiBurst, "kube-api-burst", 200, "burst of requests to the Kubernetes API")
	f.StringVar(&o.webhookAddr, "webhook-bind-address", "", "address of the HTTPS admission webhook that injects the npl.io/lb-registered readiness gate (empty disables it)")
	f.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/etc/npl/webhook", "directory with the webhook's tls.crt and tls.key")
	cmd.AddCommand(newCleanupCommand(o))
	return cmd
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, o *options) error {
	cfg, err := config.Load(o.configPath)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	if o.workers < 1 {
		return cli.Usagef("--workers must be at least 1")
	}
	if o.leaderElect && (o.leaseDuration <= o.renewDeadline || o.renewDeadline <= o.retryPeriod || o.retryPeriod <= 0) {
		return cli.Usagef("leader election needs lease duration > renew deadline > retry period > 0")
	}
	d := cli.StartDaemon(ctx)
	d.Profiling = *o.profiling
	defer d.Stop()
	ctx, logger, reg := d.Ctx, d.Log, d.Registry

	restCfg, client, err := cli.KubeClient(*o.kubeconfig, "npl-lbsync", o.apiQPS, o.apiBurst, kubernetes.NewForConfig)
	if err != nil {
		return err
	}

	metrics := controller.NewMetrics(reg)
	var leading sync.Map
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "npl_lbsync_leader", Help: "1 when this replica is the leader."},
		func() float64 {
			if _, ok := leading.Load("leader"); ok {
				return 1
			}
			return 0
		}))

	provider, err := cfg.Provider().Open(ctx)
	if err != nil {
		return fmt.Errorf("open provider %s: %w", cfg.ProviderName(), err)
	}
	ctrl := controller.New(controller.Settings{
		ClusterName:      cfg.ClusterName(),
		ServiceType:      cfg.ServiceType(),
		Family:           cfg.IPFamily(),
		Claim:            cfg.Claim(),
		ResyncPeriod:     cfg.ResyncPeriod(),
		Workers:          o.workers,
		MaxBackoff:       o.maxBackoff,
		DrainPeriod:      cfg.DrainPeriod(),
		IngressClass:     cfg.IngressClass(),
		IngressSharedVIP: cfg.IngressSharedVIP(),
		GatewayFeatures:  gateway.FeaturesFor(cfg.ProviderName()),
		AllowedVIPs:      cfg.AllowedVIPs(),
		NodePortRange:    cfg.NodePortRange(),
	}, client, provider, metrics)
	if err := enablePolicies(ctx, restCfg, client, ctrl); err != nil {
		return err
	}
	watchGateway := false
	if cfg.GatewayAPIEnabled() {
		if watchGateway, err = enableGatewayAPI(ctx, restCfg, client, ctrl); err != nil {
			return err
		}
	}

	handlers := map[string]http.Handler{}
	if h, ok := providers.Unwrap(provider).(interface{ Handler() http.Handler }); ok {
		handlers["/providers/"] = h.Handler()
	}
	var webhookServing atomic.Bool
	ready := func() error {
		if !ctrl.CachesSynced() {
			return fmt.Errorf("informer caches not synced")
		}
		if o.webhookAddr != "" && !webhookServing.Load() {
			return fmt.Errorf("webhook not serving yet")
		}
		// Without leader election this replica leads from the start: it is
		// not ready before its first sync, even in the instant before
		// RunWorkers marks it as the leader.
		if _, ok := leading.Load("leader"); (ok || !o.leaderElect) && !ctrl.FirstSyncDone() {
			return fmt.Errorf("first sync not done")
		}
		return nil
	}
	if err := d.Serve(o.metricsAddr, handlers, o.healthAddr, ready); err != nil {
		return err
	}

	logger.Info("Starting npl-lbsync", "cluster", cfg.ClusterName(), "provider", cfg.ProviderName(), "serviceType", cfg.ServiceType())
	if err := ctrl.Start(ctx); err != nil {
		return err
	}
	if err := watchCRDs(ctx, restCfg, client, ctrl, watchGateway); err != nil {
		return err
	}
	if o.webhookAddr != "" {
		if err := serveWebhook(ctx, o, client, ctrl, cfg); err != nil {
			return err
		}
		webhookServing.Store(true)
	}
	if !o.leaderElect {
		leading.Store("leader", true)
		ctrl.RunWorkers(ctx)
		return nil
	}

	host, _ := os.Hostname()
	id := host + "_" + uuid.NewString()[:8]
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.leaseNamespace, Name: o.leaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.renewDeadline,
		RetryPeriod:     o.retryPeriod,
		ReleaseOnCancel: true,
		Name:            o.leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Became the leader", "identity", id)
				leading.Store("leader", true)
				ctrl.RunWorkers(ctx)
			},
			OnStoppedLeading: func() {
				leading.Delete("leader")
				logger.Info("Stopped leading", "identity", id)
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Following the leader", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return cli.Usagef("leader election: %v", err)
	}
	elector.Run(ctx)
	if ctx.Err() == nil {
		// Leadership was lost without a shutdown: exit so the Pod restarts
		// with fresh state, as client-go recommends.
		return fmt.Errorf("lost leadership")
	}
	return nil
}

// enableGatewayAPI makes ctrl serve Gateways when the API server serves the
// Gateway API resources; without their CRDs it says so once and the rest
// runs as usual. It reports whether some CRDs are missing: then
// watchCRDs serves them when they are installed.
func enableGatewayAPI(ctx context.Context, restCfg *rest.Config, client kubernetes.Interface, ctrl *controller.Controller) (bool, error) {
	served, missing, err := inputs.GatewayAPIServed(client.Discovery())
	if err != nil {
		return false, err
	}
	if !served {
		klog.FromContext(ctx).Info("gatewayAPI.enabled is set but the Gateway API CRDs are not installed: Gateways are not served until they are",
			"missing", missing)
		return true, nil
	}
	kinds, missingKinds, err := inputs.GatewayKindsServed(client.Discovery())
	if err != nil {
		return false, err
	}
	for _, k := range missingKinds {
		klog.FromContext(ctx).Info("The CRD of a Gateway API kind is not installed: its objects are not served until it is",
			"kind", k)
	}
	gc, err := gatewayclient.NewForConfig(restCfg)
	if err != nil {
		return false, fmt.Errorf("gateway API client: %w", err)
	}
	ctrl.EnableGatewayAPI(gc, kinds...)
	klog.FromContext(ctx).Info("Serving Gateway API Gateways", "controllerName", gateway.ControllerName,
		"kinds", append([]string{gateway.KindHTTPRoute}, kinds...))
	return len(missingKinds) > 0, nil
}

// enablePolicies makes ctrl apply LoadBalancerPolicies when the API server
// serves their CRD at the start; without it, it says so once and the rest
// runs (watchCRDs applies them once the CRD is installed).
func enablePolicies(ctx context.Context, restCfg *rest.Config, client kubernetes.Interface, ctrl *controller.Controller) error {
	served, err := inputs.PoliciesServed(client.Discovery())
	if err != nil {
		return err
	}
	if !served {
		klog.FromContext(ctx).Info("The LoadBalancerPolicy CRD is not installed: LoadBalancerPolicies are applied once it is",
			"crd", v1alpha1.CRDName)
		return nil
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	ctrl.EnablePolicies(dyn)
	klog.FromContext(ctx).Info("Applying LoadBalancerPolicies", "controllerName", ctrl.PolicyControllerName())
	return nil
}

// watchCRDs follows, in the background, the LoadBalancerPolicy CRD (its
// policies are applied while it is served) and, with gateway, the Gateway
// API CRDs missing at the start (served once installed):
// controller.WatchCRDs.
func watchCRDs(ctx context.Context, restCfg *rest.Config, client kubernetes.Interface, ctrl *controller.Controller, gateway bool) error {
	meta, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	watches := []controller.CRDWatch{ctrl.PolicyCRD(client.Discovery(), dyn)}
	if gateway {
		gc, err := gatewayclient.NewForConfig(restCfg)
		if err != nil {
			return fmt.Errorf("gateway API client: %w", err)
		}
		watches = append(watches, ctrl.GatewayCRDs(client.Discovery(), gc))
	}
	go controller.WatchCRDs(ctx, meta, watches...)
	return nil
}
