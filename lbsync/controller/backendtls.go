package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
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
)

// tlsConfigMapIndex indexes BackendTLSPolicies by the "namespace/name" of
// each ConfigMap they name as CA certificates.
const tlsConfigMapIndex = "caConfigMap"

// backendTLSState is the BackendTLSPolicy part of the Gateway API state,
// when the API server serves the CRD: the policies' informer and client,
// and the watch of the ConfigMaps they name (shared with the Gateways').
type backendTLSState struct {
	policyKind[*gatewayv1.BackendTLSPolicy]
	configMaps *configMapWatch
}

// newBackendTLSState makes the informer of BackendTLSPolicies, with its
// handlers; the ConfigMaps they name are watched through configMaps.
func (c *Controller) newBackendTLSState(factory gatewayinformers.SharedInformerFactory, client gatewayclient.Interface, configMaps *configMapWatch) *backendTLSState {
	s := &backendTLSState{policyKind: policyKind[*gatewayv1.BackendTLSPolicy]{
		resource: "backendtlspolicy",
		informer: factory.Gateway().V1().BackendTLSPolicies().Informer(),
		targets:  gateway.BackendTLSTargets,
		ancestors: func(p *gatewayv1.BackendTLSPolicy) []gatewayv1.PolicyAncestorStatus {
			return p.Status.Ancestors
		},
		withAncestors: func(p *gatewayv1.BackendTLSPolicy, a []gatewayv1.PolicyAncestorStatus) *gatewayv1.BackendTLSPolicy {
			p = p.DeepCopy()
			p.Status.Ancestors = a
			return p
		},
		updateStatus: func(ctx context.Context, p *gatewayv1.BackendTLSPolicy) (*gatewayv1.BackendTLSPolicy, error) {
			return client.GatewayV1().BackendTLSPolicies(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		},
	}, configMaps: configMaps}
	s.index(cache.Indexers{
		tlsConfigMapIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(*gatewayv1.BackendTLSPolicy); ok {
				return gateway.BackendTLSConfigMaps(p), nil
			}
			return nil, nil
		},
	})
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.backendTLSPolicyChanged(s, nil, obj) },
		UpdateFunc: func(old, obj any) { c.writes.observed(obj); c.backendTLSPolicyChanged(s, old, obj) },
		DeleteFunc: func(obj any) { c.backendTLSPolicyChanged(s, obj, nil) },
	})
	return s
}

// backendTLSPolicyChanged watches the ConfigMaps the policies name from
// then on, and queues the Gateways a change of a policy concerns
// (policyKind.changed).
func (c *Controller) backendTLSPolicyChanged(s *backendTLSState, oldObj, obj any) {
	s.configMaps.set(gateway.KindBackendTLSPolicy, s.informer.GetIndexer().ListIndexFuncValues(tlsConfigMapIndex))
	s.changed(c, oldObj, obj)
}

// backendTLSConfigMapChanged queues the Gateways whose routes send to the
// Services of the BackendTLSPolicies that name a ConfigMap.
func (c *Controller) backendTLSConfigMapChanged(s *backendTLSState, key string) {
	for _, p := range s.byIndex(tlsConfigMapIndex, key) {
		for _, ref := range gateway.BackendTLSTargets(p) {
			c.enqueueGatewaysOf(ref.String(), 0)
		}
	}
}

// writeBackendTLSStatuses writes the Gateway's entries of the
// BackendTLSPolicies' status.ancestors (policyKind.writeStatuses).
func (r *gatewayReconciler) writeBackendTLSStatuses(ctx context.Context, key queueKey, results []gateway.PolicyResult) error {
	g := r.gwState()
	if g == nil || g.backendTLS == nil {
		return nil
	}
	return g.backendTLS.writeStatuses(ctx, &r.writes, key, results)
}

// configMapWatch watches the ConfigMaps that BackendTLSPolicies and
// Gateways name as CA certificates, and those only: one informer per
// ConfigMap, selecting it by name, started when an object of either names
// it and stopped when none does, so a ConfigMap both name is listed and
// watched once. A change of one calls changed with its "namespace/name".
type configMapWatch struct {
	client  kubernetes.Interface
	changed func(key string)

	mu sync.Mutex
	// ctx is the life of the informers, nil until run.
	ctx context.Context
	// want is, per kind of object that names ConfigMaps, their keys.
	want    map[string][]string
	running map[string]*configMapInformer
}

type configMapInformer struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

func newConfigMapWatch(client kubernetes.Interface, changed func(string)) *configMapWatch {
	return &configMapWatch{client: client, changed: changed, want: map[string][]string{}, running: map[string]*configMapInformer{}}
}

// run starts the watches of the ConfigMaps named so far and of those named
// later, until ctx ends.
func (w *configMapWatch) run(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx = ctx
	w.reconcile()
}

// set makes the ConfigMaps the objects of kind name those of keys
// ("namespace/name").
func (w *configMapWatch) set(kind string, keys []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want[kind] = keys
	w.reconcile()
}

// reconcile starts and stops informers so that those of w.want run; w.mu
// is held.
func (w *configMapWatch) reconcile() {
	if w.ctx == nil {
		return
	}
	var want []string
	for _, keys := range w.want {
		want = append(want, keys...)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	for key, ci := range w.running {
		if !slices.Contains(want, key) || w.ctx.Err() != nil {
			ci.stop()
			delete(w.running, key)
		}
	}
	if w.ctx.Err() != nil {
		return
	}
	for _, key := range want {
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
