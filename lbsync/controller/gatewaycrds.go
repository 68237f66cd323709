package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
)

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdSettle is how long after a change of a Gateway API CRD discovery is
// asked again, every crdRecheck: the API server serves a new CRD a moment
// after it is Established. An error (of discovery, or starting the
// informers) is retried with a backoff from crdRecheck to crdMaxBackoff
// until a try succeeds, window or not.
const (
	crdSettle     = 30 * time.Second
	crdRecheck    = 2 * time.Second
	crdMaxBackoff = time.Minute
)

// WatchGatewayCRDs serves the Gateway API, or more of its kinds, when their
// CRDs are installed after the start, until ctx ends: it watches the
// CustomResourceDefinitions of gateway.networking.k8s.io (names only) and,
// after each change, asks discovery what is served and calls
// ServeGatewayAPI when that is more than the controller serves.
func (c *Controller) WatchGatewayCRDs(ctx context.Context, meta metadata.Interface, disco discovery.DiscoveryInterface, client gatewayclient.Interface) {
	logger := klog.FromContext(ctx)
	changed := make(chan struct{}, 1)
	signal := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(interface{ GetName() string }); ok && strings.HasSuffix(m.GetName(), "."+gatewayv1.GroupName) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
	factory := metadatainformer.NewSharedInformerFactory(meta, 0)
	inf := factory.ForResource(crdResource).Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: signal, UpdateFunc: func(_, obj any) { signal(obj) }, DeleteFunc: signal,
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	var settle, retry <-chan time.Time
	var failures crdRetry
	tick := time.NewTicker(crdRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			settle = time.After(crdSettle)
		case <-settle:
			settle = nil
		case <-tick.C:
		case <-retry:
			retry = nil
		}
		if retry != nil || (settle == nil && !failures.failing()) {
			continue // waiting for the backoff, or nothing changed
		}
		err := c.serveInstalledGatewayKinds(ctx, disco, client)
		if err == nil {
			failures.succeeded()
			continue
		}
		delay, log := failures.failed(err)
		if log {
			logger.Error(err, "Look for the Gateway API CRDs installed", "retryIn", delay)
		}
		retry = time.After(delay)
	}
}

// serveInstalledGatewayKinds asks discovery which Gateway API resources
// are served and calls ServeGatewayAPI when that is more than the
// controller serves.
func (c *Controller) serveInstalledGatewayKinds(ctx context.Context, disco discovery.DiscoveryInterface, client gatewayclient.Interface) error {
	served, _, err := inputs.GatewayAPIServed(disco)
	if err != nil || !served {
		return err
	}
	kinds, _, err := inputs.GatewayKindsServed(disco)
	if err != nil {
		return err
	}
	have := c.GatewayKinds()
	if len(have) > 0 && !slices.ContainsFunc(kinds, func(k string) bool { return !slices.Contains(have, k) }) {
		return nil
	}
	if err := c.ServeGatewayAPI(ctx, client, kinds...); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Gateway API CRDs installed: serving Gateways", "controllerName", gateway.ControllerName,
		"kinds", c.GatewayKinds())
	return nil
}

// crdRetry is the backoff of WatchGatewayCRDs after errors, and the error
// last logged, so that each distinct error is logged once while it lasts.
type crdRetry struct {
	delay  time.Duration
	logged string
}

// failing reports whether the last try failed.
func (r *crdRetry) failing() bool { return r.delay > 0 }

// failed records a failed try: it returns how long to wait before the
// next (doubling from crdRecheck up to crdMaxBackoff), and whether to log
// err (it differs from the error last logged).
func (r *crdRetry) failed(err error) (time.Duration, bool) {
	r.delay = min(max(2*r.delay, crdRecheck), crdMaxBackoff)
	log := err.Error() != r.logged
	r.logged = err.Error()
	return r.delay, log
}

// succeeded records a try that succeeded.
func (r *crdRetry) succeeded() { *r = crdRetry{} }
