package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

// policyTargetIndex indexes LoadBalancerPolicies by the targets
// (lbpolicy.Target.String) of the spec they apply: their own, or the last
// valid one of a policy now invalid.
const policyTargetIndex = "target"

// policyState is the LoadBalancerPolicy part of the controller, set while
// the API server serves the CRD (EnablePolicies, ServePolicies): the
// policies' client and informer, what the provider expresses of a policy,
// and what is remembered of each policy.
type policyState struct {
	client   dynamic.NamespaceableResourceInterface
	informer cache.SharedIndexInformer
	caps     lbmodel.PolicyCapabilities
	// cancel stops the informer (run).
	cancel context.CancelFunc

	mu sync.Mutex
	// checked holds, per policy, the check of its last generation seen and
	// its last spec that passed, which stays applied while a newer one
	// cannot be (in memory only: lost when npl-lbsync restarts).
	checked map[types.UID]policyCheck
}

type policyCheck struct {
	generation int64
	err        error
	lastValid  *v1alpha1.LoadBalancerPolicySpec
}

// EnablePolicies makes the controller apply the LoadBalancerPolicies read
// with client; call it before Start, once the CRD is known to be served
// (inputs.PoliciesServed). PolicyCRD follows the CRD after the start.
func (c *Controller) EnablePolicies(client dynamic.Interface) {
	s := c.newPolicyState(client)
	c.synced = append(c.synced, s.informer.HasSynced)
	c.polp.Store(s)
}

// ServePolicies makes a started controller apply LoadBalancerPolicies: when
// their CRD is installed after the start (PolicyCRD). It starts the
// informer, waits for its cache (at most crdMaxBackoff: a CRD deleted
// meanwhile never syncs), then serves it and queues every policy and the
// targets of each, whose pools then get their policies.
func (c *Controller) ServePolicies(ctx context.Context, client dynamic.Interface) error {
	s := c.newPolicyState(client)
	s.run(ctx)
	wait, cancel := context.WithTimeout(ctx, crdMaxBackoff)
	defer cancel()
	if !cache.WaitForCacheSync(wait.Done(), s.informer.HasSynced) {
		s.cancel()
		return fmt.Errorf("wait for the LoadBalancerPolicy informer cache: %w", wait.Err())
	}
	if old := c.polp.Swap(s); old != nil {
		old.cancel()
	}
	c.queueAllOf(s)
	return nil
}

// StopPolicies stops applying LoadBalancerPolicies: when their CRD is
// deleted (PolicyCRD). It stops the informer and queues the targets of
// the policies it still held, whose pools then lose their policies.
func (c *Controller) StopPolicies() {
	s := c.polp.Swap(nil)
	if s == nil {
		return
	}
	s.cancel()
	c.queueAllOf(s)
}

// PolicyControllerName is the controllerName of the status entries this
// installation writes in LoadBalancerPolicies.
func (c *Controller) PolicyControllerName() string {
	return v1alpha1.ControllerNameOf(c.settings.ClusterName)
}

// PoliciesServed reports whether the controller applies LoadBalancerPolicies.
func (c *Controller) PoliciesServed() bool { return c.polState() != nil }

// PolicyCRD is the CRDWatch (WatchCRDs) of the LoadBalancerPolicy CRD: after
// each change it asks discovery whether the CRD is served, and calls
// ServePolicies when it now is, StopPolicies when it no longer is.
func (c *Controller) PolicyCRD(disco discovery.DiscoveryInterface, client dynamic.Interface) CRDWatch {
	return CRDWatch{Groups: []string{v1alpha1.GroupName}, Sync: func(ctx context.Context) error {
		served, err := inputs.PoliciesServed(disco)
		if err != nil {
			return err
		}
		logger := klog.FromContext(ctx)
		switch {
		case served && !c.PoliciesServed():
			if err := c.ServePolicies(ctx, client); err != nil {
				return err
			}
			logger.Info("LoadBalancerPolicy CRD installed: applying LoadBalancerPolicies", "controllerName", c.PolicyControllerName())
		case !served && c.PoliciesServed():
			c.StopPolicies()
			logger.Info("LoadBalancerPolicy CRD deleted: LoadBalancerPolicies are no longer applied", "crd", v1alpha1.CRDName)
		}
		return nil
	}}
}

// polState returns the LoadBalancerPolicy part, nil when the CRD is not
// served.
func (c *cluster) polState() *policyState { return c.polp.Load() }

