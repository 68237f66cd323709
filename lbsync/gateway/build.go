package gateway

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

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
	// namespaces and names itself. Nodes are used in NodePort mode only.
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
}

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

// listener is the state of one Gateway listener during a build.
type listener struct {
	spec     *gatewayv1.Listener
	hostname string
	accepted metav1.Condition
	resolved metav1.Condition
	conflict metav1.Condition
	kinds    []gatewayv1.RouteGroupKind
	certs    []lbmodel.TLSCert
	// terminate is set on a TLS listener that terminates TLS.
	terminate bool
	// routes are the routes attached, by route.id.
	routes map[string]bool
	// pool is the pool of a served TCP or UDP listener: that of its
	// oldest attached route.
	pool *lbmodel.Pool
}

// needsCerts reports whether the listener terminates TLS.
func (l *listener) needsCerts() bool {
	return l.spec.Protocol == gatewayv1.HTTPSProtocolType || (l.spec.Protocol == gatewayv1.TLSProtocolType && l.terminate)
}

// serves reports whether the listener takes routes of kind.
func (l *listener) serves(kind string) bool {
	return slices.ContainsFunc(l.kinds, func(k gatewayv1.RouteGroupKind) bool { return string(k.Kind) == kind })
}

// ok reports whether the listener is accepted (routes may attach).
func (l *listener) ok() bool { return l.accepted.Status == metav1.ConditionTrue }

// served reports whether the listener's port is programmed.
func (l *listener) served() bool {
	return l.ok() && l.conflict.Status != metav1.ConditionTrue && len(l.kinds) > 0 &&
		(!l.needsCerts() || (len(l.certs) > 0 && l.resolved.Reason != string(gatewayv1.ListenerReasonInvalidCertificateRef) &&
			l.resolved.Reason != string(gatewayv1.ListenerReasonRefNotPermitted)))
}

type build struct {
	in       Input
	gw       *gatewayv1.Gateway
	r        *builder.Report
	lbName   string
	services map[string]*corev1.Service
	secrets  map[string]*corev1.Secret
	nsLabels map[string]labels.Set
	pools    map[string]*lbmodel.Pool
	backends map[ServiceRef]bool
	// missingSecrets: see Result.MissingSecrets.
	missingSecrets bool
	// origins are the (route, rule index) of each rule of the model, in
	// the order of lb.HTTP.Rules until finish.
	origins []ruleOrigin
	// sni are the SNI routes of the TLS listeners, per port, oldest route
	// first.
	sni map[int32][]lbmodel.SNIRoute
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
//   - the certificates of the HTTPS listeners, with their Ports;
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
	res.LB = lb
	return res
}

