package gateway

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// frontendGateway is a Gateway with HTTPS listeners on 443 (two
// hostnames), 8443 and 9443, HTTP on 80, and spec.tls.frontend's default
// validation with ConfigMap ca and a perPort one for 8443 with ConfigMap
// ca-8443; its routes send to Service a.
func frontendGateway(c testCert) Input {
	gw := gateway(httpsL("one", 443, "one.example.com", secretRef("", "tls")), httpsL("two", 443, "two.example.com", secretRef("", "tls")),
		httpsL("port", 8443, "", secretRef("", "tls")), httpsL("other", 9443, "", secretRef("", "tls")), httpL("http", 80, ""))
	gw.Spec.TLS = &gatewayv1.GatewayTLSConfig{Frontend: &gatewayv1.FrontendTLSConfig{
		Default: gatewayv1.TLSConfig{Validation: &gatewayv1.FrontendTLSValidation{
			CACertificateRefs: []gatewayv1.ObjectReference{{Kind: KindConfigMap, Name: "ca"}}}},
		PerPort: []gatewayv1.TLSPortConfig{
			{Port: 8443, TLS: gatewayv1.TLSConfig{Validation: &gatewayv1.FrontendTLSValidation{
				CACertificateRefs: []gatewayv1.ObjectReference{{Kind: KindConfigMap, Name: "ca-8443"}},
				Mode:              gatewayv1.AllowInsecureFallback}}},
			{Port: 80, TLS: gatewayv1.TLSConfig{Validation: &gatewayv1.FrontendTLSValidation{
				CACertificateRefs: []gatewayv1.ObjectReference{{Kind: KindConfigMap, Name: "gone"}}}}},
		}}}
	return Input{ClusterName: testCluster, ServiceType: "NodePortLocal", Family: "IPv4", Gateway: gw,
		Routes:   []*gatewayv1.HTTPRoute{route("r", 1, rule(nil, svcRef("a", 1)))},
		Services: []*corev1.Service{service(appNS, "a")}, Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.11", 61000)},
		Secrets: []*corev1.Secret{c.secret(infraNS, "tls")},
		ConfigMaps: []*corev1.ConfigMap{
			{ObjectMeta: metav1.ObjectMeta{Namespace: infraNS, Name: "ca"}, Data: map[string]string{CACertKey: string(c.certPEM)}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: infraNS, Name: "ca-8443"}, Data: map[string]string{
				CACertKey: "junk\n" + string(c.certPEM) + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}},
		}}
}

func modelListener(t *testing.T, lb *lbmodel.LoadBalancer, proto lbmodel.Protocol, port int32) *lbmodel.Listener {
	t.Helper()
	if lb == nil {
		t.Fatal("no model")
	}
	i := slices.IndexFunc(lb.Listeners, func(l lbmodel.Listener) bool { return l.Protocol == proto && l.Port == port })
	if i < 0 {
		t.Fatalf("no listener %s/%d in %+v", proto, port, lb.Listeners)
	}
	return &lb.Listeners[i]
}

// The default validation applies to the HTTPS ports without a perPort
// entry, the perPort one to its port (with its mode), each with the valid
// certificates of its ConfigMap only; HTTP listeners take none, whatever a
// perPort entry of their port says. AllowInsecureFallback sets the
// Gateway's InsecureFrontendValidationMode condition.
func TestBuild_frontendValidationPerPort(t *testing.T) {
	c := newCert(t, "ca.example.com")
	in := frontendGateway(c)
	res := Build(in)
	want := &lbmodel.ClientValidation{CACertPEM: string(c.certPEM)}
	for _, port := range []int32{443, 9443} {
		if got := modelListener(t, res.LB, lbmodel.HTTPS, port).ClientValidation; !equalValidation(got, want) {
			t.Errorf("HTTPS/%d: client validation %+v, want %+v", port, got, want)
		}
	}
	if got := modelListener(t, res.LB, lbmodel.HTTPS, 8443).ClientValidation; !equalValidation(got, &lbmodel.ClientValidation{
		CACertPEM: string(c.certPEM), Optional: true}) {
		t.Errorf("HTTPS/8443: client validation %+v, want the valid certificate alone, optional", got)
	}
	if got := modelListener(t, res.LB, lbmodel.HTTP, 80).ClientValidation; got != nil {
		t.Errorf("HTTP/80: client validation %+v, want none", got)
	}
	for _, l := range res.Listeners {
		for _, typ := range []string{"Accepted", "ResolvedRefs"} {
			if c := cond(l.Status.Conditions, typ); c.Status != metav1.ConditionTrue || !l.Served {
				t.Errorf("listener %s: %s %s %s (served %v), want True and served", l.Status.Name, typ, c.Reason, c.Message, l.Served)
			}
		}
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("Normalize: %v", err)
	}
	st := GatewayStatus(in.Gateway, res, Programmed{OK: true, VIPs: []string{"198.18.200.1"}})
	if c := cond(st.Conditions, "InsecureFrontendValidationMode"); c.Status != metav1.ConditionTrue || c.Reason != "ConfigurationChanged" ||
		!strings.Contains(c.Message, "port 8443") {
		t.Errorf("InsecureFrontendValidationMode = %+v, want True ConfigurationChanged naming port 8443", c)
	}
	in.Gateway.Spec.TLS.Frontend.PerPort[0].TLS.Validation.Mode = gatewayv1.AllowValidOnly
	if c := cond(GatewayStatus(in.Gateway, Build(in), Programmed{OK: true}).Conditions, "InsecureFrontendValidationMode"); c.Type != "" {
		t.Errorf("InsecureFrontendValidationMode = %+v with AllowValidOnly everywhere, want none", c)
	}
}

