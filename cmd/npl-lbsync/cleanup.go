package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/config"
	"github.com/nodeportlocal/npl/providers"
)

// cleanupOptions are the flags of `npl-lbsync cleanup` and its subcommand.
type cleanupOptions struct {
	namespace       string
	stopDeployments []string
	stopDaemonSets  []string
	timeout         time.Duration
	// pollInterval is how often workloads are checked while waiting.
	pollInterval time.Duration
}

func newCleanupCommand(o *options) *cobra.Command {
	c := &cleanupOptions{pollInterval: time.Second}
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete this cluster's load balancers and npl-lbsync's marks on Services (on uninstall)",
		Long: `cleanup undoes what npl-lbsync did, for an uninstall. It first stops the
workloads named by --stop-deployment (scaled to 0) and --stop-daemonset
(deleted) and waits until their Pods are gone, so that nothing re-creates
what it removes. Then it deletes every load balancer the provider lists for this
cluster, and removes from Services the NodePortLocal opt-ins npl-lbsync added,
its finalizer, its condition and the load balancer status it wrote. A Service
whose load balancer could not be deleted keeps its marks, so that running
cleanup again finishes the job. Any failure is reported and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCleanup(cmd.Context(), o, c) },
	}
	f := cmd.Flags()
	f.StringVar(&o.configPath, "config", "/etc/npl/config.yaml", "configuration file, the one npl-lbsync runs with")
	f.StringSliceVar(&c.stopDeployments, "stop-deployment", nil, "Deployment of --namespace to scale to 0 before cleaning (repeatable)")
	f.StringSliceVar(&c.stopDaemonSets, "stop-daemonset", nil, "DaemonSet of --namespace to delete before cleaning (repeatable)")
	pf := cmd.PersistentFlags()
	pf.StringVar(&c.namespace, "namespace", envOr("POD_NAMESPACE", "default"), "namespace of the workloads to stop or wait for (default $POD_NAMESPACE)")
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
			ctx, cancel, client, err := cleanupClient(cmd.Context(), o, c)
			if err != nil {
				return err
			}
			defer cancel()
			return waitDaemonSetReady(ctx, client, c.namespace, args[0], c.pollInterval)
		},
	}
}

// cleanupClient bounds ctx by the timeout and signals and builds the client.
func cleanupClient(ctx context.Context, o *options, c *cleanupOptions) (context.Context, context.CancelFunc, kubernetes.Interface, error) {
	if c.timeout <= 0 {
		return nil, nil, nil, cli.Usagef("--timeout must be positive")
	}
	restCfg, err := cli.RESTConfig(*o.kubeconfig, "npl-lbsync-cleanup")
	if err != nil {
		return nil, nil, nil, cli.Usagef("%v", err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, nil, cli.Usagef("kubernetes client: %v", err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	return ctx, func() { cancel(); stop() }, client, nil
}

func runCleanup(ctx context.Context, o *options, c *cleanupOptions) error {
	cfg, err := config.Load(o.configPath)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	ctx, cancel, client, err := cleanupClient(ctx, o, c)
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
	if err := stopWorkloads(ctx, client, c); err != nil {
		return err
	}
	return cleanupCluster(ctx, client, provider, cfg.Claim())
}

// stopWorkloads scales the Deployments to 0 and deletes the DaemonSets,
// then waits until their Pods are gone. A workload that does not exist is
// already stopped.
func stopWorkloads(ctx context.Context, client kubernetes.Interface, c *cleanupOptions) error {
	logger := klog.FromContext(ctx)
	apps := client.AppsV1()
	for _, name := range c.stopDeployments {
		d, err := apps.Deployments(c.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			logger.Info("Deployment to stop does not exist", "deployment", klog.KRef(c.namespace, name))
			continue
		}
		if err != nil {
			return fmt.Errorf("stop deployment %s/%s: %w", c.namespace, name, err)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			_, err = apps.Deployments(c.namespace).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
			if err != nil {
				return fmt.Errorf("scale deployment %s/%s to 0: %w", c.namespace, name, err)
			}
		}
		if err := waitPodsGone(ctx, client, c, "deployment "+name, d.Spec.Selector); err != nil {
			return err
		}
		logger.Info("Stopped", "deployment", klog.KRef(c.namespace, name))
	}
	for _, name := range c.stopDaemonSets {
		ds, err := apps.DaemonSets(c.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			logger.Info("DaemonSet to stop does not exist", "daemonSet", klog.KRef(c.namespace, name))
			continue
		}
		if err != nil {
			return fmt.Errorf("stop daemonset %s/%s: %w", c.namespace, name, err)
		}
		// Deleted rather than emptied: should the uninstall be abandoned,
		// `helm upgrade` re-creates a missing object, while it would keep a
		// node selector added here.
		foreground := metav1.DeletePropagationForeground
		err = apps.DaemonSets(c.namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &foreground})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete daemonset %s/%s: %w", c.namespace, name, err)
		}
		if err := waitPodsGone(ctx, client, c, "daemonset "+name, ds.Spec.Selector); err != nil {
			return err
		}
		logger.Info("Stopped", "daemonSet", klog.KRef(c.namespace, name))
	}
	return nil
}

// waitPodsGone waits until no Pod of the namespace matches selector,
// terminating ones included.
func waitPodsGone(ctx context.Context, client kubernetes.Interface, c *cleanupOptions, what string, selector *metav1.LabelSelector) error {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return fmt.Errorf("%s: pod selector: %w", what, err)
	}
	if sel.Empty() {
		// It would wait for every Pod of the namespace.
		return fmt.Errorf("%s: empty pod selector", what)
	}
	var left []string
	err = wait.PollUntilContextCancel(ctx, c.pollInterval, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, fmt.Errorf("list pods of %s: %w", what, err)
		}
		left = left[:0]
		for _, p := range pods.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the pods of %s to stop (still there: %v): %w", what, left, err)
	}
	return nil
}

// waitDaemonSetReady waits until the DaemonSet's status shows a ready and
// updated Pod on every node it should run on.
func waitDaemonSetReady(ctx context.Context, client kubernetes.Interface, namespace, name string, interval time.Duration) error {
	logger := klog.FromContext(ctx)
	var last appsv1.DaemonSetStatus
	var gen int64
	polled := false
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get daemonset %s/%s: %w", namespace, name, err)
		}
		if !polled || ds.Status.NumberReady != last.NumberReady || ds.Status.DesiredNumberScheduled != last.DesiredNumberScheduled {
			logger.Info("Waiting for daemonset", "daemonSet", klog.KObj(ds), "desired", ds.Status.DesiredNumberScheduled, "ready", ds.Status.NumberReady)
		}
		last, gen, polled = ds.Status, ds.Generation, true
		return daemonSetDone(ds), nil
	})
	if err != nil {
		return fmt.Errorf("daemonset %s/%s: %d of %d nodes done (status of generation %d, want %d; pods not ready: %s): %w",
			namespace, name, last.NumberReady, last.DesiredNumberScheduled, last.ObservedGeneration, gen,
			notReadyPods(client, namespace, name), err)
	}
	logger.Info("DaemonSet ready on every node", "daemonSet", klog.KRef(namespace, name), "nodes", last.DesiredNumberScheduled)
	return nil
}

func daemonSetDone(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation &&
		s.NumberReady == s.DesiredNumberScheduled &&
		s.UpdatedNumberScheduled == s.DesiredNumberScheduled
}

// notReadyPods names the DaemonSet's Pods that are not ready and their
// nodes, for the timeout message. It is best effort: it runs after the
// deadline, on a fresh short context.
func notReadyPods(client kubernetes.Interface, namespace, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "unknown"
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return "unknown"
	}
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return "unknown"
	}
	var out []string
	for _, p := range pods.Items {
		ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		})
		if !ready {
			out = append(out, p.Name+" on "+p.Spec.NodeName)
		}
	}
	if len(out) == 0 {
		return "none listed"
	}
	return fmt.Sprint(out)
}

// cleanupCluster deletes every load balancer the provider lists, then
// removes npl-lbsync's marks from every Service, except from the Services
// whose load balancer could not be deleted. A failed List touches nothing.
func cleanupCluster(ctx context.Context, client kubernetes.Interface, provider providers.Provider, claimCfg claim.ClaimConfig) error {
	logger := klog.FromContext(ctx)
	lbs, err := provider.List(ctx)
	if err != nil {
		return fmt.Errorf("list load balancers: %w", err)
	}
	var errs []error
	failed := map[string]bool{}
	deleted := 0
	for _, lb := range lbs {
		if err := provider.Delete(ctx, lb.Name, lb.Kind); err != nil {
			errs = append(errs, fmt.Errorf("delete load balancer %s of service %s: %w", lb.Name, lb.Service, err))
			failed[lb.Service] = true
			continue
		}
		deleted++
		logger.Info("Deleted load balancer", "loadBalancer", lb.Name, "service", lb.Service)
	}

	svcs, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list services: %w", err))...)
	}
	cleaned := 0
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if failed[svc.Namespace+"/"+svc.Name] {
			logger.Info("Keeping the marks of a service whose load balancer is still there", "service", klog.KObj(svc))
			continue
		}
		changed, err := cleanService(ctx, client, svc, claimCfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if changed {
			cleaned++
			logger.Info("Cleaned service", "service", klog.KObj(svc))
		}
	}
	logger.Info("Cleanup done", "loadBalancersDeleted", deleted, "servicesCleaned", cleaned, "errors", len(errs))
	return errors.Join(errs...)
}

// servicePatch computes one merge patch of a Service, or nil when nothing
// is to change; subresource is "" or "status".
type servicePatch struct {
	subresource string
	patch       func(*corev1.Service) ([]byte, error)
}

// cleanService removes the marks in an order that keeps the Service
// consistent if it stops halfway: status first, the opt-in next, and the
// finalizer last, since removing it may let a deleted Service go.
func cleanService(ctx context.Context, client kubernetes.Interface, svc *corev1.Service, claimCfg claim.ClaimConfig) (changed bool, err error) {
	services := client.CoreV1().Services(svc.Namespace)
	steps := []servicePatch{
		{"status", func(s *corev1.Service) ([]byte, error) { return statusCleanupPatch(s, claimCfg) }},
		{"", func(s *corev1.Service) ([]byte, error) { p, _ := claim.AnnotationPatch(s, false); return p, nil }},
		{"", finalizerCleanupPatch},
	}
	cur, refetch := svc, false
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if refetch {
			fresh, err := services.Get(ctx, svc.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = fresh
		}
		refetch = true
		for _, step := range steps {
			patch, err := step.patch(cur)
			if err != nil {
				return err
			}
			if patch == nil {
				continue
			}
			var sub []string
			if step.subresource != "" {
				sub = []string{step.subresource}
			}
			next, err := services.Patch(ctx, cur.Name, types.MergePatchType, patch, metav1.PatchOptions{}, sub...)
			if err != nil {
				return err
			}
			cur, changed = next, true
		}
		return nil
	})
	if apierrors.IsNotFound(err) {
		return changed, nil // deleted meanwhile: nothing left to clean
	}
	if err != nil {
		return changed, fmt.Errorf("clean up service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return changed, nil
}

// statusCleanupPatch drops the npl.io/LoadBalancerSynced condition and, on
// a Service npl-lbsync served, the load balancer ingress it wrote. Another
// controller's Service keeps its ingress. The resourceVersion makes the
// patch fail on a concurrent change rather than drop another writer's
// condition.
func statusCleanupPatch(svc *corev1.Service, claimCfg claim.ClaimConfig) ([]byte, error) {
	status := map[string]any{}
	isSynced := func(c metav1.Condition) bool { return c.Type == claim.SyncedConditionType }
	if slices.ContainsFunc(svc.Status.Conditions, isSynced) {
		var rest []metav1.Condition
		if kept := slices.DeleteFunc(slices.Clone(svc.Status.Conditions), isSynced); len(kept) > 0 {
			rest = kept
		}
		status["conditions"] = rest
	}
	ours := claim.Ours(svc, claimCfg) || claim.HasCleanupFinalizer(svc)
	if ours && len(svc.Status.LoadBalancer.Ingress) > 0 {
		status["loadBalancer"] = map[string]any{"ingress": nil}
	}
	if len(status) == 0 {
		return nil, nil
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"status":   status,
	})
}

// finalizerCleanupPatch removes npl-lbsync's finalizer, keeping the others;
// like the controller's, it carries the resourceVersion.
func finalizerCleanupPatch(svc *corev1.Service) ([]byte, error) {
	if !claim.HasCleanupFinalizer(svc) {
		return nil, nil
	}
	rest := slices.DeleteFunc(slices.Clone(svc.Finalizers), func(f string) bool { return f == claim.CleanupFinalizer })
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": rest, "resourceVersion": svc.ResourceVersion,
	}})
}
