package inputs

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayv1client "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/typed/apis/v1"

	"github.com/nodeportlocal/npl/lbsync/gateway"
)

// gatewayResources are the resources of gateway.networking.k8s.io/v1 that
// npl-lbsync needs; it reads those of optionalRouteResources too when
// they are served.
var gatewayResources = []string{"gatewayclasses", "gateways", "httproutes", "referencegrants"}

// optionalResources are the resources beyond gatewayResources, by kind:
// the other route kinds and BackendTLSPolicy, which npl-lbsync serves
// when their CRDs are installed.
var optionalResources = map[string]string{
	gateway.KindGRPCRoute:        "grpcroutes",
	gateway.KindTCPRoute:         "tcproutes",
	gateway.KindUDPRoute:         "udproutes",
	gateway.KindTLSRoute:         "tlsroutes",
	gateway.KindBackendTLSPolicy: "backendtlspolicies",
}

// optionalKinds are the kinds of optionalResources in the order they are
// served: the route kinds of gateway.RouteKinds, then BackendTLSPolicy.
var optionalKinds = append(slices.Clone(gateway.RouteKinds), gateway.KindBackendTLSPolicy)

// trafficPolicyResource is the resource of XBackendTrafficPolicy, of the
// experimental group gatewayxv1a1.GroupVersion, which npl-lbsync serves
// when its CRD is installed.
const trafficPolicyResource = "xbackendtrafficpolicies"

// GatewayAPIServed reports whether the API server serves the Gateway API
// resources npl-lbsync reads (their CRDs are installed), and which are
// missing when not.
func GatewayAPIServed(d discovery.DiscoveryInterface) (bool, []string, error) {
	list, err := d.ServerResourcesForGroupVersion(gatewayv1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, gatewayResources, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("discover %s: %w", gatewayv1.GroupVersion, err)
	}
	var missing []string
	for _, r := range gatewayResources {
		if !slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == r }) {
			missing = append(missing, r)
		}
	}
	return len(missing) == 0, missing, nil
}

// GatewayKindsServed returns the kinds beyond those npl-lbsync needs (the
// route kinds beyond HTTPRoute, BackendTLSPolicy, and the experimental
// XBackendTrafficPolicy) whose resources the API server serves, and those
// it does not, in the order of gateway.RouteKinds, then BackendTLSPolicy,
// XBackendTrafficPolicy last.
func GatewayKindsServed(d discovery.DiscoveryInterface) (served, missing []string, err error) {
	list, err := d.ServerResourcesForGroupVersion(gatewayv1.GroupVersion.String())
	if err != nil {
		return nil, nil, fmt.Errorf("discover %s: %w", gatewayv1.GroupVersion, err)
	}
	for _, kind := range optionalKinds {
		res, ok := optionalResources[kind]
		if !ok {
			continue
		}
		if slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == res }) {
			served = append(served, kind)
		} else {
			missing = append(missing, kind)
		}
	}
	xlist, err := d.ServerResourcesForGroupVersion(gatewayxv1a1.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		missing = append(missing, gateway.KindXBackendTrafficPolicy)
	case err != nil:
		return nil, nil, fmt.Errorf("discover %s: %w", gatewayxv1a1.GroupVersion, err)
	case slices.ContainsFunc(xlist.APIResources, func(a metav1.APIResource) bool { return a.Name == trafficPolicyResource }):
		served = append(served, gateway.KindXBackendTrafficPolicy)
	default:
		missing = append(missing, gateway.KindXBackendTrafficPolicy)
	}
	return served, missing, nil
}