// newPolicyState makes the informer of LoadBalancerPolicies, with its
// handlers.
func (c *Controller) newPolicyState(client dynamic.Interface) *policyState {
	s := &policyState{client: client.Resource(v1alpha1.Resource), caps: c.policyCaps, checked: map[types.UID]policyCheck{}}
	s.informer = dynamicinformer.NewFilteredDynamicInformer(client, v1alpha1.Resource, metav1.NamespaceAll, 0,
		cache.Indexers{policyTargetIndex: s.targetsIndex}, nil).Informer()
	utilruntime.Must(s.informer.SetTransform(s.transform))
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.policyChanged(s, nil, obj) },
		UpdateFunc: func(old, obj any) { c.policyChanged(s, old, obj) },
		DeleteFunc: func(obj any) { c.policyChanged(s, obj, nil) },
	})
	return s
}

// run starts the informer until ctx ends or cancel is called.
func (s *policyState) run(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	go s.informer.RunWithContext(ctx)
}

// transform makes the informer's typed policy of a listed or watched one,
// and checks it once per generation before its indexes are computed.
func (s *policyState) transform(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	p, err := v1alpha1.FromUnstructured(u)
	if err != nil {
		return nil, err
	}
	p.ManagedFields = nil
	s.check(p)
	return p, nil
}

// check checks a policy's generation unless it was checked already.
func (s *policyState) check(p *v1alpha1.LoadBalancerPolicy) policyCheck {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, seen := s.checked[p.UID]
	if seen && c.generation == p.Generation {
		return c
	}
	c.generation, c.err = p.Generation, lbpolicy.Check(&p.Spec)
	if c.err == nil {
		c.lastValid = p.Spec.DeepCopy()
	}
	s.checked[p.UID] = c
	return c
}

// usable returns the spec of a policy that applies: its own when valid,
// else its last valid one (kept) or none, with why it is invalid.
func (s *policyState) usable(p *v1alpha1.LoadBalancerPolicy) (spec *v1alpha1.LoadBalancerPolicySpec, invalid error, kept bool) {
	c := s.check(p)
	if c.err == nil {
		return &p.Spec, nil, false
	}
	return c.lastValid, c.err, c.lastValid != nil
}

func (s *policyState) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.checked, uid)
}

func (s *policyState) targetsIndex(obj any) ([]string, error) {
	p, ok := obj.(*v1alpha1.LoadBalancerPolicy)
	if !ok {
		return nil, nil
	}
	spec, _, _ := s.usable(p)
	if spec == nil {
		return nil, nil
	}
	var keys []string
	for _, t := range lbpolicy.Targets(p.Namespace, spec) {
		keys = append(keys, t.String())
	}
	return keys, nil
}

// policiesOf returns the policies that apply to a target.
func (s *policyState) policiesOf(t lbpolicy.Target) []*v1alpha1.LoadBalancerPolicy {
	objs, _ := s.informer.GetIndexer().ByIndex(policyTargetIndex, t.String())
	out := make([]*v1alpha1.LoadBalancerPolicy, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*v1alpha1.LoadBalancerPolicy); ok {
			out = append(out, p)
		}
	}
	return out
}

// resolve merges the policies that apply to a target.
func (s *policyState) resolve(t lbpolicy.Target) lbpolicy.Resolution {
	var cands []lbpolicy.Candidate
	for _, p := range s.policiesOf(t) {
		spec, _, _ := s.usable(p)
		if spec != nil {
			cands = append(cands, lbpolicy.Candidate{Name: p.Name, Created: p.CreationTimestamp.Time, Policy: &spec.TrafficPolicy})
		}
	}
	return lbpolicy.Resolve(cands)
}

// lookup is the merged policy of a target, nil when none sets anything
// (lbpolicy.Lookup).
func (s *policyState) lookup(t lbpolicy.Target) *v1alpha1.TrafficPolicy {
	r := s.resolve(t)
	if len(r.Won) == 0 {
		return nil
	}
	return &r.Policy
}

// attachPolicies sets the policies of the targets of lb on its pools
// (lbpolicy.Attach); nothing when LoadBalancerPolicies are not served.
func (c *cluster) attachPolicies(lb *lbmodel.LoadBalancer, own *lbpolicy.Target, backends map[string][]string) {
	s := c.polState()
	if s == nil || lb == nil {
		return
	}
	lbpolicy.Attach(lb, own, backends, s.lookup)
}

