package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
)

// The indexes of the BackendTLSPolicy informer.
const (
	// tlsTargetIndex indexes policies by the "namespace/name" of each
	// Service they target.
	tlsTargetIndex = "targetService"
	// tlsConfigMapIndex indexes policies by the "namespace/name" of each
	// ConfigMap they name as CA certificates.
	tlsConfigMapIndex = "caConfigMap"
	// tlsAncestorIndex indexes policies by the "namespace/name" of each
	// Gateway whose entry of ours their status holds.
	tlsAncestorIndex = "ancestorGateway"
)

// backendTLSState is the BackendTLSPolicy part of the Gateway API state,
// when the API server serves the CRD: the policies' informer and client,
// and the watches of the ConfigMaps they name.
type backendTLSState struct {
	informer   cache.SharedIndexInformer
	client     gatewayclient.Interface
	configMaps *configMapWatch
}

// newBackendTLSState makes the informer of BackendTLSPolicies, with its
// handlers.
func (c *Controller) newBackendTLSState(factory gatewayinformers.SharedInformerFactory, client gatewayclient.Interface) *backendTLSState {
	s := &backendTLSState{informer: factory.Gateway().V1().BackendTLSPolicies().Informer(), client: client}
	s.configMaps = newConfigMapWatch(c.client, func(key string) { c.caConfigMapChanged(s, key) })
	utilruntime.Must(s.informer.AddIndexers(cache.Indexers{
		tlsTargetIndex: func(obj any) ([]string, error) {
			p, ok := obj.(*gatewayv1.BackendTLSPolicy)
			if !ok {
				return nil, nil
			}
			var keys []string
			for _, r := range gateway.BackendTLSTargets(p) {
				keys = append(keys, r.String())
			}
			return keys, nil
		},
		tlsConfigMapIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(*gatewayv1.BackendTLSPolicy); ok {
				return gateway.BackendTLSConfigMaps(p), nil
			}
			return nil, nil
		},
		tlsAncestorIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(*gatewayv1.BackendTLSPolicy); ok {
				return gateway.AncestorGateways(p.Namespace, p.Status.Ancestors), nil
			}
			return nil, nil
		},
	}))
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.backendTLSPolicyChanged(s, nil, obj) },
		UpdateFunc: func(old, obj any) { c.writes.observed(obj); c.backendTLSPolicyChanged(s, old, obj) },
		DeleteFunc: func(obj any) { c.backendTLSPolicyChanged(s, obj, nil) },
	})
	return s
}

// byIndex returns the policies under an index value.
func (s *backendTLSState) byIndex(index, value string) []*gatewayv1.BackendTLSPolicy {
	objs, _ := s.informer.GetIndexer().ByIndex(index, value)
	return inputs.Typed[*gatewayv1.BackendTLSPolicy](objs)
}

// policiesOf returns the policies that target the backends of routes.
func (s *backendTLSState) policiesOf(routes []any) []*gatewayv1.BackendTLSPolicy {
	var out []*gatewayv1.BackendTLSPolicy
	seen := map[string]bool{}
	for _, rt := range routes {
		for _, ref := range gateway.Backends(rt) {
			if seen[ref.String()] {
				continue
			}
			seen[ref.String()] = true
			out = append(out, s.byIndex(tlsTargetIndex, ref.String())...)
		}
	}
	return out
}

// backendTLSPolicyChanged queues the Gateways whose routes send to the
// Services a policy targets or targeted, and those whose entry its status
// holds; a write of its status (ours) needs no sync. It watches the
// ConfigMaps the policies name from then on.
func (c *Controller) backendTLSPolicyChanged(s *backendTLSState, oldObj, obj any) {
	if d, ok := oldObj.(cache.DeletedFinalStateUnknown); ok {
		oldObj = d.Obj
	}
	old, _ := oldObj.(*gatewayv1.BackendTLSPolicy)
	cur, _ := obj.(*gatewayv1.BackendTLSPolicy)
	s.configMaps.set(s.informer.GetIndexer().ListIndexFuncValues(tlsConfigMapIndex))
	if old != nil && cur != nil && old.Generation == cur.Generation {
		return
	}
	for _, p := range []*gatewayv1.BackendTLSPolicy{old, cur} {
		if p == nil {
			continue
		}
		for _, ref := range gateway.BackendTLSTargets(p) {
			c.enqueueGatewaysOf(ref.String(), 0)
		}
		for _, k := range gateway.AncestorGateways(p.Namespace, p.Status.Ancestors) {
			ns, name, _ := cache.SplitMetaNamespaceKey(k)
			c.queue.Add(gatewayKey(ns, name))
		}
	}
}

// caConfigMapChanged queues the Gateways whose routes send to the Services
// of the policies that name a ConfigMap.
func (c *Controller) caConfigMapChanged(s *backendTLSState, key string) {
	for _, p := range s.byIndex(tlsConfigMapIndex, key) {
		for _, ref := range gateway.BackendTLSTargets(p) {
			c.enqueueGatewaysOf(ref.String(), 0)
		}
	}
}