// GatewaySources are the Gateway API objects a Gateway's build reads
// beside the Store's: the routes (of any kind) that name the Gateway, the
// Namespaces, the ReferenceGrants, and the BackendTLSPolicies (GatewayInput
// keeps those of the routes' backends) with the reader of the ConfigMaps
// of their CA certificates (nil: none is read).
type GatewaySources struct {
	Routes             []any
	Namespaces         []*corev1.Namespace
	ReferenceGrants    []*gatewayv1.ReferenceGrant
	BackendTLSPolicies []*gatewayv1.BackendTLSPolicy
	ConfigMaps         ConfigMapGetter
	// TrafficPolicies are XBackendTrafficPolicies; GatewayInput keeps
	// those of the routes' backends.
	TrafficPolicies []*gatewayxv1a1.XBackendTrafficPolicy
	// FrontendConfigMaps reads the ConfigMaps of the Gateway's client CA
	// certificates (spec.tls.frontend); nil: none is read.
	FrontendConfigMaps ConfigMapGetter
}

// ConfigMapGetter reads one ConfigMap.
type ConfigMapGetter func(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)

// APIConfigMaps reads ConfigMaps from the API, on demand.
func APIConfigMaps(client kubernetes.Interface) ConfigMapGetter {
	return func(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
		return client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	}
}

// GatewayInput is the Gateway builder's input for gw: the routes of src,
// their backend Services with those Services' Pods, the BackendTLSPolicies
// of those Services with the ConfigMaps they name, and the certificate
// Secrets of its listeners, read with secrets (nil: none). A missing
// backend, ConfigMap or Secret is left for the builder to report; a Secret
// or ConfigMap that may not be read is left out and named
// ("namespace/name") in the input's ForbiddenSecrets or
// ForbiddenConfigMaps.
func (s Store) GatewayInput(ctx context.Context, set Settings, gw *gatewayv1.Gateway, src GatewaySources, secrets SecretGetter) (gateway.Input, error) {
	in := gateway.Input{
		ClusterName: set.ClusterName, ServiceType: set.ServiceType, Family: set.Family, Gateway: gw,
		Namespaces: src.Namespaces, ReferenceGrants: src.ReferenceGrants, AgentPorts: set.AgentPorts,
	}
	var b backends
	for _, o := range src.Routes {
		in.AddRoute(o)
		for _, ref := range gateway.Backends(o) {
			b.add(s, ref.Namespace, ref.Name)
		}
	}
	in.Services, in.Pods, in.EndpointSlices, in.Nodes = b.services, b.pods, b.slices, s.nodes(set, b.pods)
	if err := s.backendTLS(ctx, &in, src); err != nil {
		return in, err
	}
	if err := readConfigMaps(ctx, &in, src.FrontendConfigMaps, gateway.FrontendCAConfigMaps(gw)); err != nil {
		return in, fmt.Errorf("client CA certificates of gateway %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	for _, p := range src.TrafficPolicies {
		if slices.ContainsFunc(gateway.TrafficPolicyTargets(p), func(r gateway.ServiceRef) bool { return b.seen[r.String()] }) {
			in.TrafficPolicies = append(in.TrafficPolicies, p)
		}
	}
	seen := map[string]bool{}
	for _, l := range gw.Spec.Listeners {
		if l.TLS == nil || secrets == nil {
			continue
		}
		for _, ref := range l.TLS.CertificateRefs {
			if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != gateway.KindSecret) {
				continue
			}
			ns := gw.Namespace
			if ref.Namespace != nil {
				ns = string(*ref.Namespace)
			}
			key := ns + "/" + string(ref.Name)
			if seen[key] {
				continue
			}
			seen[key] = true
			secret, err := secrets(ctx, ns, string(ref.Name))
			switch {
			case apierrors.IsNotFound(err):
			case apierrors.IsForbidden(err):
				in.ForbiddenSecrets = append(in.ForbiddenSecrets, key)
			case err != nil:
				return in, fmt.Errorf("get TLS secret %s of gateway %s/%s: %w", key, gw.Namespace, gw.Name, err)
			default:
				in.Secrets = append(in.Secrets, secret)
			}
		}
	}
	return in, nil
}

