package controller

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
)

// The indexes of the informer of a kind of Gateway API policy.
const (
	// gwPolicyTargetIndex indexes policies by the "namespace/name" of each
	// Service they target.
	gwPolicyTargetIndex = "targetService"
	// gwPolicyAncestorIndex indexes policies by the "namespace/name" of each
	// Gateway whose entry of ours their status holds.
	gwPolicyAncestorIndex = "ancestorGateway"
)

// policyKind is one kind of Gateway API policy of backend Services
// (BackendTLSPolicy, XBackendTrafficPolicy) with a status.ancestors entry
// per Gateway: its informer, and what the controller reads and writes of
// its objects.
type policyKind[P interface {
	comparable
	metav1.Object
}] struct {
	// resource names the kind in errors: "backendtlspolicy".
	resource string
	informer cache.SharedIndexInformer
	// targets are the Services a policy targets.
	targets func(P) []gateway.ServiceRef
	// ancestors are a policy's status.ancestors; withAncestors is a copy
	// of a policy with them set.
	ancestors     func(P) []gatewayv1.PolicyAncestorStatus
	withAncestors func(P, []gatewayv1.PolicyAncestorStatus) P
	updateStatus  func(context.Context, P) (P, error)
}

// index adds the target and ancestor indexes to the kind's informer, with
// more.
func (k *policyKind[P]) index(more cache.Indexers) {
	idx := cache.Indexers{
		gwPolicyTargetIndex: func(obj any) ([]string, error) {
			p, ok := obj.(P)
			if !ok {
				return nil, nil
			}
			var keys []string
			for _, r := range k.targets(p) {
				keys = append(keys, r.String())
			}
			return keys, nil
		},
		gwPolicyAncestorIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(P); ok {
				return gateway.AncestorGateways(p.GetNamespace(), k.ancestors(p)), nil
			}
			return nil, nil
		},
	}
	for name, f := range more {
		idx[name] = f
	}
	utilruntime.Must(k.informer.AddIndexers(idx))
}

// byIndex returns the policies under an index value.
func (k *policyKind[P]) byIndex(index, value string) []P {
	objs, _ := k.informer.GetIndexer().ByIndex(index, value)
	return inputs.Typed[P](objs)
}

// policiesOf returns the policies that target the backends of routes.
func (k *policyKind[P]) policiesOf(routes []any) []P {
	var out []P
	seen := map[string]bool{}
	for _, rt := range routes {
		for _, ref := range gateway.Backends(rt) {
			if seen[ref.String()] {
				continue
			}
			seen[ref.String()] = true
			out = append(out, k.byIndex(gwPolicyTargetIndex, ref.String())...)
		}
	}
	return out
}

// changed queues the Gateways whose routes send to the Services a policy
// targets or targeted, and those whose entry its status holds; a write of
// its status (ours) needs no sync.
func (k *policyKind[P]) changed(c *Controller, oldObj, obj any) {
	if d, ok := oldObj.(cache.DeletedFinalStateUnknown); ok {
		oldObj = d.Obj
	}
	old, _ := oldObj.(P)
	cur, _ := obj.(P)
	var zero P
	if old != zero && cur != zero && old.GetGeneration() == cur.GetGeneration() {
		return
	}
	for _, p := range []P{old, cur} {
		if p == zero {
			continue
		}
		for _, ref := range k.targets(p) {
			c.enqueueGatewaysOf(ref.String(), 0)
		}
		for _, key := range gateway.AncestorGateways(p.GetNamespace(), k.ancestors(p)) {
			ns, name, _ := cache.SplitMetaNamespaceKey(key)
			c.queue.Add(gatewayKey(ns, name))
		}
	}
}

// writeStatuses sets, in every policy of results or that holds an entry
// of ours for the Gateway of key, that entry of its status.ancestors
// (removed when results have none for the policy). A conflict fails the
// sync, which is retried.
func (k *policyKind[P]) writeStatuses(ctx context.Context, w *ownWrites, key queueKey, results []gateway.PolicyResult) error {
	policies := k.byIndex(gwPolicyAncestorIndex, key.namespace+"/"+key.name)
	for _, res := range results {
		obj, ok, _ := k.informer.GetIndexer().GetByKey(res.Namespace + "/" + res.Name)
		if p, isPolicy := obj.(P); ok && isPolicy && !slices.Contains(policies, p) {
			policies = append(policies, p)
		}
	}
	now := metav1.Now()
	var eg errgroup.Group
	eg.SetLimit(statusWriters)
	for _, p := range policies {
		current := k.ancestors(p)
		if last, ok := pending(w, p); ok {
			current = k.ancestors(last) // the spec stays the cache's
		}
		var desired []metav1.Condition
		if i := slices.IndexFunc(results, func(res gateway.PolicyResult) bool {
			return res.Namespace == p.GetNamespace() && res.Name == p.GetName()
		}); i >= 0 {
			desired = results[i].Conditions
		}
		ancestors := gateway.PolicyAncestors(current, key.namespace, key.name, desired, now)
		if apiequality.Semantic.DeepEqual(current, ancestors) || (len(ancestors) == 0 && len(current) == 0) {
			continue
		}
		upd := k.withAncestors(p, ancestors)
		eg.Go(func() error {
			out, err := k.updateStatus(ctx, upd)
			if err != nil {
				return fmt.Errorf("update %s %s/%s status: %w", k.resource, upd.GetNamespace(), upd.GetName(), err)
			}
			w.wrote(out)
			return nil
		})
	}
	return eg.Wait()
}