// policyChanged queues, for a policy of s whose spec changed (a write of
// its status is ours: nothing to do), what queuePolicy does of it before
// and after.
func (c *Controller) policyChanged(s *policyState, oldObj, obj any) {
	if d, ok := oldObj.(cache.DeletedFinalStateUnknown); ok {
		oldObj = d.Obj
	}
	old, _ := oldObj.(*v1alpha1.LoadBalancerPolicy)
	cur, _ := obj.(*v1alpha1.LoadBalancerPolicy)
	if old != nil && cur != nil && old.Generation == cur.Generation {
		return
	}
	for _, p := range []*v1alpha1.LoadBalancerPolicy{old, cur} {
		if p != nil {
			c.queuePolicy(s, p)
		}
	}
	if old != nil && cur == nil {
		s.forget(old.UID)
	}
}

// queueAllOf queues what queuePolicy does of every policy s holds: when s
// starts or stops being served.
func (c *Controller) queueAllOf(s *policyState) {
	for _, o := range s.informer.GetStore().List() {
		if p, ok := o.(*v1alpha1.LoadBalancerPolicy); ok {
			c.queuePolicy(s, p)
		}
	}
}

// queuePolicy queues a policy of s, the targets it applies to or names,
// and the other policies of those targets, whose status may change with
// it.
func (c *Controller) queuePolicy(s *policyState, p *v1alpha1.LoadBalancerPolicy) {
	c.queue.Add(policyKey(p.Namespace, p.Name))
	targets := lbpolicy.Targets(p.Namespace, &p.Spec)
	if spec, _, _ := s.usable(p); spec != nil {
		targets = append(targets, lbpolicy.Targets(p.Namespace, spec)...)
	}
	for _, t := range targets {
		switch t.Kind {
		case v1alpha1.KindService:
			c.services.queueWithUsers(serviceKey(t.Namespace, t.Name), 0)
		case v1alpha1.KindGateway:
			c.queue.Add(gatewayKey(t.Namespace, t.Name))
		}
		c.queuePoliciesIn(s, t)
	}
}

// queuePoliciesOf queues the policies that apply to a target, whose status
// says whether it exists and is served.
func (c *cluster) queuePoliciesOf(t lbpolicy.Target) {
	if s := c.polState(); s != nil {
		c.queuePoliciesIn(s, t)
	}
}

// queuePoliciesIn queues the policies of s that apply to a target.
func (c *cluster) queuePoliciesIn(s *policyState, t lbpolicy.Target) {
	for _, p := range s.policiesOf(t) {
		c.queue.Add(policyKey(p.Namespace, p.Name))
	}
}

// policyReconciler writes the status of LoadBalancerPolicies: one entry
// per target it speaks for, with the Accepted condition of
// lbpolicy.Outcome. The Service, Ingress and Gateway reconcilers apply
// the policies (attachPolicies).
type policyReconciler struct {
	*cluster
}

func (r *policyReconciler) kinds() []kind { return []kind{kindPolicy} }

// keys returns the key of every policy.
func (r *policyReconciler) keys() []queueKey {
	s := r.polState()
	if s == nil {
		return nil
	}
	var keys []queueKey
	for _, o := range s.informer.GetStore().List() {
		if p, ok := o.(*v1alpha1.LoadBalancerPolicy); ok {
			keys = append(keys, policyKey(p.Namespace, p.Name))
		}
	}
	return keys
}

// claimed: a policy owns no load balancer.
func (r *policyReconciler) claimed(map[string]bool) {}

// sync writes the status of one policy when it changes.
func (r *policyReconciler) sync(ctx context.Context, key queueKey) syncResult {
	s := r.polState()
	if s == nil {
		return synced()
	}
	obj, exists, err := s.informer.GetStore().GetByKey(key.namespace + "/" + key.name)
	p, ok := obj.(*v1alpha1.LoadBalancerPolicy)
	if err != nil || !exists || !ok {
		return synced()
	}
	spec, invalid, kept := s.usable(p)
	targets := lbpolicy.Targets(p.Namespace, &p.Spec)
	if spec != nil {
		targets = append(targets, lbpolicy.Targets(p.Namespace, spec)...)
	}
	desired := map[lbpolicy.Target]metav1.Condition{}
	for _, t := range targets {
		if !r.speaksFor(t) {
			continue
		}
		kinds, notFound := r.poolKinds(t)
		o := lbpolicy.Outcome{NotFound: notFound}
		if notFound == "" && spec != nil {
			o = s.resolve(t).OutcomeOf(p.Name, &spec.TrafficPolicy, kinds, s.caps)
		}
		o.Invalid, o.KeptLast = invalid, kept
		desired[t] = o.Condition(p.Generation)
	}
	ancestors := lbpolicy.Ancestors(p.Status.Ancestors, v1alpha1.ControllerNameOf(r.settings.ClusterName), desired, metav1.Now())
	if apiequality.Semantic.DeepEqual(p.Status.Ancestors, ancestors) {
		return synced()
	}
	upd := p.DeepCopy()
	upd.Status.Ancestors = ancestors
	u, err := v1alpha1.ToUnstructured(upd)
	if err != nil {
		return retryOn(err)
	}
	// The resourceVersion read makes a concurrent change a conflict: the
	// sync is retried with the newer object.
	if _, err := s.client.Namespace(p.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return retryOn(fmt.Errorf("update LoadBalancerPolicy %s/%s status: %w", p.Namespace, p.Name, err))
	}
	return synced()
}

