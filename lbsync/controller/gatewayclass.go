package controller

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbsync/gateway"
)

// gatewayClassReconciler writes the status of npl's GatewayClasses: they
// own no load balancer.
type gatewayClassReconciler struct {
	*cluster
}

func (r *gatewayClassReconciler) kinds() []kind { return []kind{kindGatewayClass} }

// classChanged queues a GatewayClass.
func (r *gatewayClassReconciler) classChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if gc, ok := obj.(*gatewayv1.GatewayClass); ok {
		r.queue.Add(gatewayClassKey(gc.Name))
	}
}

// keys returns the key of every GatewayClass.
func (r *gatewayClassReconciler) keys() []queueKey {
	if r.gwState() == nil {
		return nil
	}
	return keysOf(r.gatewayClasses(), func(_, name string) queueKey { return gatewayClassKey(name) })
}

func (r *gatewayClassReconciler) claimed(map[string]bool) {}

// sync writes the status of the GatewayClass of key when it is npl's and
// its status changes.
func (r *gatewayClassReconciler) sync(ctx context.Context, key queueKey) syncResult {
	if r.gwState() == nil {
		return synced() // ServeGatewayAPI's informers sync; it queues every class once they have
	}
	gc, err := r.gwState().classes.Get(key.name)
	if err != nil || !gateway.ClassOurs(gc) {
		return synced()
	}
	want := gateway.ClassStatus(gc, r.settings.GatewayFeatures)
	want.Conditions = gateway.MergeConditions(gc.Status.Conditions, want.Conditions, metav1.Now(), false)
	if apiequality.Semantic.DeepEqual(gc.Status, want) {
		return synced()
	}
	patch, err := statusPatch(want, "supportedFeatures")
	if err != nil {
		return retryOn(err)
	}
	_, err = r.gwState().client.GatewayV1().GatewayClasses().Patch(ctx, gc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return retryOn(fmt.Errorf("patch gatewayclass %s status: %w", gc.Name, err))
	}
	return synced()
}
