// Package gateway turns Gateway API objects into L7 load balancer models
// and statuses. It decides which GatewayClasses and Gateways npl-lbsync
// serves (ClassOurs, Ours), which Services a route sends requests to
// (Backends, for the NodePortLocal opt-in) and builds, per Gateway, the
// load balancer of its listeners and of the routes attached to them
// (HTTPRoute, GRPCRoute, TCPRoute, UDPRoute, TLSRoute; routes.go holds
// what the kinds share, one file each what they do not) together with
// every status the Gateway API asks for: the Gateway's and
// its listeners' conditions, and each route's parent status (Build,
// GatewayStatus, RouteParents). Pool members come from the L4 builder, so
// they are exactly what a LoadBalancer Service would get. It is pure:
// objects in, model and statuses out.
package gateway

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ControllerName is the spec.controllerName of the GatewayClasses whose
// Gateways npl-lbsync serves.
const ControllerName gatewayv1.GatewayController = "npl.io/gateway-controller"

// Group is the API group of Gateway API.
const Group = gatewayv1.GroupName

// Kinds npl-lbsync reads.
const (
	KindGateway   = "Gateway"
	KindHTTPRoute = "HTTPRoute"
	KindService   = "Service"
	KindSecret    = "Secret"
)

// CoreFeatures are the conformance features of the core GATEWAY-HTTP
// profile, which npl-lbsync supports with every provider that serves the
// model.
var CoreFeatures = []gatewayv1.FeatureName{"Gateway", "HTTPRoute", "ReferenceGrant"}

// ExtendedFeatures are the extended features that pass the official suite
// with a provider that serves the whole L7 model (haproxy, mock); sorted.
// Not BackendTLSPolicySANValidation: HAProxy verifies one name, the SNI
// (URI names, several names or one other than the hostname are refused).
// HTTPRouteRetry's test needs the experimental channel's HTTPRoute, which
// test/conformance installs; HTTPRouteRetryBackendTimeout and
// HTTPRouteRetryConnectionError have no test in the suite yet.
var ExtendedFeatures = []gatewayv1.FeatureName{
	"BackendTLSPolicy",
	"GatewayAddressEmpty",
	"GatewayHTTPListenerIsolation",
	"GatewayStaticAddresses",
	"GatewayPort8080",
	"HTTPRoute303RedirectStatusCode",
	"HTTPRoute307RedirectStatusCode",
	"HTTPRoute308RedirectStatusCode",
	"HTTPRouteBackendProtocolWebSocket",
	"HTTPRouteBackendRequestHeaderModification",
	"HTTPRouteBackendTimeout",
	"HTTPRouteDestinationPortMatching",
	"HTTPRouteHostRewrite",
	"HTTPRouteMethodMatching",
	"HTTPRouteNamedRouteRule",
	"HTTPRouteParentRefPort",
	"HTTPRoutePathRedirect",
	"HTTPRoutePathRewrite",
	"HTTPRoutePortRedirect",
	"HTTPRouteQueryParamMatching",
	"HTTPRouteRequestTimeout",
	"HTTPRouteResponseHeaderModification",
	"HTTPRouteRetry",
	"HTTPRouteSchemeRedirect",
}

// RouteFeatures are the features of the GATEWAY-TCP, GATEWAY-UDP,
// GATEWAY-TLS and GATEWAY-GRPC profiles (their core, and the extended ones
// npl-lbsync builds) and HTTPRoute's h2c backends, which a provider that
// serves the whole Gateway model (haproxy, mock) supports; sorted.
var RouteFeatures = []gatewayv1.FeatureName{
	"GRPCRoute",
	"GRPCRouteNamedRouteRule",
	"HTTPRouteBackendProtocolH2C",
	"TCPRoute",
	"TLSRoute",
	"TLSRouteModeTerminate",
	"UDPRoute",
}

// ClientCertificateFeatures are the extended features of a Gateway's
// spec.tls.frontend (client certificate validation, and its
// AllowInsecureFallback mode), which the haproxy provider alone serves:
// the mock serves no TLS, and Avi and BIG-IP refuse such listeners
// (lbmodel.ClientValidationUnsupported).
var ClientCertificateFeatures = []gatewayv1.FeatureName{
	"GatewayFrontendClientCertificateValidation",
	"GatewayFrontendClientCertificateValidationInsecureFallback",
}

// CORSFeatures are the extended features of HTTPRoute's CORS filter, which
// the haproxy provider alone serves: the mock answers no request, and Avi
// and BIG-IP refuse such rules (their ModelChecker), so the route is not
// accepted there.
var CORSFeatures = []gatewayv1.FeatureName{"HTTPRouteCORS"}

// MisdirectedRequestFeatures are the extended features of HTTPS ports of
// several listeners answering 421 to a request whose Host another listener
// takes than its TLS server name (lbmodel.Listener.Hostnames), which the
// haproxy provider alone serves: the mock answers no request, Avi and
// BIG-IP route such a request by its Host.
var MisdirectedRequestFeatures = []gatewayv1.FeatureName{"GatewayHTTPSListenerDetectMisdirectedRequests"}