// writeBackendTLSStatuses sets, in every BackendTLSPolicy of results or
// that holds an entry of ours for the Gateway of key, that entry of its
// status.ancestors (removed when results have none for the policy). A
// conflict fails the sync, which is retried.
func (r *gatewayReconciler) writeBackendTLSStatuses(ctx context.Context, key queueKey, results []gateway.PolicyResult) error {
	g := r.gwState()
	if g == nil || g.backendTLS == nil {
		return nil
	}
	s := g.backendTLS
	gw := key.namespace + "/" + key.name
	policies := s.byIndex(tlsAncestorIndex, gw)
	for _, res := range results {
		obj, ok, _ := s.informer.GetIndexer().GetByKey(res.Namespace + "/" + res.Name)
		if p, isPolicy := obj.(*gatewayv1.BackendTLSPolicy); ok && isPolicy && !slices.Contains(policies, p) {
			policies = append(policies, p)
		}
	}
	now := metav1.Now()
	var eg errgroup.Group
	eg.SetLimit(statusWriters)
	for _, p := range policies {
		if last, ok := pending(&r.writes, p); ok {
			p = p.DeepCopy()
			p.Status = last.Status // the spec stays the cache's
		}
		var desired []metav1.Condition
		if i := slices.IndexFunc(results, func(res gateway.PolicyResult) bool {
			return res.Namespace == p.Namespace && res.Name == p.Name
		}); i >= 0 {
			desired = results[i].Conditions
		}
		ancestors := gateway.PolicyAncestors(p.Status.Ancestors, key.namespace, key.name, desired, now)
		if apiequality.Semantic.DeepEqual(p.Status.Ancestors, ancestors) || (len(ancestors) == 0 && len(p.Status.Ancestors) == 0) {
			continue
		}
		upd := p.DeepCopy()
		upd.Status.Ancestors = ancestors
		eg.Go(func() error {
			out, err := s.client.GatewayV1().BackendTLSPolicies(upd.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("update backendtlspolicy %s/%s status: %w", upd.Namespace, upd.Name, err)
			}
			r.writes.wrote(out)
			return nil
		})
	}
	return eg.Wait()
}

// configMapWatch watches the ConfigMaps BackendTLSPolicies name as CA
// certificates, and those only: one informer per ConfigMap, selecting it
// by name, started when a policy names it and stopped when none does. A
// change of one calls changed with its "namespace/name".
type configMapWatch struct {
	client  kubernetes.Interface
	changed func(key string)

	mu sync.Mutex
	// ctx is the life of the informers, nil until run.
	ctx     context.Context
	want    []string
	running map[string]*configMapInformer
}

type configMapInformer struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

func newConfigMapWatch(client kubernetes.Interface, changed func(string)) *configMapWatch {
	return &configMapWatch{client: client, changed: changed, running: map[string]*configMapInformer{}}
}

// run starts the watches of the ConfigMaps named so far and of those named
// later, until ctx ends.
func (w *configMapWatch) run(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx = ctx
	w.reconcile()
}

// set makes the ConfigMaps watched those of keys ("namespace/name").
func (w *configMapWatch) set(keys []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want = keys
	w.reconcile()
}

// reconcile starts and stops informers so that those of w.want run; w.mu
// is held.
func (w *configMapWatch) reconcile() {
	if w.ctx == nil {
		return
	}
	for key, ci := range w.running {
		if !slices.Contains(w.want, key) || w.ctx.Err() != nil {
			ci.stop()
			delete(w.running, key)
		}
	}
	if w.ctx.Err() != nil {
		return
	}
	for _, key := range w.want {
		if w.running[key] != nil {
			continue
		}
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil {
			continue
		}
		inf := coreinformers.NewFilteredConfigMapInformer(w.client, ns, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
		utilruntime.Must(inf.SetTransform(trimGatewayObject))
		changed := func(any) { w.changed(key) }
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: changed, UpdateFunc: func(_, obj any) { changed(obj) }, DeleteFunc: changed,
		})
		ctx, stop := context.WithCancel(w.ctx)
		w.running[key] = &configMapInformer{informer: inf, stop: stop}
		go inf.RunWithContext(ctx)
	}
}

// get reads a ConfigMap from its watch once that has listed it, else from
// the API (a policy that names it is new, or npl-lbsync may not list it).
func (w *configMapWatch) get(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	key := namespace + "/" + name
	w.mu.Lock()
	ci := w.running[key]
	w.mu.Unlock()
	if ci != nil && ci.informer.HasSynced() {
		obj, ok, err := ci.informer.GetStore().GetByKey(key)
		if cm, isCM := obj.(*corev1.ConfigMap); err == nil && ok && isCM {
			return cm, nil
		}
		if err == nil {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
		}
	}
	cm, err := w.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get configmap %s: %w", key, err)
	}
	return cm, nil
}
