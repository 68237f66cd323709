// Package uninstall undoes what npl-lbsync did, for `helm uninstall`: it
// stops the workloads that would re-create what it removes, deletes every
// load balancer of the cluster, and removes npl-lbsync's marks from
// Services and Ingresses with the very patch builders the controller writes
// them with (package claim), and its entries from the status of
// LoadBalancerPolicies with the controller's rule (package lbpolicy). After
// it, no object carries an npl.io key, finalizer or condition, no policy an
// entry of the installation, the opt-ins npl-lbsync added are gone, and the
// opt-ins users set remain.
package uninstall

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/providers"
)

// Workloads names the workloads to stop before cleaning.
type Workloads struct {
	// Namespace holds them.
	Namespace string
	// Deployments are scaled to 0.
	Deployments []string
	// DaemonSets are deleted.
	DaemonSets []string
	// PollInterval is how often their Pods are checked while waiting.
	PollInterval time.Duration
}

// Installation says which objects are this installation's.
type Installation struct {
	// ClusterName is the installation's clusterName, recorded in claims.
	ClusterName string
	// Claim decides which LoadBalancer Services it serves.
	Claim claim.ClaimConfig
	// IngressClass is the IngressClass it serves.
	IngressClass string
}

// StopWorkloads scales the Deployments to 0 and deletes the DaemonSets,
// then waits until their Pods are gone. A workload that does not exist is
// already stopped.
func StopWorkloads(ctx context.Context, client kubernetes.Interface, c Workloads) error {
	logger := klog.FromContext(ctx)
	apps := client.AppsV1()
	for _, name := range c.Deployments {
		d, err := apps.Deployments(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			logger.Info("Deployment to stop does not exist", "deployment", klog.KRef(c.Namespace, name))
			continue
		}
		if err != nil {
			return fmt.Errorf("stop deployment %s/%s: %w", c.Namespace, name, err)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			_, err = apps.Deployments(c.Namespace).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
			if err != nil {
				return fmt.Errorf("scale deployment %s/%s to 0: %w", c.Namespace, name, err)
			}
		}
		if err := waitPodsGone(ctx, client, c, "deployment "+name, d.Spec.Selector); err != nil {
			return err
		}
		logger.Info("Stopped", "deployment", klog.KRef(c.Namespace, name))
	}
	for _, name := range c.DaemonSets {
		ds, err := apps.DaemonSets(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			logger.Info("DaemonSet to stop does not exist", "daemonSet", klog.KRef(c.Namespace, name))
			continue
		}
		if err != nil {
			return fmt.Errorf("stop daemonset %s/%s: %w", c.Namespace, name, err)
		}
		// Deleted rather than emptied: should the uninstall be abandoned,
		// `helm upgrade` re-creates a missing object, while it would keep a
		// node selector added here.
		foreground := metav1.DeletePropagationForeground
		err = apps.DaemonSets(c.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &foreground})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete daemonset %s/%s: %w", c.Namespace, name, err)
		}
		if err := waitPodsGone(ctx, client, c, "daemonset "+name, ds.Spec.Selector); err != nil {
			return err
		}
		logger.Info("Stopped", "daemonSet", klog.KRef(c.Namespace, name))
	}
	return nil
}