func notServedReason(l *listener) string {
	switch {
	case !l.ok():
		return l.accepted.Message
	case l.conflict.Status == metav1.ConditionTrue:
		return l.conflict.Message
	case len(l.kinds) == 0:
		return "no supported route kind"
	}
	return l.resolved.Message
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

// listeners validates the Gateway's listeners.
func (b *build) listeners() []*listener {
	gen := b.gw.Generation
	out := make([]*listener, 0, len(b.gw.Spec.Listeners))
	for i := range b.gw.Spec.Listeners {
		spec := &b.gw.Spec.Listeners[i]
		l := &listener{spec: spec, routes: map[string]bool{}, kinds: []gatewayv1.RouteGroupKind{}}
		if spec.Hostname != nil {
			l.hostname = strings.ToLower(string(*spec.Hostname))
		}
		l.accepted = b.cond(string(gatewayv1.ListenerConditionAccepted), true, string(gatewayv1.ListenerReasonAccepted), "Accepted", gen)
		l.resolved = b.cond(string(gatewayv1.ListenerConditionResolvedRefs), true, string(gatewayv1.ListenerReasonResolvedRefs), "References resolved", gen)
		l.conflict = b.cond(string(gatewayv1.ListenerConditionConflicted), false, string(gatewayv1.ListenerReasonNoConflicts), "No conflicts", gen)
		switch spec.Protocol {
		case gatewayv1.HTTPProtocolType, gatewayv1.HTTPSProtocolType, gatewayv1.TCPProtocolType, gatewayv1.UDPProtocolType:
		case gatewayv1.TLSProtocolType:
			// The API requires tls.mode on a TLS listener.
			l.terminate = spec.TLS == nil || spec.TLS.Mode == nil || *spec.TLS.Mode == gatewayv1.TLSModeTerminate
		default:
			l.accepted = b.cond(string(gatewayv1.ListenerConditionAccepted), false, string(gatewayv1.ListenerReasonUnsupportedProtocol),
				fmt.Sprintf("protocol %s is not supported: only HTTP, HTTPS, TLS, TCP and UDP", spec.Protocol), gen)
			out = append(out, l)
			continue
		}
		if spec.Port < 1 || spec.Port > 65535 {
			// The CRD's validation refuses such a port; a Gateway written
			// past it must not make the whole model invalid.
			l.accepted = b.cond(string(gatewayv1.ListenerConditionAccepted), false, string(gatewayv1.ListenerReasonPortUnavailable),
				fmt.Sprintf("port %d is out of 1-65535", spec.Port), gen)
			out = append(out, l)
			continue
		}
		if spec.Protocol == gatewayv1.HTTPSProtocolType && spec.TLS != nil && spec.TLS.Mode != nil && *spec.TLS.Mode != gatewayv1.TLSModeTerminate {
			l.accepted = b.cond(string(gatewayv1.ListenerConditionAccepted), false, string(gatewayv1.ListenerReasonUnsupportedValue),
				fmt.Sprintf("TLS mode %s is not supported on HTTPS: only Terminate", *spec.TLS.Mode), gen)
			out = append(out, l)
			continue
		}
		if b.in.Checker != nil {
			// A protocol the provider cannot serve on this listener alone
			// refuses the listener, not the Gateway.
			err := b.in.Checker.CheckModel(lbmodel.ListenerModel(lbmodel.Listener{Port: spec.Port, Protocol: lbmodel.Protocol(spec.Protocol)}))
			if err != nil {
				l.accepted = b.cond(string(gatewayv1.ListenerConditionAccepted), false, string(gatewayv1.ListenerReasonUnsupportedProtocol),
					err.Error(), gen)
				out = append(out, l)
				continue
			}
		}
		b.routeKinds(l)
		if l.needsCerts() {
			b.listenerCerts(l)
		}
		out = append(out, l)
	}
	mixedTermination(out, gen)
	conflicts(out, gen)
	return out
}

// listenerKinds are the route kinds a listener of each protocol takes.
var listenerKinds = map[gatewayv1.ProtocolType][]string{
	gatewayv1.HTTPProtocolType:  {KindHTTPRoute, KindGRPCRoute},
	gatewayv1.HTTPSProtocolType: {KindHTTPRoute, KindGRPCRoute},
	gatewayv1.TCPProtocolType:   {KindTCPRoute},
	gatewayv1.UDPProtocolType:   {KindUDPRoute},
	gatewayv1.TLSProtocolType:   {KindTLSRoute},
}

// mixedTermination refuses the TLS listeners of a port when some
// terminate TLS and others pass it through: one port does one or the
// other (npl-lbsync does not claim TLSRouteModeMixed).
func mixedTermination(ls []*listener, gen int64) {
	modes := map[gatewayv1.PortNumber]map[bool]bool{}
	for _, l := range ls {
		if l.ok() && l.spec.Protocol == gatewayv1.TLSProtocolType {
			if modes[l.spec.Port] == nil {
				modes[l.spec.Port] = map[bool]bool{}
			}
			modes[l.spec.Port][l.terminate] = true
		}
	}
	for _, l := range ls {
		if l.ok() && l.spec.Protocol == gatewayv1.TLSProtocolType && len(modes[l.spec.Port]) > 1 {
			l.accepted = metav1.Condition{Type: string(gatewayv1.ListenerConditionAccepted), Status: metav1.ConditionFalse,
				Reason:             string(gatewayv1.ListenerReasonProtocolConflict),
				Message:            fmt.Sprintf("TLS listeners on port %d both terminate TLS and pass it through: one port does one or the other", l.spec.Port),
				ObservedGeneration: gen}
			// A listener that is not accepted takes no route kind.
			l.kinds = []gatewayv1.RouteGroupKind{}
		}
	}
}

// routeKinds sets the listener's supported kinds: those of its protocol
// (listenerKinds), of them only those allowedRoutes.kinds names if it
// names any.
func (b *build) routeKinds(l *listener) {
	group := gatewayv1.Group(Group)
	supported := listenerKinds[l.spec.Protocol]
	if l.spec.AllowedRoutes == nil || len(l.spec.AllowedRoutes.Kinds) == 0 {
		for _, k := range supported {
			l.kinds = append(l.kinds, gatewayv1.RouteGroupKind{Group: &group, Kind: gatewayv1.Kind(k)})
		}
		return
	}
	var invalid []string
	for _, k := range l.spec.AllowedRoutes.Kinds {
		g := Group
		if k.Group != nil {
			g = string(*k.Group)
		}
		if g == Group && slices.Contains(supported, string(k.Kind)) {
			if !l.serves(string(k.Kind)) {
				l.kinds = append(l.kinds, gatewayv1.RouteGroupKind{Group: &group, Kind: k.Kind})
			}
			continue
		}
		invalid = append(invalid, g+"/"+string(k.Kind))
	}
	if len(invalid) > 0 {
		l.resolved = b.cond(string(gatewayv1.ListenerConditionResolvedRefs), false, string(gatewayv1.ListenerReasonInvalidRouteKinds),
			fmt.Sprintf("route kinds %s are not supported on a %s listener: only %s", strings.Join(invalid, ", "), l.spec.Protocol,
				strings.Join(supported, ", ")), b.gw.Generation)
	}
}

// listenerCerts resolves the certificates of an HTTPS listener.
func (b *build) listenerCerts(l *listener) {
	gen := b.gw.Generation
	fail := func(reason gatewayv1.ListenerConditionReason, msg string) {
		if l.resolved.Status == metav1.ConditionTrue || l.resolved.Reason == string(gatewayv1.ListenerReasonInvalidRouteKinds) {
			l.resolved = b.cond(string(gatewayv1.ListenerConditionResolvedRefs), false, string(reason), msg, gen)
		}
		b.errorf("gateway %s/%s: listener %s: %s", b.gw.Namespace, b.gw.Name, l.spec.Name, msg)
	}
	if l.spec.TLS == nil || len(l.spec.TLS.CertificateRefs) == 0 {
		fail(gatewayv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("a %s listener that terminates TLS needs a certificateRef", l.spec.Protocol))
		return
	}
	for _, ref := range l.spec.TLS.CertificateRefs {
		group, kind := "", KindSecret
		if ref.Group != nil {
			group = string(*ref.Group)
		}
		if ref.Kind != nil {
			kind = string(*ref.Kind)
		}
		ns := b.gw.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		id := ns + "/" + string(ref.Name)
		if (group != "" && group != "core") || kind != KindSecret {
			fail(gatewayv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("certificateRef %s %s/%s is not a Secret", id, group, kind))
			continue
		}
		if ns != b.gw.Namespace && !b.granted(Group, KindGateway, b.gw.Namespace, "", KindSecret, ns, string(ref.Name)) {
			fail(gatewayv1.ListenerReasonRefNotPermitted, fmt.Sprintf("Secret %s: no ReferenceGrant allows it", id))
			continue
		}
		secret := b.secrets[id]
		if secret == nil && slices.Contains(b.in.ForbiddenSecrets, id) {
			fail(gatewayv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("Secret %s: npl-lbsync may not read Secrets (chart value gatewayAPI.readTLSSecrets)", id))
			continue
		}
		if secret == nil {
			b.missingSecrets = true
			fail(gatewayv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("Secret %s not found", id))
			continue
		}
		cert, key := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			fail(gatewayv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("Secret %s: not a TLS certificate and key: %v", id, err))
			continue
		}
		c := lbmodel.TLSCert{Secret: id, Fingerprint: lbmodel.CertFingerprint(cert), Ports: []int32{l.spec.Port},
			CertPEM: slices.Clone(cert), KeyPEM: slices.Clone(key)}
		if l.hostname != "" {
			c.Hosts = []string{l.hostname}
		}
		l.certs = append(l.certs, c)
	}
}