// speaksFor reports whether this installation writes the status entry of
// a target (lbpolicy.SpeaksFor).
func (r *policyReconciler) speaksFor(t lbpolicy.Target) bool {
	var svc *corev1.Service
	gatewayOfAnother := false
	switch t.Kind {
	case v1alpha1.KindService:
		svc = r.store.Service(t.Namespace, t.Name)
	case v1alpha1.KindGateway:
		if g := r.gwState(); g != nil {
			gw, err := g.gateways.Gateways(t.Namespace).Get(t.Name)
			gatewayOfAnother = err == nil && !gateway.Ours(gw, r.gatewayClasses())
		}
	}
	return lbpolicy.SpeaksFor(t, svc, gatewayOfAnother, r.settings.ClusterName)
}

// poolKinds returns the kinds of the pools npl-lbsync builds of a target
// (for what of a policy applies to them), or why it builds none.
func (r *policyReconciler) poolKinds(t lbpolicy.Target) ([]lbpolicy.PoolKind, string) {
	if t.Kind == v1alpha1.KindGateway {
		return r.gatewayPoolKinds(t)
	}
	id := "Service " + t.Namespace + "/" + t.Name
	svc := r.store.Service(t.Namespace, t.Name)
	if svc == nil {
		return nil, id + " not found"
	}
	var kinds []lbpolicy.PoolKind
	ports := func() {
		for _, p := range svc.Spec.Ports {
			switch p.Protocol {
			case corev1.ProtocolTCP, "":
				kinds = append(kinds, lbpolicy.PoolTCP)
			case corev1.ProtocolUDP:
				kinds = append(kinds, lbpolicy.PoolUDP)
			}
		}
	}
	if claim.Ours(svc, r.settings.Claim) && svc.DeletionTimestamp == nil {
		ports()
	}
	if r.referencedByNPLIngress(svc) {
		kinds = append(kinds, lbpolicy.PoolHTTP)
	}
	if r.referencedByNPLRoute(svc) {
		kinds = append(kinds, lbpolicy.PoolHTTP)
		ports()
	}
	if len(kinds) == 0 {
		return nil, id + " is not served by npl-lbsync: it is neither a LoadBalancer Service of its class nor a backend of its Ingresses or Gateway routes"
	}
	slices.Sort(kinds)
	return slices.Compact(kinds), ""
}

func (r *policyReconciler) gatewayPoolKinds(t lbpolicy.Target) ([]lbpolicy.PoolKind, string) {
	id := "Gateway " + t.Namespace + "/" + t.Name
	g := r.gwState()
	if g == nil {
		return nil, id + ": npl-lbsync does not serve the Gateway API"
	}
	gw, err := g.gateways.Gateways(t.Namespace).Get(t.Name)
	if err != nil {
		return nil, id + " not found"
	}
	if !gateway.Ours(gw, r.gatewayClasses()) {
		return nil, id + " is not of a GatewayClass of npl-lbsync"
	}
	var kinds []lbpolicy.PoolKind
	for _, l := range gw.Spec.Listeners {
		switch l.Protocol {
		case gatewayv1.HTTPProtocolType, gatewayv1.HTTPSProtocolType:
			kinds = append(kinds, lbpolicy.PoolHTTP)
		case gatewayv1.TLSProtocolType:
			kinds = append(kinds, lbpolicy.PoolTLS)
		case gatewayv1.TCPProtocolType:
			kinds = append(kinds, lbpolicy.PoolTCP)
		case gatewayv1.UDPProtocolType:
			kinds = append(kinds, lbpolicy.PoolUDP)
		}
	}
	slices.Sort(kinds)
	return slices.Compact(kinds), ""
}