func equalValidation(a, b *lbmodel.ClientValidation) bool {
	return a != nil && b != nil && *a == *b
}

// A reference that cannot be used makes the HTTPS listeners of its port
// ResolvedRefs False with the reason Gateway API names; with no usable
// one they are not accepted (NoValidCACertificate) and their port is not
// served, never served without the check. The Gateway's other ports keep
// their listeners, routes and pools.
func TestBuild_frontendValidationRefusals(t *testing.T) {
	c := newCert(t, "ca.example.com")
	valid := gatewayv1.ObjectReference{Kind: KindConfigMap, Name: "ca"}
	grant := &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "g"},
		Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: Group, Kind: KindGateway, Namespace: infraNS}},
			To:   []gatewayv1.ReferenceGrantTo{{Kind: KindConfigMap}}}}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "ca"}, Data: map[string]string{CACertKey: string(c.certPEM)}}
	tests := []struct {
		name     string
		refs     []gatewayv1.ObjectReference
		grants   []*gatewayv1.ReferenceGrant
		forbid   []string
		checker  error
		accepted string // "" : True
		resolved string // "" : True
		message  string
	}{
		{name: "no such ConfigMap", refs: []gatewayv1.ObjectReference{{Kind: KindConfigMap, Name: "gone"}},
			accepted: "NoValidCACertificate", resolved: "InvalidCACertificateRef", message: "ConfigMap infra/gone not found"},
		{name: "another kind", refs: []gatewayv1.ObjectReference{{Kind: "Service", Name: "a"}},
			accepted: "NoValidCACertificate", resolved: "InvalidCACertificateKind", message: "kind /Service of a is not a ConfigMap"},
		{name: "another namespace without a grant", refs: []gatewayv1.ObjectReference{{Kind: KindConfigMap, Name: "ca", Namespace: ptr(gatewayv1.Namespace(appNS))}},
			accepted: "NoValidCACertificate", resolved: "RefNotPermitted", message: "ConfigMap shop/ca: no ReferenceGrant allows it"},
		{name: "another namespace with a grant", refs: []gatewayv1.ObjectReference{{Kind: KindConfigMap, Name: "ca", Namespace: ptr(gatewayv1.Namespace(appNS))}},
			grants: []*gatewayv1.ReferenceGrant{grant}},
		{name: "a ConfigMap npl-lbsync may not read", refs: []gatewayv1.ObjectReference{valid}, forbid: []string{"infra/ca"},
			accepted: "NoValidCACertificate", resolved: "InvalidCACertificateRef", message: "npl-lbsync may not read ConfigMap infra/ca"},
		{name: "one valid among invalid ones", refs: []gatewayv1.ObjectReference{{Kind: KindConfigMap, Name: "gone"}, valid},
			resolved: "InvalidCACertificateRef", message: "caCertificateRefs[0]: ConfigMap infra/gone not found"},
		{name: "a provider that cannot verify clients", refs: []gatewayv1.ObjectReference{valid},
			checker:  fmt.Errorf("listener HTTPS/443: clientValidation is %w", lbmodel.ErrUnsupported),
			accepted: "UnsupportedValue", message: "listener HTTPS/443: clientValidation is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := frontendGateway(c)
			in.Gateway.Spec.TLS.Frontend.Default.Validation.CACertificateRefs = tt.refs
			in.ReferenceGrants, in.ForbiddenConfigMaps = tt.grants, tt.forbid
			in.ConfigMaps = append(in.ConfigMaps, other)
			if tt.checker != nil {
				in.Checker = refuseClientValidation{tt.checker}
			}
			res := Build(in)
			for _, name := range []string{"one", "two", "other"} {
				l := listenerResult(t, res, name)
				acc, rr := cond(l.Status.Conditions, "Accepted"), cond(l.Status.Conditions, "ResolvedRefs")
				if (tt.accepted == "") != (acc.Status == metav1.ConditionTrue) || tt.accepted != "" && acc.Reason != tt.accepted {
					t.Errorf("listener %s: Accepted %s %s, want reason %q", name, acc.Status, acc.Reason, tt.accepted)
				}
				if (tt.resolved == "") != (rr.Status == metav1.ConditionTrue) || tt.resolved != "" && rr.Reason != tt.resolved {
					t.Errorf("listener %s: ResolvedRefs %s %s, want reason %q", name, rr.Status, rr.Reason, tt.resolved)
				}
				if msg := acc.Message + " " + rr.Message; !strings.Contains(msg, tt.message) {
					t.Errorf("listener %s: messages %q, want %q", name, msg, tt.message)
				}
				if l.Served != (tt.accepted == "") {
					t.Errorf("listener %s: served %v", name, l.Served)
				}
			}
			for _, port := range []int32{443, 9443} {
				i := slices.IndexFunc(res.LB.Listeners, func(l lbmodel.Listener) bool { return l.Port == port })
				if tt.accepted != "" && i >= 0 {
					t.Errorf("HTTPS/%d is served without its client validation: %+v", port, res.LB.Listeners[i])
				}
				if tt.accepted == "" && (i < 0 || res.LB.Listeners[i].ClientValidation == nil) {
					t.Errorf("HTTPS/%d: not served with its client validation: %+v", port, res.LB.Listeners)
				}
			}
			// The other ports, their routes and pools stay (a provider
			// that refuses every client validation refuses 8443's too).
			if v := modelListener(t, res.LB, lbmodel.HTTP, 80); tt.checker == nil {
				if v := modelListener(t, res.LB, lbmodel.HTTPS, 8443).ClientValidation; v == nil || !v.Optional {
					t.Errorf("HTTPS/8443: %+v, want its own validation", v)
				}
			} else if v.ClientValidation != nil {
				t.Errorf("HTTP/80: %+v", v)
			}
			if len(res.LB.Pools) != 1 || res.Accepted.Status != metav1.ConditionTrue {
				t.Errorf("pools %+v, Gateway Accepted %s: the rest of the Gateway must be served", res.LB.Pools, res.Accepted.Status)
			}
		})
	}
}

