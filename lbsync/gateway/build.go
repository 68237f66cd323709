package gateway

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/providers"
)

// Input is everything Build reads. Build does not modify it.
type Input struct {
	// ClusterName prefixes the load balancer's name.
	ClusterName string
	// ServiceType and Family are as for builder.Input.
	ServiceType string
	Family      string
	// Gateway is the Gateway to build; its class is npl's.
	Gateway *gatewayv1.Gateway
	// Routes are candidate HTTPRoutes, and GRPCRoutes, TCPRoutes,
	// UDPRoutes and TLSRoutes those of the other kinds: Build keeps those
	// with a parentRef that names the Gateway.
	Routes     []*gatewayv1.HTTPRoute
	GRPCRoutes []*gatewayv1.GRPCRoute
	TCPRoutes  []*gatewayv1.TCPRoute
	UDPRoutes  []*gatewayv1.UDPRoute
	TLSRoutes  []*gatewayv1.TLSRoute
	// Namespaces are read for listeners that allow routes by namespace
	// selector.
	Namespaces []*corev1.Namespace
	// ReferenceGrants allow references across namespaces: to backend
	// Services from routes, to certificate Secrets from the Gateway.
	ReferenceGrants []*gatewayv1.ReferenceGrant
	// Services, Pods, Nodes and Secrets are candidates; Build matches
	// namespaces and names itself. Nodes are as for builder.Input.
	Services []*corev1.Service
	Pods     []*corev1.Pod
	Nodes    []*corev1.Node
	// EndpointSlices are the hand-written slices of the backend Services:
	// they choose the Pods of a Service without a selector.
	EndpointSlices []*discoveryv1.EndpointSlice
	Secrets        []*corev1.Secret
	// Checker, when set, is the provider's check of what it can express:
	// a listener it refuses is not accepted (UnsupportedProtocol, with the
	// provider's message) and a route with a rule it refuses is not
	// accepted (UnsupportedValue); either is left out of the model, and
	// the Gateway is served with the rest.
	Checker providers.ModelChecker
	// ForbiddenSecrets ("namespace/name") are Secrets npl-lbsync may not
	// read: their listeners are not programmed, but they are not missing
	// either, so MissingSecrets does not count them (the controller looks
	// for them again less often).
	ForbiddenSecrets []string
	// BackendTLSPolicies are candidates (backendtls.go): the policies of
	// the backend Services, and ConfigMaps those of the CA certificates
	// they name; ForbiddenConfigMaps ("namespace/name") are ConfigMaps
	// npl-lbsync may not read.
	BackendTLSPolicies  []*gatewayv1.BackendTLSPolicy
	ConfigMaps          []*corev1.ConfigMap
	ForbiddenConfigMaps []string
	// TrafficPolicies are candidates (trafficpolicy.go): the
	// XBackendTrafficPolicies of the backend Services.
	TrafficPolicies []*gatewayxv1a1.XBackendTrafficPolicy
	// PolicyCapabilities, when set, are what the provider expresses of a
	// pool's policy: a BackendTLSPolicy it cannot verify is not accepted,
	// and what an XBackendTrafficPolicy asks for beyond it is named in
	// the policy's status.
	PolicyCapabilities *lbmodel.PolicyCapabilities
	// AgentPorts is as for builder.Input: which annotation entries may be
	// members (Nodes are then the Pods' nodes).
	AgentPorts contract.PortRange
}

// Result is what Build returns: the model, and the statuses it decides.
type Result struct {
	// LB is nil when the Gateway has nothing to serve: it is not accepted,
	// or none of its listeners can be programmed. Its load balancer must
	// then not exist.
	LB     *lbmodel.LoadBalancer
	Report builder.Report
	// Accepted is the Gateway's Accepted condition.
	Accepted metav1.Condition
	// Listeners are the listeners' statuses in spec order, without the
	// Programmed condition, which GatewayStatus adds.
	Listeners []ListenerResult
	// Routes are the parent statuses of the routes that name the Gateway,
	// one per such parentRef, routes sorted by kind, namespace and name.
	Routes []RouteResult
	// Backends are the Services the attached routes send requests to
	// (allowed references only), sorted.
	Backends []ServiceRef
	// MissingSecrets is set when a listener names a Secret that does not
	// exist (yet): npl-lbsync watches no Secret, so it looks again later.
	MissingSecrets bool
	// BackendTLSPolicies are the statuses, for the Gateway, of the
	// BackendTLSPolicies that target Services among Backends, sorted.
	BackendTLSPolicies []PolicyResult
	// TrafficPolicies are the statuses, for the Gateway, of the
	// XBackendTrafficPolicies that target Services among Backends, sorted.
	TrafficPolicies []PolicyResult
	// RouteEvents are Warning Events for the owners of routes: a route's
	// condition says the same, in the Gateway's parent status.
	RouteEvents []RouteEvent
	// InsecureFrontend says where spec.tls.frontend lets clients in
	// without a valid certificate (AllowInsecureFallback); "" nowhere.
	InsecureFrontend string
}

