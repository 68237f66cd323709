package controller

import (
	"context"
	"slices"

	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
)

// GatewayCRDs is the CRDWatch (WatchCRDs) that serves the Gateway API, or
// more of its kinds (of its standard group, or XBackendTrafficPolicy of
// the experimental one), when their CRDs are installed after the start: after
// each change it asks discovery what is served and calls ServeGatewayAPI
// when that is more than the controller serves.
func (c *Controller) GatewayCRDs(disco discovery.DiscoveryInterface, client gatewayclient.Interface) CRDWatch {
	return CRDWatch{Groups: []string{gatewayv1.GroupName, gatewayxv1a1.GroupName}, Sync: func(ctx context.Context) error {
		return c.serveInstalledGatewayKinds(ctx, disco, client)
	}}
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