// portKey is a port of the load balancer: UDP ports are apart from the
// TCP ports of every other protocol.
type portKey struct {
	port gatewayv1.PortNumber
	udp  bool
}

// conflicts marks listeners that share a port with another protocol, or a
// port, protocol and hostname.
func conflicts(ls []*listener, gen int64) {
	byPort := map[portKey][]*listener{}
	for _, l := range ls {
		if l.ok() {
			k := portKey{l.spec.Port, l.spec.Protocol == gatewayv1.UDPProtocolType}
			byPort[k] = append(byPort[k], l)
		}
	}
	set := func(l *listener, reason gatewayv1.ListenerConditionReason, msg string) {
		l.conflict = metav1.Condition{Type: string(gatewayv1.ListenerConditionConflicted), Status: metav1.ConditionTrue,
			Reason: string(reason), Message: msg, ObservedGeneration: gen}
	}
	for k, group := range byPort {
		port := k.port
		protos := map[gatewayv1.ProtocolType]bool{}
		for _, l := range group {
			protos[l.spec.Protocol] = true
		}
		if len(protos) > 1 {
			for _, l := range group {
				set(l, gatewayv1.ListenerReasonProtocolConflict, fmt.Sprintf("port %d is used with another protocol", port))
			}
			continue
		}
		hosts := map[string]int{}
		for _, l := range group {
			hosts[l.hostname]++
		}
		for _, l := range group {
			if hosts[l.hostname] > 1 {
				set(l, gatewayv1.ListenerReasonHostnameConflict, fmt.Sprintf("another listener on port %d has hostname %q", port, l.hostname))
			}
		}
	}
}

