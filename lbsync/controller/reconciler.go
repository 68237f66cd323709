package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reconciler syncs the keys of some kinds: each owns the state it keeps
// of its objects, and reaches the provider through the applier.
type reconciler interface {
	// kinds are the kinds of key it syncs.
	kinds() []kind
	// sync makes the load balancer (or status) of key match its objects.
	sync(ctx context.Context, key queueKey) syncResult
	// keys returns the key of every object of its kinds in the caches,
	// for the full passes.
	keys() []queueKey
	// claimed adds to names the load balancers that its objects own, or
	// that it still has to clean up, for the garbage collection.
	claimed(names map[string]bool)
}

// kind says what a queue key names; it selects the reconciler of the key.
type kind uint8

const (
	kindService kind = iota
	// kindIngress is an Ingress with a load balancer of its own.
	kindIngress
	// kindSharedIngress is the load balancer that all our Ingresses share
	// (ingressSharedVIP); it has no namespace or name.
	kindSharedIngress
	// kindGateway is a Gateway API Gateway and its load balancer.
	kindGateway
	// kindGatewayClass is a GatewayClass, whose status npl-lbsync writes
	// when it is npl's.
	kindGatewayClass
	// kindPolicy is a LoadBalancerPolicy, whose status npl-lbsync writes.
	kindPolicy
)

// kindNames name the kinds in keys and logs.
var kindNames = [...]string{
	kindService:       "service",
	kindIngress:       "ingress",
	kindSharedIngress: "shared ingress load balancer",
	kindGateway:       "gateway",
	kindGatewayClass:  "gatewayclass",
	kindPolicy:        "loadbalancerpolicy",
}

// queueKey is an item of the work queue, and the key of what the
// reconcilers and the applier remember per object (applied models,
// drains, Gateway VIPs).
type queueKey struct {
	kind      kind
	namespace string
	name      string
}

func serviceKey(namespace, name string) queueKey { return queueKey{kindService, namespace, name} }
func ingressKey(namespace, name string) queueKey { return queueKey{kindIngress, namespace, name} }
func gatewayKey(namespace, name string) queueKey { return queueKey{kindGateway, namespace, name} }
func gatewayClassKey(name string) queueKey       { return queueKey{kind: kindGatewayClass, name: name} }
func policyKey(namespace, name string) queueKey  { return queueKey{kindPolicy, namespace, name} }

// keysOf returns the keys that key makes of objs.
func keysOf[T metav1.Object](objs []T, key func(namespace, name string) queueKey) []queueKey {
	keys := make([]queueKey, 0, len(objs))
	for _, o := range objs {
		keys = append(keys, key(o.GetNamespace(), o.GetName()))
	}
	return keys
}

// sharedIngressKey is the key of the shared Ingress load balancer.
var sharedIngressKey = queueKey{kind: kindSharedIngress}

func (k queueKey) String() string {
	switch {
	case k.namespace != "":
		return kindNames[k.kind] + " " + k.namespace + "/" + k.name
	case k.name != "":
		return kindNames[k.kind] + " " + k.name
	}
	return kindNames[k.kind]
}

// syncState is how a sync ended: it tells the work queue what to do with
// the key.
type syncState uint8

const (
	// syncDone: the objects are in sync; the key's backoff is reset.
	syncDone syncState = iota
	// syncNoRetry: the objects are at fault (an invalid Service, a model
	// that breaks the rules), and their condition or Events say why.
	// Retrying cannot help until they change, which queues them again: the
	// key's backoff is reset as after syncDone.
	syncNoRetry
	// syncRetry: the sync failed (the provider, an API write); the key is
	// queued again with backoff.
	syncRetry
)

// syncResult is the end of one sync: its state and, for syncRetry, why.
type syncResult struct {
	state syncState
	err   error
}

// synced is the result of a sync that brought its objects in line.
func synced() syncResult { return syncResult{state: syncDone} }

// retryOn retries the key when err is set, and is synced otherwise: a
// sync ends with retryOn(its last step).
func retryOn(err error) syncResult {
	if err == nil {
		return synced()
	}
	return syncResult{state: syncRetry, err: err}
}

// refused leaves a key whose objects are at fault until they change; err
// is the failure to record why (a condition write), which is retried.
func refused(err error) syncResult {
	if err != nil {
		return retryOn(err)
	}
	return syncResult{state: syncNoRetry}
}