// backendTLS adds to in the BackendTLSPolicies of src that target its
// backend Services, and the ConfigMaps they name, read with
// src.ConfigMaps.
func (s Store) backendTLS(ctx context.Context, in *gateway.Input, src GatewaySources) error {
	backends := map[gateway.ServiceRef]bool{}
	for _, svc := range in.Services {
		backends[gateway.ServiceRef{Namespace: svc.Namespace, Name: svc.Name}] = true
	}
	seen := map[string]bool{}
	for _, p := range src.BackendTLSPolicies {
		if !slices.ContainsFunc(gateway.BackendTLSTargets(p), func(r gateway.ServiceRef) bool { return backends[r] }) {
			continue
		}
		in.BackendTLSPolicies = append(in.BackendTLSPolicies, p)
		var keys []string
		for _, key := range gateway.BackendTLSConfigMaps(p) {
			if !seen[key] {
				seen[key] = true
				keys = append(keys, key)
			}
		}
		if err := readConfigMaps(ctx, in, src.ConfigMaps, keys); err != nil {
			return fmt.Errorf("BackendTLSPolicy %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// readConfigMaps adds to in the ConfigMaps of keys ("namespace/name") that
// get reads (nil: none) and in is without: a missing one is left for the
// builder to report, one npl-lbsync may not read is named in
// ForbiddenConfigMaps.
func readConfigMaps(ctx context.Context, in *gateway.Input, get ConfigMapGetter, keys []string) error {
	for _, key := range keys {
		if get == nil || slices.ContainsFunc(in.ConfigMaps, func(c *corev1.ConfigMap) bool { return c.Namespace+"/"+c.Name == key }) ||
			slices.Contains(in.ForbiddenConfigMaps, key) {
			continue
		}
		ns, name, _ := strings.Cut(key, "/")
		c, err := get(ctx, ns, name)
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			in.ForbiddenConfigMaps = append(in.ForbiddenConfigMaps, key)
		case err != nil:
			return fmt.Errorf("get CA ConfigMap %s: %w", key, err)
		default:
			in.ConfigMaps = append(in.ConfigMaps, c)
		}
	}
	return nil
}

// GatewayObjects are the Gateway API objects listed once, for a command
// that builds Gateways without informers (GatewaysFromAPI).
type GatewayObjects struct {
	Gateways []*gatewayv1.Gateway
	Classes  []*gatewayv1.GatewayClass
	// Routes are the routes of every kind the API server serves.
	Routes             []any
	Namespaces         []*corev1.Namespace
	ReferenceGrants    []*gatewayv1.ReferenceGrant
	BackendTLSPolicies []*gatewayv1.BackendTLSPolicy
	// ConfigMaps reads the CA ConfigMaps of the policies and of the
	// Gateways' client validation.
	ConfigMaps      ConfigMapGetter
	TrafficPolicies []*gatewayxv1a1.XBackendTrafficPolicy
}

// Sources returns what gw's build reads of o: the routes whose parentRefs
// name it, the Namespaces, the ReferenceGrants and the BackendTLSPolicies.
func (o GatewayObjects) Sources(gw *gatewayv1.Gateway) GatewaySources {
	src := GatewaySources{Namespaces: o.Namespaces, ReferenceGrants: o.ReferenceGrants,
		BackendTLSPolicies: o.BackendTLSPolicies, ConfigMaps: o.ConfigMaps, TrafficPolicies: o.TrafficPolicies,
		FrontendConfigMaps: o.ConfigMaps}
	for _, rt := range o.Routes {
		if slices.Contains(gateway.Gateways(rt), gw.Namespace+"/"+gw.Name) {
			src.Routes = append(src.Routes, rt)
		}
	}
	return src
}

// GatewaysFromAPI lists the Gateways, routes, ReferenceGrants and
// BackendTLSPolicies of namespace (all when empty), the GatewayClasses and
// the Namespaces, once; the policies' ConfigMaps are read on demand.
// served is false, with nothing listed, when the API server does not serve
// the Gateway API resources npl-lbsync reads; a kind whose CRD is not
// installed is not listed, as npl-lbsync does not read it.
func GatewaysFromAPI(ctx context.Context, client kubernetes.Interface, gc gatewayclient.Interface, namespace string) (o GatewayObjects, served bool, err error) {
	served, _, err = GatewayAPIServed(client.Discovery())
	if err != nil || !served {
		return o, false, err
	}
	kinds, _, err := GatewayKindsServed(client.Discovery())
	if err != nil {
		return o, false, err
	}
	o.ConfigMaps = APIConfigMaps(client)
	api := gc.GatewayV1()
	gws, err := api.Gateways(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, true, fmt.Errorf("list gateways: %w", err)
	}
	o.Gateways = pointers(gws.Items)
	classes, err := api.GatewayClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, true, fmt.Errorf("list gatewayclasses: %w", err)
	}
	o.Classes = pointers(classes.Items)
	grants, err := api.ReferenceGrants(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, true, fmt.Errorf("list referencegrants: %w", err)
	}
	o.ReferenceGrants = pointers(grants.Items)
	nss, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, true, fmt.Errorf("list namespaces: %w", err)
	}
	o.Namespaces = pointers(nss.Items)
	for _, kind := range append([]string{gateway.KindHTTPRoute}, kinds...) {
		if kind == gateway.KindBackendTLSPolicy {
			l, err := api.BackendTLSPolicies(namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return o, true, fmt.Errorf("list backendtlspolicies: %w", err)
			}
			o.BackendTLSPolicies = pointers(l.Items)
			continue
		}
		if kind == gateway.KindXBackendTrafficPolicy {
			l, err := gc.ExperimentalV1alpha1().XBackendTrafficPolicies(namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return o, true, fmt.Errorf("list xbackendtrafficpolicies: %w", err)
			}
			o.TrafficPolicies = pointers(l.Items)
			continue
		}
		routes, err := listRoutes(ctx, api, kind, namespace)
		if err != nil {
			return o, true, fmt.Errorf("list %ss: %w", kind, err)
		}
		o.Routes = append(o.Routes, routes...)
	}
	return o, true, nil
}

// listRoutes lists the routes of one kind.
func listRoutes(ctx context.Context, api gatewayv1client.GatewayV1Interface, kind, namespace string) ([]any, error) {
	opts := metav1.ListOptions{}
	switch kind {
	case gateway.KindHTTPRoute:
		l, err := api.HTTPRoutes(namespace).List(ctx, opts)
		return anys(l, err, func(l *gatewayv1.HTTPRouteList) []gatewayv1.HTTPRoute { return l.Items })
	case gateway.KindGRPCRoute:
		l, err := api.GRPCRoutes(namespace).List(ctx, opts)
		return anys(l, err, func(l *gatewayv1.GRPCRouteList) []gatewayv1.GRPCRoute { return l.Items })
	case gateway.KindTCPRoute:
		l, err := api.TCPRoutes(namespace).List(ctx, opts)
		return anys(l, err, func(l *gatewayv1.TCPRouteList) []gatewayv1.TCPRoute { return l.Items })
	case gateway.KindUDPRoute:
		l, err := api.UDPRoutes(namespace).List(ctx, opts)
		return anys(l, err, func(l *gatewayv1.UDPRouteList) []gatewayv1.UDPRoute { return l.Items })
	case gateway.KindTLSRoute:
		l, err := api.TLSRoutes(namespace).List(ctx, opts)
		return anys(l, err, func(l *gatewayv1.TLSRouteList) []gatewayv1.TLSRoute { return l.Items })
	}
	return nil, fmt.Errorf("unknown route kind %s", kind)
}

// anys returns pointers to the items of a List's result, as any.
func anys[L any, T any](l L, err error, items func(L) []T) ([]any, error) {
	if err != nil {
		return nil, err
	}
	its := items(l)
	out := make([]any, 0, len(its))
	for i := range its {
		out = append(out, &its[i])
	}
	return out, nil
}

// pointers returns pointers to the items.
func pointers[T any](items []T) []*T {
	out := make([]*T, 0, len(items))
	for i := range items {
		out = append(out, &items[i])
	}
	return out
}