// waitPodsGone waits until no Pod of the namespace matches selector,
// terminating ones included.
func waitPodsGone(ctx context.Context, client kubernetes.Interface, c Workloads, what string, selector *metav1.LabelSelector) error {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return fmt.Errorf("%s: pod selector: %w", what, err)
	}
	if sel.Empty() {
		// It would wait for every Pod of the namespace.
		return fmt.Errorf("%s: empty pod selector", what)
	}
	var left []string
	err = wait.PollUntilContextCancel(ctx, c.PollInterval, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
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

// WaitDaemonSetReady waits until the DaemonSet's status shows a ready and
// updated Pod on every node it should run on.
func WaitDaemonSetReady(ctx context.Context, client kubernetes.Interface, namespace, name string, interval time.Duration) error {
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

// Clean deletes every load balancer the provider lists, then removes the
// installation's marks from every Service and Ingress, except from the
// objects whose load balancer could not be deleted (so that running it
// again finishes the job). A failed List touches nothing.
func Clean(ctx context.Context, client kubernetes.Interface, provider providers.Provider, inst Installation) error {
	logger := klog.FromContext(ctx)
	lbs, err := provider.List(ctx)
	if err != nil {
		return fmt.Errorf("list load balancers: %w", err)
	}
	var errs []error
	failed := map[string]bool{} // "namespace/name" of Services and Ingresses
	sharedFailed := false       // the load balancer Ingresses share
	deleted := 0
	for _, lb := range lbs {
		if err := provider.Delete(ctx, lb.Name, lb.Kind); err != nil {
			errs = append(errs, fmt.Errorf("delete load balancer %s of %s: %w", lb.Name, owner(lb), err))
			switch {
			case lb.IsL7() && lb.Ingress == "":
				sharedFailed = true
			case lb.IsL7():
				failed[lb.Ingress] = true
			default:
				failed[lb.Service] = true
			}
			continue
		}
		deleted++
		logger.Info("Deleted load balancer", "loadBalancer", lb.Name, "owner", owner(lb))
	}

	store, err := inputs.IngressesFromAPI(ctx, client, metav1.NamespaceAll)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	s := scope{Installation: inst, store: store, classes: store.Classes()}
	cleaned := 0
	for _, ing := range store.AllIngresses() {
		if failed[ing.Namespace+"/"+ing.Name] || (sharedFailed && claim.Releasable(ing, inst.ClusterName)) {
			logger.Info("Keeping the marks of an ingress whose load balancer is still there", "ingress", klog.KObj(ing))
			continue
		}
		changed, err := s.cleanIngress(ctx, client, ing)
		if err != nil {
			errs = append(errs, err)
		} else if changed {
			cleaned++
			logger.Info("Cleaned ingress", "ingress", klog.KObj(ing))
		}
	}
	svcs, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list services: %w", err))...)
	}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if failed[svc.Namespace+"/"+svc.Name] {
			logger.Info("Keeping the marks of a service whose load balancer is still there", "service", klog.KObj(svc))
			continue
		}
		changed, err := s.cleanService(ctx, client, svc)
		if err != nil {
			errs = append(errs, err)
		} else if changed {
			cleaned++
			logger.Info("Cleaned service", "service", klog.KObj(svc))
		}
	}
	logger.Info("Cleanup done", "loadBalancersDeleted", deleted, "objectsCleaned", cleaned, "errors", len(errs))
	return errors.Join(errs...)
}

func owner(lb lbmodel.LoadBalancer) string {
	if lb.Ingress != "" {
		return "ingress " + lb.Ingress
	}
	if lb.IsL7() {
		return "the ingresses that share it"
	}
	return "service " + lb.Service
}

// scope is the installation and the cluster's Ingresses (indexed by
// backend Service) and IngressClasses, listed once.
type scope struct {
	Installation
	store   inputs.Store
	classes []*networkingv1.IngressClass
}

// usedByOtherInstallation reports whether an Ingress of another npl
// installation's class sends requests to svc: that installation needs the
// opt-in, whoever added it.
func (s scope) usedByOtherInstallation(svc *corev1.Service) bool {
	mine := ingress.Config{IngressClass: s.IngressClass}
	return slices.ContainsFunc(s.store.IngressesOf(svc.Namespace+"/"+svc.Name), func(ing *networkingv1.Ingress) bool {
		return ing.DeletionTimestamp == nil &&
			ingress.Ours(ing, s.classes, ingress.Config{}) && !ingress.Ours(ing, s.classes, mine)
	})
}

// step is one patch of a cleanup; subresource is "" or "status".
type step[T any] struct {
	subresource string
	patch       func(T) []byte
}