// providerFeatures are the features beyond CoreFeatures each provider
// serves, as its own Gateway layout does (docs/avi.md, docs/bigip.md).
var providerFeatures = map[string][]gatewayv1.FeatureName{
	"haproxy": slices.Concat(ExtendedFeatures, RouteFeatures, ClientCertificateFeatures, CORSFeatures,
		MisdirectedRequestFeatures),
	"mock": slices.Concat(ExtendedFeatures, RouteFeatures),
	// Avi: no 500 answers, query or regular expression matches, response
	// header changes, ReplacePrefixMatch, 303/308 redirects, TLS listeners
	// or h2c pools.
	"avi": {"GatewayAddressEmpty", "GatewayHTTPListenerIsolation", "GatewayPort8080", "HTTPRoute307RedirectStatusCode",
		"HTTPRouteDestinationPortMatching", "HTTPRouteHostRewrite", "HTTPRouteMethodMatching", "HTTPRouteNamedRouteRule",
		"HTTPRouteParentRefPort", "HTTPRoutePortRedirect", "HTTPRouteSchemeRedirect", "TCPRoute", "UDPRoute"},
	// BIG-IP: redirects with status 302 only and without path modifier
	// (the scheme and port redirect tests use 301), no 404 for what no
	// rule matches (method, query and listener isolation tests expect
	// it), no regular expressions, fixed answers, ReplacePrefixMatch, TLS
	// listeners or h2c pools.
	"bigip": {"GatewayAddressEmpty", "GatewayPort8080", "HTTPRouteDestinationPortMatching", "HTTPRouteHostRewrite",
		"HTTPRouteNamedRouteRule", "HTTPRouteParentRefPort", "HTTPRouteResponseHeaderModification", "TCPRoute", "UDPRoute"},
}

// FeaturesFor returns the features npl-lbsync announces in its
// GatewayClasses' status.supportedFeatures with a provider, sorted: the
// core ones, and those the provider serves (providerFeatures).
func FeaturesFor(provider string) []gatewayv1.FeatureName {
	out := slices.Concat(CoreFeatures, providerFeatures[provider])
	slices.Sort(out)
	return slices.Compact(out)
}

// ClassOurs reports whether npl-lbsync serves the Gateways of class c.
func ClassOurs(c *gatewayv1.GatewayClass) bool {
	return c != nil && c.Spec.ControllerName == ControllerName
}

// Ours reports whether npl-lbsync serves gw: its class is one of classes and
// ours. Like claim.Ours it looks at the spec only.
func Ours(gw *gatewayv1.Gateway, classes []*gatewayv1.GatewayClass) bool {
	return gw != nil && ClassOurs(FindClass(classes, string(gw.Spec.GatewayClassName)))
}

// FindClass returns the class of that name, nil when there is none.
func FindClass(classes []*gatewayv1.GatewayClass, name string) *gatewayv1.GatewayClass {
	for _, c := range classes {
		if c != nil && c.Name == name {
			return c
		}
	}
	return nil
}

// ClassStatus is the status npl-lbsync writes into one of its
// GatewayClasses: Accepted, and the features it supports (FeaturesFor).
// Conditions have no lastTransitionTime; MergeConditions sets it.
func ClassStatus(c *gatewayv1.GatewayClass, features []gatewayv1.FeatureName) gatewayv1.GatewayClassStatus {
	st := gatewayv1.GatewayClassStatus{}
	cond := metav1.Condition{
		Type: string(gatewayv1.GatewayClassConditionStatusAccepted), Status: metav1.ConditionTrue,
		Reason:  string(gatewayv1.GatewayClassReasonAccepted),
		Message: "npl-lbsync serves the Gateways of this class", ObservedGeneration: c.Generation,
	}
	if c.Spec.ParametersRef != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, string(gatewayv1.GatewayClassReasonInvalidParameters)
		cond.Message = "npl-lbsync takes no parameters: remove spec.parametersRef"
	}
	st.Conditions = []metav1.Condition{cond}
	for _, f := range features {
		st.SupportedFeatures = append(st.SupportedFeatures, gatewayv1.SupportedFeature{Name: f})
	}
	return st
}

// MergeConditions returns existing with each of desired set: a condition
// whose status is unchanged keeps its lastTransitionTime, a new or changed
// one gets now. Conditions of other types are dropped when drop is set,
// kept otherwise.
func MergeConditions(existing, desired []metav1.Condition, now metav1.Time, drop bool) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(desired))
	for _, d := range desired {
		i := slices.IndexFunc(existing, func(e metav1.Condition) bool { return e.Type == d.Type })
		d.LastTransitionTime = now
		if i >= 0 && existing[i].Status == d.Status && !existing[i].LastTransitionTime.IsZero() {
			d.LastTransitionTime = existing[i].LastTransitionTime
		}
		out = append(out, d)
	}
	if !drop {
		for _, e := range existing {
			if !slices.ContainsFunc(desired, func(d metav1.Condition) bool { return d.Type == e.Type }) {
				out = append(out, e)
			}
		}
	}
	return out
}