// granted reports whether a ReferenceGrant in toNS allows the reference.
func (b *build) granted(fromGroup, fromKind, fromNS, toGroup, toKind, toNS, toName string) bool {
	for _, g := range b.in.ReferenceGrants {
		if g == nil || g.Namespace != toNS {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gatewayv1.ReferenceGrantFrom) bool {
			return string(f.Group) == fromGroup && string(f.Kind) == fromKind && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(g.Spec.To, func(t gatewayv1.ReferenceGrantTo) bool {
			return string(t.Group) == toGroup && string(t.Kind) == toKind && (t.Name == nil || string(*t.Name) == toName)
		})
		if from && to {
			return true
		}
	}
	return false
}

// NamesGateway reports whether a parentRef of a route in routeNamespace
// names the Gateway namespace/name.
func NamesGateway(routeNamespace string, ref gatewayv1.ParentReference, namespace, name string) bool {
	if ref.Group != nil && string(*ref.Group) != Group {
		return false
	}
	if ref.Kind != nil && string(*ref.Kind) != KindGateway {
		return false
	}
	ns := routeNamespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return ns == namespace && string(ref.Name) == name
}

// attachment is where a route is served: per listener port, its hosts.
type attachment struct {
	route *routeView
	// hosts are the effective hosts per listener port ("" for any).
	hosts map[int32][]string
	// on are the served listeners the route attaches to, with their
	// effective hosts, in spec order.
	on []listenerHosts
	// accepted is false when the route itself cannot be served.
	accepted metav1.Condition
	resolved metav1.Condition
}

// listenerHosts is a listener a route attaches to and the route's hosts
// on it.
type listenerHosts struct {
	l     *listener
	hosts []string
}

// candidates returns the routes of every kind that name the Gateway,
// sorted by kind, namespace and name.
func (b *build) candidates() []*routeView {
	var out []*routeView
	add := func(obj any) {
		r := routeOf(obj)
		if r != nil && slices.ContainsFunc(r.parents, func(p gatewayv1.ParentReference) bool {
			return NamesGateway(r.meta.Namespace, p, b.gw.Namespace, b.gw.Name)
		}) {
			out = append(out, r)
		}
	}
	for _, r := range b.in.Routes {
		add(r)
	}
	for _, r := range b.in.GRPCRoutes {
		add(r)
	}
	for _, r := range b.in.TCPRoutes {
		add(r)
	}
	for _, r := range b.in.UDPRoutes {
		add(r)
	}
	for _, r := range b.in.TLSRoutes {
		add(r)
	}
	slices.SortFunc(out, compareRoutes)
	return out
}

// routes decides the parent status of every route that names the Gateway
// and returns where the accepted ones attach, oldest first.
func (b *build) routes(ls []*listener, res *Result) []*attachment {
	var out []*attachment
	for _, rt := range b.candidates() {
		at := &attachment{route: rt, hosts: map[int32][]string{}}
		at.accepted, at.resolved = b.checkRoute(rt)
		rr := RouteResult{Kind: rt.kind, Namespace: rt.meta.Namespace, Name: rt.meta.Name}
		for _, ref := range rt.parents {
			if !NamesGateway(rt.meta.Namespace, ref, b.gw.Namespace, b.gw.Name) {
				continue
			}
			accepted := b.attach(rt, ref, ls, at)
			if accepted.Status == metav1.ConditionTrue && at.accepted.Status != metav1.ConditionTrue {
				accepted = at.accepted
			}
			ps := gatewayv1.RouteParentStatus{ParentRef: parentRefWithDefaults(ref), ControllerName: ControllerName,
				Conditions: []metav1.Condition{accepted, at.resolved}}
			rr.Parents = append(rr.Parents, ps)
		}
		res.Routes = append(res.Routes, rr)
		if len(at.hosts) > 0 && at.accepted.Status == metav1.ConditionTrue {
			out = append(out, at)
		}
	}
	slices.SortStableFunc(out, func(x, y *attachment) int {
		return x.route.meta.CreationTimestamp.Compare(y.route.meta.CreationTimestamp.Time)
	})
	return out
}

func parentRefWithDefaults(ref gatewayv1.ParentReference) gatewayv1.ParentReference {
	ref = *ref.DeepCopy()
	if ref.Group == nil {
		g := gatewayv1.Group(Group)
		ref.Group = &g
	}
	if ref.Kind == nil {
		k := gatewayv1.Kind(KindGateway)
		ref.Kind = &k
	}
	return ref
}

// attach attaches a route through one parentRef to the listeners it
// selects, records the hosts, and returns the parentRef's Accepted
// condition.
func (b *build) attach(rt *routeView, ref gatewayv1.ParentReference, ls []*listener, at *attachment) metav1.Condition {
	gen := rt.meta.Generation
	typ := string(gatewayv1.RouteConditionAccepted)
	var candidates []*listener
	for _, l := range ls {
		if ref.SectionName != nil && l.spec.Name != *ref.SectionName {
			continue
		}
		if ref.Port != nil && l.spec.Port != *ref.Port {
			continue
		}
		candidates = append(candidates, l)
	}
	if len(candidates) == 0 {
		return b.cond(typ, false, string(gatewayv1.RouteReasonNoMatchingParent), "no listener matches the parentRef's sectionName and port", gen)
	}
	var allowed []*listener
	for _, l := range candidates {
		if l.ok() && l.serves(rt.kind) && b.namespaceAllowed(l, rt.meta.Namespace) {
			allowed = append(allowed, l)
		}
	}
	if len(allowed) == 0 {
		return b.cond(typ, false, string(gatewayv1.RouteReasonNotAllowedByListeners), "no listener allows this route", gen)
	}
	attached := false
	for _, l := range allowed {
		hosts := []string{""}
		if rt.hasHostnames() {
			hosts = intersect(l.hostname, rt.hostnames)
		}
		if len(hosts) == 0 {
			continue
		}
		attached = true
		l.routes[rt.id()] = true
		if l.served() {
			port := l.spec.Port
			on := listenerHosts{l: l}
			for _, h := range hosts {
				if !capturedElsewhere(l, h, ls) {
					at.hosts[port] = append(at.hosts[port], h)
					on.hosts = append(on.hosts, h)
				}
			}
			if !slices.ContainsFunc(at.on, func(o listenerHosts) bool { return o.l == l }) {
				at.on = append(at.on, on)
			}
		}
	}
	if !attached {
		return b.cond(typ, false, string(gatewayv1.RouteReasonNoMatchingListenerHostname), "no listener hostname matches the route's hostnames", gen)
	}
	return b.cond(typ, true, string(gatewayv1.RouteReasonAccepted), "Accepted", gen)
}

func (b *build) namespaceAllowed(l *listener, ns string) bool {
	from := gatewayv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if l.spec.AllowedRoutes != nil && l.spec.AllowedRoutes.Namespaces != nil {
		if f := l.spec.AllowedRoutes.Namespaces.From; f != nil {
			from = *f
		}
		sel = l.spec.AllowedRoutes.Namespaces.Selector
	}
	switch from {
	case gatewayv1.NamespacesFromAll:
		return true
	case gatewayv1.NamespacesFromSame:
		return ns == b.gw.Namespace
	case gatewayv1.NamespacesFromSelector:
		if sel == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return false
		}
		lbls, ok := b.nsLabels[ns]
		return ok && s.Matches(lbls)
	}
	return false
}