// cleanService removes the marks in an order that keeps the Service
// consistent if it stops halfway: status first, the opt-in next, and the
// claim last, since removing the finalizer may let a deleted Service go.
// Another installation's Service is left alone.
func (s scope) cleanService(ctx context.Context, client kubernetes.Interface, svc *corev1.Service) (bool, error) {
	if claim.ClaimedByOther(svc, s.ClusterName) {
		return false, nil
	}
	services := client.CoreV1().Services(svc.Namespace)
	steps := []step[*corev1.Service]{
		{"status", s.clearStatus},
		{"", func(svc *corev1.Service) []byte {
			if s.usedByOtherInstallation(svc) {
				return nil
			}
			p, _ := claim.AnnotationPatch(svc, false)
			return p
		}},
		{"", func(svc *corev1.Service) []byte { return claim.ReleasePatch(svc) }},
	}
	changed, err := apply(ctx, svc, steps,
		func(ctx context.Context) (*corev1.Service, error) {
			return services.Get(ctx, svc.Name, metav1.GetOptions{})
		},
		func(ctx context.Context, patch []byte, sub ...string) (*corev1.Service, error) {
			return services.Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, sub...)
		})
	if err != nil {
		return changed, fmt.Errorf("clean up service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return changed, nil
}

// clearStatus drops the npl.io/LoadBalancerSynced condition and, on a
// Service the installation served, the load balancer ingress it wrote.
func (s scope) clearStatus(svc *corev1.Service) []byte {
	ours := claim.Ours(svc, s.Claim) || claim.Releasable(svc, s.ClusterName)
	return claim.ClearServiceStatusPatch(svc, ours)
}

// cleanIngress removes the load balancer status of an Ingress the
// installation served, then its claim. Another installation's Ingress is
// left alone.
func (s scope) cleanIngress(ctx context.Context, client kubernetes.Interface, ing *networkingv1.Ingress) (bool, error) {
	mine := ingress.Config{IngressClass: s.IngressClass}
	if claim.ClaimedByOther(ing, s.ClusterName) ||
		(!claim.Releasable(ing, s.ClusterName) && !ingress.Ours(ing, s.classes, mine)) {
		return false, nil
	}
	ingresses := client.NetworkingV1().Ingresses(ing.Namespace)
	steps := []step[*networkingv1.Ingress]{
		{"status", func(ing *networkingv1.Ingress) []byte { return claim.IngressStatusPatch(ing, nil) }},
		{"", func(ing *networkingv1.Ingress) []byte { return claim.ReleasePatch(ing) }},
	}
	changed, err := apply(ctx, ing, steps,
		func(ctx context.Context) (*networkingv1.Ingress, error) {
			return ingresses.Get(ctx, ing.Name, metav1.GetOptions{})
		},
		func(ctx context.Context, patch []byte, sub ...string) (*networkingv1.Ingress, error) {
			return ingresses.Patch(ctx, ing.Name, types.MergePatchType, patch, metav1.PatchOptions{}, sub...)
		})
	if err != nil {
		return changed, fmt.Errorf("clean up ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	return changed, nil
}

// apply sends the steps' patches in order, reading the object again and
// starting over on a conflict. An object deleted meanwhile has nothing left
// to clean.
func apply[T any](ctx context.Context, obj T, steps []step[T],
	get func(context.Context) (T, error), patch func(context.Context, []byte, ...string) (T, error)) (changed bool, err error) {
	cur, refetch := obj, false
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if refetch {
			fresh, err := get(ctx)
			if err != nil {
				return err
			}
			cur = fresh
		}
		refetch = true
		for _, st := range steps {
			p := st.patch(cur)
			if p == nil {
				continue
			}
			var sub []string
			if st.subresource != "" {
				sub = []string{st.subresource}
			}
			next, err := patch(ctx, p, sub...)
			if err != nil {
				return err
			}
			cur, changed = next, true
		}
		return nil
	})
	if apierrors.IsNotFound(err) {
		return changed, nil
	}
	return changed, err
}
