package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Client certificate validation of a Gateway's HTTPS listeners (Gateway
// API's spec.tls.frontend): the validation of a port's perPort entry, else
// the default, with the CA certificates of the ConfigMaps it names (in the
// Gateway's namespace, or in another one a ReferenceGrant opens to
// Gateways of its namespace) becomes the model listener's
// ClientValidation. Every HTTPS listener of a port has the same, as the
// port is one listener of the load balancer. A reference that cannot be
// used makes the listeners of its port ResolvedRefs False with its reason;
// when none can, they are not accepted (NoValidCACertificate) and their
// port is not served: never served without the check it asks for. Nothing
// of it touches the Gateway's other ports, nor another Gateway's.

// maxClientCABytes bounds the CA certificates of all of a Gateway's HTTPS
// ports together, in the model's JSON, so that they leave room in the
// model (lbmodel.MaxModelBytes) for its routes.
const maxClientCABytes = lbmodel.MaxModelBytes / 4

// frontendValidation is the client certificate validation of one port
// resolved: the model's, or why the port's listeners are not accepted.
type frontendValidation struct {
	validation *lbmodel.ClientValidation
	// resolved is the ResolvedRefs condition of the port's listeners
	// when a reference is bad; the zero condition when none is.
	resolved metav1.Condition
	// refused is the reason of Accepted False, with why; "" when the
	// listeners are accepted.
	refused gatewayv1.ListenerConditionReason
	why     string
}

// frontendSpec returns the validation spec.tls.frontend asks of the HTTPS
// listeners of port (nil: none), and where it is written.
func frontendSpec(gw *gatewayv1.Gateway, port gatewayv1.PortNumber) (*gatewayv1.FrontendTLSValidation, string) {
	if gw.Spec.TLS == nil || gw.Spec.TLS.Frontend == nil {
		return nil, ""
	}
	f := gw.Spec.TLS.Frontend
	if i := slices.IndexFunc(f.PerPort, func(p gatewayv1.TLSPortConfig) bool { return p.Port == port }); i >= 0 {
		return f.PerPort[i].TLS.Validation, fmt.Sprintf("spec.tls.frontend.perPort[%d]", i)
	}
	return f.Default.Validation, "spec.tls.frontend.default"
}