// intersect returns the hosts a listener of hostname serves a route of
// hostnames on, "" standing for every host; none when they do not meet.
func intersect(listener string, hostnames []gatewayv1.Hostname) []string {
	if len(hostnames) == 0 {
		return []string{listener}
	}
	var out []string
	for _, h := range hostnames {
		r := strings.ToLower(string(h))
		var got string
		switch {
		case listener == "" || listener == r:
			got = r
		case strings.HasPrefix(listener, "*.") && strings.HasSuffix(r, listener[1:]):
			got = r
		case strings.HasPrefix(r, "*.") && strings.HasSuffix(listener, r[1:]):
			got = listener
		default:
			continue
		}
		if !slices.Contains(out, got) {
			out = append(out, got)
		}
	}
	return out
}

// addRouteRules adds the rules and pools of an HTTPRoute or GRPCRoute,
// unless one of them breaks the model's rules (lbmodel.CheckRule: a
// value the API server let through, such as a control character in a
// match) or the provider refuses it (Input.Checker): then none of the route
// is in the model, and refuseRoute says why in its status. Either would
// otherwise fail the whole model, and the route's neighbours with it.
func (b *build) addRouteRules(at *attachment, lb *lbmodel.LoadBalancer, ls []*listener, res *Result) {
	rules, origins := len(lb.HTTP.Rules), len(b.origins)
	backends := maps.Clone(b.backends)
	if at.route.kind == KindGRPCRoute {
		b.addGRPCRules(at, lb)
	} else {
		b.addRules(at, lb)
	}
	added := lb.HTTP.Rules[rules:]
	for _, r := range added {
		var pool *lbmodel.Pool
		if r.Pool != "" {
			pool = b.pools[r.Pool]
		}
		err := lbmodel.CheckRule(r, pool)
		if err == nil && b.in.Checker != nil {
			err = b.in.Checker.CheckModel(lbmodel.RuleModel(r, pool))
		}
		if err == nil {
			continue
		}
		for _, r := range added {
			delete(b.pools, r.Pool)
		}
		lb.HTTP.Rules, b.origins, b.backends = lb.HTTP.Rules[:rules], b.origins[:origins], backends
		b.refuseRoute(at.route, ls, res, err)
		return
	}
}

// refuseRoute records that a route cannot be served: its accepted
// parentRefs become Accepted False (UnsupportedValue, with the message of
// the check that refused it), and it counts on no listener.
func (b *build) refuseRoute(rt *routeView, ls []*listener, res *Result, err error) {
	b.errorf("%s: %v", rt, err)
	for _, l := range ls {
		delete(l.routes, rt.id())
	}
	i := slices.IndexFunc(res.Routes, func(r RouteResult) bool {
		return r.Kind == rt.kind && r.Namespace == rt.meta.Namespace && r.Name == rt.meta.Name
	})
	if i < 0 {
		return
	}
	for p := range res.Routes[i].Parents {
		conds := res.Routes[i].Parents[p].Conditions
		for c := range conds {
			if conds[c].Type == string(gatewayv1.RouteConditionAccepted) && conds[c].Status == metav1.ConditionTrue {
				conds[c] = b.cond(conds[c].Type, false, string(gatewayv1.RouteReasonUnsupportedValue), err.Error(), rt.meta.Generation)
			}
		}
	}
}

// checkRoute returns the route's own Accepted condition (True unless it
// uses what npl-lbsync cannot serve: checkRule of its kind) and its
// ResolvedRefs condition.
func (b *build) checkRoute(rt *routeView) (accepted, resolved metav1.Condition) {
	gen := rt.meta.Generation
	accepted = b.cond(string(gatewayv1.RouteConditionAccepted), true, string(gatewayv1.RouteReasonAccepted), "Accepted", gen)
	resolved = b.cond(string(gatewayv1.RouteConditionResolvedRefs), true, string(gatewayv1.RouteReasonResolvedRefs), "References resolved", gen)
	for i, refs := range rt.backendRefs {
		if reason, err := b.checkRule(rt, i); err != nil {
			accepted = b.cond(string(gatewayv1.RouteConditionAccepted), false, string(reason), fmt.Sprintf("rule %d: %v", i, err), gen)
			b.errorf("%s: rule %d: %v", rt, i, err)
			return accepted, resolved
		}
		for _, br := range refs {
			if _, reason, msg := b.backendRef(rt, br); reason != "" && resolved.Status == metav1.ConditionTrue {
				resolved = b.cond(string(gatewayv1.RouteConditionResolvedRefs), false, string(reason), msg, gen)
			}
		}
	}
	if resolved.Status != metav1.ConditionTrue {
		b.errorf("%s: %s", rt, resolved.Message)
	}
	return accepted, resolved
}