// RouteEvent is a Warning Event for a route.
type RouteEvent struct {
	// Kind is the route's kind: KindHTTPRoute, KindGRPCRoute, ...
	Kind, Namespace, Name string
	Reason, Message       string
}

// ReasonHostnameInUse is the reason of a route's Accepted condition and
// Event when a host it claims on a shared listener belongs to another
// namespace (ownership.go).
const ReasonHostnameInUse = "HostnameInUse"

// ReasonTooLarge is the reason of a route's Event when it is left out for
// its size: more rules than one object may add, or more bytes than the
// model has left (lbmodel.MaxObjectRules, MaxModelBytes).
const ReasonTooLarge = "TooLarge"

// ListenerResult is one listener's status as Build decides it.
type ListenerResult struct {
	Status gatewayv1.ListenerStatus
	// Served is true when the listener's port is in the model.
	Served bool
	// Why says why it is not served.
	Why string
}

// RouteResult is the status of one route for the Gateway built.
type RouteResult struct {
	// Kind is the route's kind: KindHTTPRoute, KindGRPCRoute, ...
	Kind      string
	Namespace string
	Name      string
	// Parents are the statuses of the route's parentRefs that name the
	// Gateway, in spec order.
	Parents []gatewayv1.RouteParentStatus
}

// ServiceRef names a Service.
type ServiceRef struct {
	Namespace string
	Name      string
}

// String is "namespace/name".
func (r ServiceRef) String() string { return r.Namespace + "/" + r.Name }

type build struct {
	in       Input
	gw       *gatewayv1.Gateway
	r        *builder.Report
	lbName   string
	services map[string]*corev1.Service
	secrets  map[string]*corev1.Secret
	nsLabels map[string]labels.Set
	pools    map[string]*lbmodel.Pool
	// poolOrder are the names of the rules' pools in the order they were
	// made, so that a refused route takes away its own only.
	poolOrder []string
	// size is the bytes the model takes so far (lbmodel.Size): the
	// listeners' certificates, then the routes' rules and pools.
	size int
	// owners holds who owns each host of a shared listener (ownership.go).
	owners   map[hostKey]*routeView
	backends map[ServiceRef]bool
	// missingSecrets: see Result.MissingSecrets.
	missingSecrets bool
	// origins are the (route, rule index) of each rule of the model, in
	// the order of lb.HTTP.Rules until finish.
	origins []ruleOrigin
	// sni are the SNI routes of the TLS listeners, per port, oldest route
	// first.
	sni map[int32][]lbmodel.SNIRoute
	// tlsPolicies are the BackendTLSPolicies by precedence, tlsResolved
	// each resolved, configMaps their CA ConfigMaps by "namespace/name",
	// terminated the TLSRoutes (by id) on a Terminate listener
	// (backendtls.go).
	tlsPolicies []*gatewayv1.BackendTLSPolicy
	tlsResolved map[*gatewayv1.BackendTLSPolicy]*tlsPolicy
	configMaps  map[string]*corev1.ConfigMap
	terminated  map[string]bool
	// trafficPolicies are the XBackendTrafficPolicies by precedence,
	// trafficResolved each resolved (trafficpolicy.go).
	trafficPolicies []*gatewayxv1a1.XBackendTrafficPolicy
	trafficResolved map[*gatewayxv1a1.XBackendTrafficPolicy]*trafficPolicy
	// frontend is the client certificate validation of each HTTPS port,
	// clientCABytes the size of those accepted so far (frontendtls.go).
	frontend      map[int32]*frontendValidation
	clientCABytes int
}