// refuseClientValidation is a provider's check that refuses a listener
// with client validation, as Avi, BIG-IP and the mock do.
type refuseClientValidation struct{ err error }

func (r refuseClientValidation) CheckModel(lb *lbmodel.LoadBalancer) error {
	if err := lbmodel.ClientValidationUnsupported(lb); err != nil {
		if !errors.Is(err, lbmodel.ErrUnsupported) {
			return err
		}
		return r.err
	}
	return nil
}

// FrontendCAConfigMaps names every ConfigMap of spec.tls.frontend once,
// in its namespace, and nothing of another kind.
func TestFrontendCAConfigMaps(t *testing.T) {
	in := frontendGateway(newCert(t, "ca.example.com"))
	v := in.Gateway.Spec.TLS.Frontend.Default.Validation
	v.CACertificateRefs = append(v.CACertificateRefs, gatewayv1.ObjectReference{Kind: "Service", Name: "a"},
		gatewayv1.ObjectReference{Kind: KindConfigMap, Name: "x", Namespace: ptr(gatewayv1.Namespace(appNS))},
		gatewayv1.ObjectReference{Kind: KindConfigMap, Name: "ca"})
	got := FrontendCAConfigMaps(in.Gateway)
	want := []string{"infra/ca", "infra/ca-8443", "infra/gone", "shop/x"}
	if !slices.Equal(got, want) {
		t.Errorf("FrontendCAConfigMaps = %v, want %v", got, want)
	}
	if got := FrontendCAConfigMaps(gateway(httpL("http", 80, ""))); got != nil {
		t.Errorf("FrontendCAConfigMaps without spec.tls = %v", got)
	}
}