// checkRule says why rule i of a route cannot be served, by its kind.
func (b *build) checkRule(rt *routeView, i int) (gatewayv1.RouteConditionReason, error) {
	switch rt.kind {
	case KindHTTPRoute:
		return b.checkHTTPRule(rt, i)
	case KindGRPCRoute:
		return checkGRPCRule(&rt.grpc.Spec.Rules[i])
	}
	return "", nil
}

// backendRef resolves one backendRef to its Service port, or says why it
// is invalid.
func (b *build) backendRef(rt *routeView, ref gatewayv1.BackendRef) (backend, gatewayv1.RouteConditionReason, string) {
	group, kind := "", KindService
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	ns := rt.meta.Namespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	id := ns + "/" + string(ref.Name)
	if (group != "" && group != "core") || kind != KindService {
		return backend{}, gatewayv1.RouteReasonInvalidKind, fmt.Sprintf("backendRef %s: kind %s/%s is not a Service", id, group, kind)
	}
	if ns != rt.meta.Namespace && !b.granted(Group, rt.kind, rt.meta.Namespace, "", KindService, ns, string(ref.Name)) {
		return backend{}, gatewayv1.RouteReasonRefNotPermitted, fmt.Sprintf("backendRef %s: no ReferenceGrant allows it", id)
	}
	svc := b.services[id]
	if svc == nil {
		return backend{}, gatewayv1.RouteReasonBackendNotFound, fmt.Sprintf("backend Service %s not found", id)
	}
	if ref.Port == nil {
		return backend{}, gatewayv1.RouteReasonUnsupportedValue, fmt.Sprintf("backendRef %s has no port", id)
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == *ref.Port })
	if i < 0 {
		return backend{}, gatewayv1.RouteReasonBackendNotFound, fmt.Sprintf("backend Service %s has no port %d", id, *ref.Port)
	}
	return backend{svc: svc, port: svc.Spec.Ports[i], weight: refWeight(ref)}, "", ""
}

// refWeight is the weight of a backendRef, valid or not: 1 unless given.
func refWeight(ref gatewayv1.BackendRef) int32 {
	if ref.Weight != nil {
		return *ref.Weight
	}
	return 1
}

type backend struct {
	svc    *corev1.Service
	port   corev1.ServicePort
	weight int32
}

// ruleOrigin orders the rules: the position of the route (oldest first)
// and the rule index, which Build turns into Rule.Order.
type ruleOrigin struct {
	route *routeView
	index int
}

// addRule adds r for each of its hosts and ports, merging the ports of
// rules that are otherwise the same.
func (b *build) addRule(lb *lbmodel.LoadBalancer, r lbmodel.Rule, hosts map[int32][]string, rt *routeView, index int) {
	byHost := map[string][]int32{}
	for port, hs := range hosts {
		for _, h := range hs {
			byHost[h] = append(byHost[h], port)
		}
	}
	for h, ports := range byHost {
		x := r
		x.Host = h
		slices.Sort(ports)
		x.Ports = slices.Compact(ports)
		x.Order = int32(index) // rebased in finish
		lb.HTTP.Rules = append(lb.HTTP.Rules, x)
		b.origins = append(b.origins, ruleOrigin{route: rt, index: index})
	}
}

// rulePool builds the pool of one HTTPRoute or GRPCRoute rule from its
// backendRefs and returns its name; "" when no valid one can serve (the
// rule answers 500).
func (b *build) rulePool(rt *routeView, index int) string {
	name := lbmodel.GatewayRoutePoolName(b.lbName, rt.kind, rt.meta.Namespace, rt.meta.Name, index)
	p := b.backendPool(rt, index, name, corev1.ProtocolTCP)
	if !p.hasBackends {
		return ""
	}
	if _, ok := b.pools[name]; !ok {
		b.pools[name] = &p.Pool
	}
	return name
}

// backendPool is the pool of the valid backendRefs of a route rule.
type backendPool struct {
	lbmodel.Pool
	// hasBackends is false when no backendRef is valid with a weight
	// above zero.
	hasBackends bool
}

// backendPool builds the pool of rule index of a route from its valid
// backendRefs, whose Service ports must be of protocol proto; every
// Service validly named is a backend (opted in). The pool is h2c for a
// GRPCRoute, and for an HTTPRoute whose backends all have appProtocol
// kubernetes.io/h2c. The pool of an HTTPRoute or GRPCRoute rule answers
// the share of its invalid backendRefs 500 (InvalidWeight), as Gateway API
// requires; TCP, UDP and TLS routes, whose connections cannot be answered
// a status, leave that share out.
func (b *build) backendPool(rt *routeView, index int, name string, proto corev1.Protocol) *backendPool {
	if index >= len(rt.backendRefs) {
		return &backendPool{Pool: lbmodel.Pool{Name: name, Members: []lbmodel.Member{}}}
	}
	var valid []backend
	invalid := int32(0)
	for _, br := range rt.backendRefs[index] {
		be, reason, _ := b.backendRef(rt, br)
		if reason != "" {
			if rt.kind == KindHTTPRoute || rt.kind == KindGRPCRoute {
				invalid += max(refWeight(br), 0)
			}
			continue
		}
		b.backends[ServiceRef{Namespace: be.svc.Namespace, Name: be.svc.Name}] = true
		if be.weight > 0 {
			valid = append(valid, be)
		}
	}
	out := &backendPool{Pool: lbmodel.Pool{Name: name, Members: []lbmodel.Member{}}, hasBackends: len(valid) > 0}
	if len(valid) == 0 {
		return out
	}
	groups := make([][]lbmodel.Member, len(valid))
	h2c := true
	for i, be := range valid {
		groups[i] = b.members(rt, be, proto)
		h2c = h2c && be.port.AppProtocol != nil && *be.port.AppProtocol == appProtocolH2C
	}
	if rt.kind == KindGRPCRoute || (rt.kind == KindHTTPRoute && h2c) {
		out.AppProtocol = lbmodel.AppProtocolH2C
	}
	out.Members, out.InvalidWeight = weighted(valid, groups, invalid)
	if out.Members == nil {
		out.Members = []lbmodel.Member{}
	}
	return out
}