// FrontendCAConfigMaps returns the ConfigMaps ("namespace/name") gw's
// spec.tls.frontend names as CA certificates, without duplicates, sorted:
// those npl-lbsync reads and watches for gw (whether a ReferenceGrant
// allows one is for Build to tell).
func FrontendCAConfigMaps(gw *gatewayv1.Gateway) []string {
	if gw.Spec.TLS == nil || gw.Spec.TLS.Frontend == nil {
		return nil
	}
	f := gw.Spec.TLS.Frontend
	vs := []*gatewayv1.FrontendTLSValidation{f.Default.Validation}
	for _, p := range f.PerPort {
		vs = append(vs, p.TLS.Validation)
	}
	var out []string
	for _, v := range vs {
		if v == nil {
			continue
		}
		for _, r := range v.CACertificateRefs {
			if ref := caRef(gw, r); ref.is(KindConfigMap) {
				out = append(out, ref.String())
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// InsecureFrontend returns, when gw's spec.tls.frontend allows clients
// without a valid certificate anywhere (AllowInsecureFallback), where;
// "" when it does not.
func InsecureFrontend(gw *gatewayv1.Gateway) string {
	if gw.Spec.TLS == nil || gw.Spec.TLS.Frontend == nil {
		return ""
	}
	f := gw.Spec.TLS.Frontend
	var where []string
	if v := f.Default.Validation; v != nil && v.Mode == gatewayv1.AllowInsecureFallback {
		where = append(where, "default")
	}
	for _, p := range f.PerPort {
		if v := p.TLS.Validation; v != nil && v.Mode == gatewayv1.AllowInsecureFallback {
			where = append(where, fmt.Sprintf("port %d", p.Port))
		}
	}
	return strings.Join(where, ", ")
}

func caRef(gw *gatewayv1.Gateway, r gatewayv1.ObjectReference) objectRef {
	return refOf(&r.Group, &r.Kind, r.Namespace, r.Name, KindConfigMap, gw.Namespace)
}

// clientValidation sets the client certificate validation of HTTPS
// listener l, resolved once per port, and its conditions.
func (b *build) clientValidation(l *listener) {
	port := l.spec.Port
	fv := b.frontend[port]
	if fv == nil {
		fv = b.resolveFrontend(l.spec.Port)
		if b.frontend == nil {
			b.frontend = map[int32]*frontendValidation{}
		}
		b.frontend[port] = fv
	}
	gen := b.gw.Generation
	if fv.resolved.Type != "" && (l.resolved.Status == metav1.ConditionTrue ||
		l.resolved.Reason == string(gatewayv1.ListenerReasonInvalidRouteKinds)) {
		l.resolved = fv.resolved
	}
	if fv.refused != "" {
		l.accepted = b.cond(string(gatewayv1.ListenerConditionAccepted), false, string(fv.refused), fv.why, gen)
		l.kinds = []gatewayv1.RouteGroupKind{}
		b.errorf("gateway %s/%s: listener %s: %s", b.gw.Namespace, b.gw.Name, l.spec.Name, fv.why)
		return
	}
	l.clientValidation = fv.validation
}

// resolveFrontend resolves the client certificate validation of the HTTPS
// listeners of port: the CA certificates of each reference checked alone
// (only blocks that parse as certificates are kept: one HAProxy could not
// load would fail the edge's whole configuration), then their size and
// the provider's check of this listener alone, before any joins the
// model.
func (b *build) resolveFrontend(port gatewayv1.PortNumber) *frontendValidation {
	fv := &frontendValidation{}
	v, where := frontendSpec(b.gw, port)
	if v == nil {
		return fv
	}
	gen := b.gw.Generation
	var pems, bad []string
	var badReason gatewayv1.ListenerConditionReason
	for i, r := range v.CACertificateRefs {
		ref := caRef(b.gw, r)
		var problem string
		reason := gatewayv1.ListenerReasonInvalidCACertificateRef
		switch {
		case !ref.is(KindConfigMap):
			reason = gatewayv1.ListenerReasonInvalidCACertificateKind
			problem = fmt.Sprintf("kind %s/%s of %s is not a ConfigMap", ref.group, ref.kind, ref.name)
		case !b.allowed(KindGateway, b.gw.Namespace, ref):
			reason = gatewayv1.ListenerReasonRefNotPermitted
			problem = fmt.Sprintf("ConfigMap %s: no ReferenceGrant allows it", ref)
		default:
			var data string
			if data, problem = b.caCertificates(ref.namespace, ref.name); problem == "" {
				pems = append(pems, data)
				continue
			}
		}
		bad = append(bad, fmt.Sprintf("%s.validation.caCertificateRefs[%d]: %s", where, i, problem))
		badReason = cmp.Or(badReason, reason)
	}
	if len(bad) > 0 {
		fv.resolved = b.cond(string(gatewayv1.ListenerConditionResolvedRefs), false, string(badReason), strings.Join(bad, "; "), gen)
	}
	if len(pems) == 0 {
		fv.refused, fv.why = gatewayv1.ListenerReasonNoValidCACertificate, "no valid CA certificate for client validation: "+strings.Join(bad, "; ")
		return fv
	}
	cv := &lbmodel.ClientValidation{CACertPEM: strings.Join(pems, ""), Optional: v.Mode == gatewayv1.AllowInsecureFallback}
	n := lbmodel.JSONSize(cv)
	if b.clientCABytes+n > maxClientCABytes {
		fv.refused = gatewayv1.ListenerReasonNoValidCACertificate
		fv.why = fmt.Sprintf("the CA certificates of %s (%d bytes) would take the Gateway's client CA certificates beyond %d bytes",
			where, n, maxClientCABytes)
		return fv
	}
	if b.in.Checker != nil {
		check := lbmodel.ListenerModel(lbmodel.Listener{Port: port, Protocol: lbmodel.HTTPS, ClientValidation: cv})
		if err := b.in.Checker.CheckModel(check); err != nil {
			fv.refused, fv.why = gatewayv1.ListenerReasonUnsupportedValue, err.Error()
			return fv
		}
	}
	b.clientCABytes += n
	fv.validation = cv
	return fv
}
