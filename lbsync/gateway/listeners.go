package gateway

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// A Gateway's listeners, validated one by one and then against each other:
// their Accepted, ResolvedRefs and Conflicted conditions, the route kinds
// they take and the certificates of those that terminate TLS.

// listener is the state of one Gateway listener during a build.
type listener struct {
	spec     *gatewayv1.Listener
	hostname string
	accepted metav1.Condition
	resolved metav1.Condition
	conflict metav1.Condition
	kinds    []gatewayv1.RouteGroupKind
	certs    []lbmodel.TLSCert
	// certsFailed is set when a certificateRef cannot be used: the
	// listener is not programmed.
	certsFailed bool
	// clientValidation is that of an HTTPS listener's port, nil for none.
	clientValidation *lbmodel.ClientValidation
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
		(!l.needsCerts() || (len(l.certs) > 0 && !l.certsFailed))
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
		if spec.Protocol == gatewayv1.HTTPSProtocolType {
			b.clientValidation(l)
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
		l.certsFailed = true
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
		r := refOf(ref.Group, ref.Kind, ref.Namespace, ref.Name, KindSecret, b.gw.Namespace)
		id := r.String()
		if !r.is(KindSecret) {
			fail(gatewayv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("certificateRef %s %s/%s is not a Secret", id, r.group, r.kind))
			continue
		}
		if !b.allowed(KindGateway, b.gw.Namespace, r) {
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