// appProtocolH2C is the Service port appProtocol of HTTP/2 without TLS.
const appProtocolH2C = "kubernetes.io/h2c"

// weighted joins the members of several backends so that each backend
// gets its weight's share of requests, and returns them with the weight of
// the share of the invalid backendRefs, whose weights add up to invalid
// (0 for none): a member's weight is its backend's weight divided by the
// backend's member count, the invalid share counts as a backend of one
// member, and all are scaled to 1-256 and divided by their greatest common
// divisor. A backend without members has no share: its requests go to the
// others (the invalid share among them). One backend, or equal shares,
// leave the members' weights unset (1); an invalid share is then 1.
func weighted(valid []backend, groups [][]lbmodel.Member, invalid int32) ([]lbmodel.Member, int32) {
	var out []lbmodel.Member
	share := make([]float64, len(valid))
	most := float64(invalid)
	for i, be := range valid {
		if n := len(groups[i]); n > 0 {
			share[i] = float64(be.weight) / float64(n)
			most = max(most, share[i])
		}
	}
	same := invalid == 0 || float64(invalid) == most
	for i := range valid {
		if len(groups[i]) > 0 && share[i] != most {
			same = false
		}
	}
	scaled := func(share float64) int32 {
		if same {
			return 1
		}
		return max(1, int32(share/most*256+0.5))
	}
	for i, g := range groups {
		for _, m := range g {
			if !same {
				m.Weight = scaled(share[i])
			}
			out = append(out, m)
		}
	}
	invalidWeight := int32(0)
	if invalid > 0 {
		invalidWeight = scaled(float64(invalid))
	}
	if !same {
		g := invalidWeight
		for _, m := range out {
			g = gcd(g, m.Weight)
		}
		for i := range out {
			out[i].Weight /= g
		}
		invalidWeight /= g
	}
	return lbmodel.SortMembers(out), invalidWeight
}

func gcd(a, b int32) int32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// members builds the members of one backend Service port, as the L4
// builder does, or reports why it has none.
func (b *build) members(rt *routeView, be backend, proto corev1.Protocol) []lbmodel.Member {
	svcID := be.svc.Namespace + "/" + be.svc.Name
	switch {
	case be.svc.Spec.Type == corev1.ServiceTypeExternalName:
		b.errorf("%s: backend Service %s is of type ExternalName, which has no Pods: no members", rt, svcID)
		return nil
	case cmp.Or(be.port.Protocol, corev1.ProtocolTCP) != proto:
		b.errorf("%s: backend Service %s port %d is %s, not %s: no members", rt, svcID, be.port.Port, cmp.Or(be.port.Protocol, corev1.ProtocolTCP), proto)
		return nil
	case be.svc.Spec.Type == corev1.ServiceTypeNodePort && cmp.Or(b.in.ServiceType, builder.ServiceTypeNodePortLocal) == builder.ServiceTypeNodePortLocal:
		b.warnf("%s: backend Service %s is of type NodePort: NodePortLocal does not map its Pods, no members; make it a ClusterIP Service",
			rt, svcID)
		return nil
	}
	members, rep := builder.Members(builder.Input{
		ClusterName: b.in.ClusterName, ServiceType: b.in.ServiceType, Family: b.in.Family, Service: be.svc,
		Pods: b.in.Pods, Nodes: b.in.Nodes, EndpointSlices: b.in.EndpointSlices,
	}, be.port)
	b.r.AddBackend(svcID, rep)
	return members
}