// Build returns the load balancer of in.Gateway and the statuses of the
// Gateway, its listeners and its routes. The model has:
//
//   - one HTTP or HTTPS listener per port of the Gateway's listeners that
//     can be programmed (accepted, not conflicted, certificates resolved);
//   - one Rule per route rule match and effective host (the intersection
//     of the listener hostname and the route hostnames) with the Ports of
//     the listeners the route attaches to, and the Order of Gateway API's
//     tie-break (oldest route, then namespace/name, then rule index);
//   - one pool per route rule whose members are those of its backendRefs,
//     weighted by their share, and whose invalid backendRefs' share is
//     answered 500 (InvalidWeight); a rule whose backendRefs are all
//     invalid answers 500 (FixedStatus);
//   - the certificates of the HTTPS listeners, with their Ports, and the
//     client certificate validation of their ports (frontendtls.go);
//   - GRPCRoutes as HTTP rules to h2c pools (grpcroute.go), TCPRoutes and
//     UDPRoutes as TCP and UDP listeners with the pool of their oldest
//     route (tcproute.go, udproute.go), TLSRoutes as the SNI routes of TLS
//     listeners (tlsroute.go).
//
// An HTTPRoute or GRPCRoute with a rule the provider cannot express
// (Input.Rules) is not in the model: its parentRefs are not accepted, and
// its neighbours are served as if it did not exist.
func Build(in Input) Result {
	var res Result
	gw := in.Gateway
	if gw == nil {
		res.Report.Errors = append(res.Report.Errors, "no Gateway to build from")
		return res
	}
	if _, _, err := builder.Settings(in.ServiceType, in.Family); err != nil {
		res.Report.Errors = append(res.Report.Errors, err.Error())
		return res
	}
	b := &build{in: in, gw: gw, r: &res.Report, pools: map[string]*lbmodel.Pool{}, backends: map[ServiceRef]bool{},
		sni: map[int32][]lbmodel.SNIRoute{}}
	b.index()
	b.lbName = lbmodel.GatewayLoadBalancerName(in.ClusterName, gw.Namespace, gw.Name)
	lb := &lbmodel.LoadBalancer{
		Name: b.lbName, Kind: lbmodel.L7, Gateway: gw.Namespace + "/" + gw.Name,
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}},
	}
	addrErr := b.addresses(lb)

	listeners := b.listeners()
	res.Accepted = b.acceptedCondition(listeners, addrErr)
	res.InsecureFrontend = InsecureFrontend(gw)
	b.size = certBytes(listeners) + b.clientCABytes

	res.MissingSecrets = b.missingSecrets
	for _, at := range b.routes(listeners, &res) {
		switch at.route.kind {
		case KindHTTPRoute, KindGRPCRoute:
			b.addRouteRules(at, lb, listeners, &res)
		case KindTCPRoute, KindUDPRoute:
			b.addStreamRoute(at)
		case KindTLSRoute:
			b.addTLSRoute(at)
		}
	}

	for _, l := range listeners {
		lr := ListenerResult{Status: gatewayv1.ListenerStatus{
			Name: l.spec.Name, SupportedKinds: l.kinds, AttachedRoutes: int32(len(l.routes)),
			Conditions: []metav1.Condition{l.accepted, l.resolved, l.conflict},
		}, Served: l.served()}
		if !lr.Served {
			lr.Why = notServedReason(l)
		}
		res.Listeners = append(res.Listeners, lr)
	}
	if res.Accepted.Status != metav1.ConditionTrue {
		return res
	}
	b.finish(lb, listeners)
	if len(lb.Listeners) == 0 {
		return res
	}
	for r := range b.backends {
		res.Backends = append(res.Backends, r)
	}
	slices.SortFunc(res.Backends, compareRefs)
	res.BackendTLSPolicies = b.backendTLSResults(res.Backends)
	res.TrafficPolicies = b.trafficPolicyResults(res.Backends)
	res.LB = lb
	return res
}

func (b *build) index() {
	b.services = map[string]*corev1.Service{}
	for _, s := range b.in.Services {
		if s != nil {
			b.services[s.Namespace+"/"+s.Name] = s
		}
	}
	b.secrets = map[string]*corev1.Secret{}
	for _, s := range b.in.Secrets {
		if s != nil {
			b.secrets[s.Namespace+"/"+s.Name] = s
		}
	}
	b.nsLabels = map[string]labels.Set{}
	for _, n := range b.in.Namespaces {
		if n != nil {
			b.nsLabels[n.Name] = n.Labels
		}
	}
	b.indexBackendTLS()
	b.indexTrafficPolicies()
}

