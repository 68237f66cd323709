package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/nodeportlocal/npl/lbsync/gateway"
)

// trafficPolicyKind is the XBackendTrafficPolicy part of the Gateway API
// state, when the API server serves its (experimental) CRD.
type trafficPolicyKind = policyKind[*gatewayxv1a1.XBackendTrafficPolicy]

// newTrafficPolicyKind makes the informer of XBackendTrafficPolicies, with
// its handlers.
func (c *Controller) newTrafficPolicyKind(factory gatewayinformers.SharedInformerFactory, client gatewayclient.Interface) *trafficPolicyKind {
	k := &trafficPolicyKind{
		resource: "xbackendtrafficpolicy",
		informer: factory.Experimental().V1alpha1().XBackendTrafficPolicies().Informer(),
		targets:  gateway.TrafficPolicyTargets,
		ancestors: func(p *gatewayxv1a1.XBackendTrafficPolicy) []gatewayv1.PolicyAncestorStatus {
			return p.Status.Ancestors
		},
		withAncestors: func(p *gatewayxv1a1.XBackendTrafficPolicy, a []gatewayv1.PolicyAncestorStatus) *gatewayxv1a1.XBackendTrafficPolicy {
			p = p.DeepCopy()
			p.Status.Ancestors = a
			return p
		},
		updateStatus: func(ctx context.Context, p *gatewayxv1a1.XBackendTrafficPolicy) (*gatewayxv1a1.XBackendTrafficPolicy, error) {
			return client.ExperimentalV1alpha1().XBackendTrafficPolicies(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		},
	}
	k.index(nil)
	_, _ = k.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.changed(c, nil, obj) },
		UpdateFunc: func(old, obj any) { c.writes.observed(obj); k.changed(c, old, obj) },
		DeleteFunc: func(obj any) { k.changed(c, obj, nil) },
	})
	return k
}

// writeTrafficPolicyStatuses writes the Gateway's entries of the
// XBackendTrafficPolicies' status.ancestors (policyKind.writeStatuses).
func (r *gatewayReconciler) writeTrafficPolicyStatuses(ctx context.Context, key queueKey, results []gateway.PolicyResult) error {
	g := r.gwState()
	if g == nil || g.traffic == nil {
		return nil
	}
	return g.traffic.writeStatuses(ctx, &r.writes, key, results)
}