// finish sets the listeners, certificates, pools, rule order and ports of
// the model.
func (b *build) finish(lb *lbmodel.LoadBalancer, ls []*listener) {
	served := map[portKey]bool{}
	certs := map[string]*lbmodel.TLSCert{}
	for _, l := range ls {
		if !l.served() {
			continue
		}
		port := l.spec.Port
		key := portKey{port, l.spec.Protocol == gatewayv1.UDPProtocolType}
		if !served[key] {
			served[key] = true
			lb.Listeners = append(lb.Listeners, b.modelListener(l))
		}
		for _, c := range l.certs {
			if have := certs[c.Secret]; have != nil {
				have.Ports = append(have.Ports, c.Ports...)
				have.Hosts = append(have.Hosts, c.Hosts...)
				continue
			}
			c := c
			certs[c.Secret] = &c
		}
	}
	lbmodel.SortListeners(lb.Listeners)
	for _, c := range certs {
		slices.Sort(c.Ports)
		c.Ports = slices.Compact(c.Ports)
		slices.Sort(c.Hosts)
		c.Hosts = slices.Compact(c.Hosts)
		lb.HTTP.TLS = append(lb.HTTP.TLS, *c)
	}
	slices.SortFunc(lb.HTTP.TLS, func(a, b lbmodel.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })

	// Order: the position of (route, rule index) among all; routes come
	// oldest first and rules by index, so first seen is first.
	rank := map[ruleOrigin]int32{}
	for _, o := range b.origins {
		if _, ok := rank[o]; !ok {
			rank[o] = int32(len(rank))
		}
	}
	rules := lb.HTTP.Rules[:0]
	seen := map[string]bool{}
	for i, r := range lb.HTTP.Rules {
		r.Order = rank[b.origins[i]]
		if seen[r.MatchKey()] {
			continue // an older rule matches the same requests
		}
		seen[r.MatchKey()] = true
		rules = append(rules, r)
	}
	for _, r := range isolation(ls) {
		if !seen[r.MatchKey()] {
			seen[r.MatchKey()] = true
			rules = append(rules, r)
		}
	}
	lb.HTTP.Rules = rules
	for _, p := range b.pools {
		lb.Pools = append(lb.Pools, *p)
		b.countReady(*p)
	}
	for _, l := range lb.Listeners {
		b.countReady(l.Pool)
	}
	lbmodel.SortPools(lb.Pools)
	lbmodel.SortRules(lb.HTTP.Rules)
}

// modelListener is the model's listener of a served listener (the first
// of its port): HTTP and HTTPS without pool, TCP and UDP with the pool of
// their oldest route (none attached: a pool without members), TLS with
// the SNI routes of its port.
func (b *build) modelListener(l *listener) lbmodel.Listener {
	port := l.spec.Port
	switch l.spec.Protocol {
	case gatewayv1.HTTPSProtocolType:
		return lbmodel.Listener{Port: port, Protocol: lbmodel.HTTPS}
	case gatewayv1.TCPProtocolType, gatewayv1.UDPProtocolType:
		proto := lbmodel.Protocol(l.spec.Protocol)
		pool := lbmodel.Pool{Name: lbmodel.PoolName(b.lbName, proto, port), Members: []lbmodel.Member{}}
		if l.pool != nil {
			pool = *l.pool
		}
		return lbmodel.Listener{Port: port, Protocol: proto, Pool: pool}
	case gatewayv1.TLSProtocolType:
		sni := b.sni[port]
		lbmodel.SortSNI(sni)
		return lbmodel.Listener{Port: port, Protocol: lbmodel.TLS, SNI: sni, Terminate: l.terminate}
	}
	return lbmodel.Listener{Port: port, Protocol: lbmodel.HTTP}
}

func (b *build) countReady(p lbmodel.Pool) {
	for _, m := range p.Members {
		if m.Enabled {
			b.r.ReadyBackends++
		}
	}
}

// covers reports whether a listener hostname pattern takes every request
// for host (a name or a wildcard): the same, or a wildcard above it.
func covers(pattern, host string) bool {
	if pattern == host {
		return true
	}
	return strings.HasPrefix(pattern, "*.") && host != "" && strings.HasSuffix(host, pattern[1:]) && len(host) > len(pattern)-1
}

// capturedElsewhere reports whether the requests for host, which a route
// gets on listener l, go to another listener of l's port whose hostname is
// more specific and covers host (listener isolation): the route's rules
// for host would never be reached on l, and must not be reached on the
// other.
func capturedElsewhere(l *listener, host string, ls []*listener) bool {
	return slices.ContainsFunc(ls, func(m *listener) bool {
		if m == l || !m.served() || m.spec.Port != l.spec.Port || m.hostname == "" || m.hostname == l.hostname {
			return false
		}
		moreSpecific := l.hostname == "" || covers(l.hostname, m.hostname)
		return moreSpecific && covers(m.hostname, host)
	})
}

// isolationOrder ranks the rules of isolation after every route rule.
const isolationOrder = math.MaxInt32

// isolation returns, for each served listener whose hostname is more
// specific than that of another listener on its port, a rule that answers
// 404 to the requests for that hostname no route of the listener matches:
// Gateway API's listener isolation. A request goes to the listener of the
// most specific matching hostname only; without the rule it would fall
// through to the routes of the less specific listener. The rule's path is
// the prefix "/" with the last Order, which ranks after every other path
// of its host (Exact, RegularExpression, longer prefixes, and "/" with
// method, header or query tests); a route's own plain "/" rule replaces
// it.
func isolation(ls []*listener) []lbmodel.Rule {
	var out []lbmodel.Rule
	for _, l := range ls {
		if !l.served() || l.hostname == "" {
			continue
		}
		shadows := slices.ContainsFunc(ls, func(m *listener) bool {
			return m != l && m.served() && m.spec.Port == l.spec.Port && m.hostname != l.hostname &&
				(m.hostname == "" || (strings.HasPrefix(m.hostname, "*.") && strings.HasSuffix(l.hostname, m.hostname[1:])))
		})
		if shadows {
			out = append(out, lbmodel.Rule{Host: l.hostname, Path: "/", PathType: lbmodel.PathPrefix, FixedStatus: 404,
				Ports: []int32{l.spec.Port}, Order: isolationOrder})
		}
	}
	return out
}