func (b *build) errorf(format string, args ...any) {
	b.r.Errors = append(b.r.Errors, fmt.Sprintf(format, args...))
}

func (b *build) warnf(format string, args ...any) {
	b.r.Warnings = append(b.r.Warnings, fmt.Sprintf(format, args...))
}

func (b *build) cond(typ string, ok bool, reason, msg string, gen int64) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// addresses sets the requested VIP from spec.addresses; it returns why the
// Gateway cannot be accepted, or "".
func (b *build) addresses(lb *lbmodel.LoadBalancer) string {
	for _, a := range b.gw.Spec.Addresses {
		if a.Type != nil && *a.Type != gatewayv1.IPAddressType {
			return fmt.Sprintf("address type %s is not supported: only IPAddress", *a.Type)
		}
		if a.Value == "" {
			continue // the implementation picks the address
		}
		addr, err := netip.ParseAddr(a.Value)
		if err != nil || addr.Zone() != "" {
			return fmt.Sprintf("address %q is not an IP address", a.Value)
		}
		if lb.RequestedVIP != "" {
			b.warnf("gateway %s/%s: only one address is served: %s ignored", b.gw.Namespace, b.gw.Name, a.Value)
			continue
		}
		lb.RequestedVIP = addr.Unmap().String()
	}
	return ""
}

func (b *build) acceptedCondition(ls []*listener, addrErr string) metav1.Condition {
	gen := b.gw.Generation
	typ := string(gatewayv1.GatewayConditionAccepted)
	if addrErr != "" {
		return b.cond(typ, false, string(gatewayv1.GatewayReasonUnsupportedAddress), addrErr, gen)
	}
	valid := 0
	for _, l := range ls {
		if l.ok() {
			valid++
		}
	}
	switch {
	case valid == 0:
		return b.cond(typ, false, string(gatewayv1.GatewayReasonListenersNotValid), "no listener is valid", gen)
	case valid < len(ls):
		return b.cond(typ, true, string(gatewayv1.GatewayReasonListenersNotValid),
			fmt.Sprintf("%d of %d listeners are not valid", len(ls)-valid, len(ls)), gen)
	}
	return b.cond(typ, true, string(gatewayv1.GatewayReasonAccepted), "Accepted by npl-lbsync", gen)
}

// objectRef is a reference of a route or a Gateway to an object (a
// backendRef, a certificateRef), what it leaves out defaulted.
type objectRef struct {
	group, kind, namespace, name string
}

// refOf returns the reference of these fields of a backendRef or
// certificateRef: of kind and in namespace (the referrer's) unless they
// say otherwise.
func refOf(group *gatewayv1.Group, kind *gatewayv1.Kind, namespace *gatewayv1.Namespace, name gatewayv1.ObjectName,
	defaultKind, defaultNamespace string) objectRef {
	r := objectRef{kind: defaultKind, namespace: defaultNamespace, name: string(name)}
	if group != nil {
		r.group = string(*group)
	}
	if kind != nil {
		r.kind = string(*kind)
	}
	if namespace != nil {
		r.namespace = string(*namespace)
	}
	return r
}

// String is "namespace/name".
func (r objectRef) String() string { return r.namespace + "/" + r.name }

// is reports whether r names an object of kind of the core group.
func (r objectRef) is(kind string) bool {
	return (r.group == "" || r.group == "core") && r.kind == kind
}

// allowed reports whether an object of fromKind (of the Gateway API group)
// in fromNS may refer to r: r is in fromNS, or a ReferenceGrant in r's
// namespace allows it.
func (b *build) allowed(fromKind, fromNS string, r objectRef) bool {
	if r.namespace == fromNS {
		return true
	}
	for _, g := range b.in.ReferenceGrants {
		if g == nil || g.Namespace != r.namespace {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gatewayv1.ReferenceGrantFrom) bool {
			return string(f.Group) == Group && string(f.Kind) == fromKind && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(g.Spec.To, func(t gatewayv1.ReferenceGrantTo) bool {
			return string(t.Group) == "" && string(t.Kind) == r.kind && (t.Name == nil || string(*t.Name) == r.name)
		})
		if from && to {
			return true
		}
	}
	return false
}
