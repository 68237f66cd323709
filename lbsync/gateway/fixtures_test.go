package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

// Fixtures: Gateway infra/gw of cluster c1, Services selecting app=<name>
// with port 80 -> container port http 8080, and Ready Pods that npl-agent
// annotated.

const (
	testCluster = "c1"
	infraNS     = "infra"
	appNS       = "shop"
)

var lbName = lbmodel.GatewayLoadBalancerName(testCluster, infraNS, "gw")

func ptr[T any](v T) *T { return &v }

func httpL(name string, port int32, host string) gatewayv1.Listener {
	l := gatewayv1.Listener{Name: gatewayv1.SectionName(name), Port: port, Protocol: gatewayv1.HTTPProtocolType,
		AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: ptr(gatewayv1.NamespacesFromAll)}}}
	if host != "" {
		l.Hostname = ptr(gatewayv1.Hostname(host))
	}
	return l
}

func httpsL(name string, port int32, host string, secrets ...gatewayv1.SecretObjectReference) gatewayv1.Listener {
	l := httpL(name, port, host)
	l.Protocol = gatewayv1.HTTPSProtocolType
	l.TLS = &gatewayv1.ListenerTLSConfig{Mode: ptr(gatewayv1.TLSModeTerminate), CertificateRefs: secrets}
	return l
}

func secretRef(ns, name string) gatewayv1.SecretObjectReference {
	r := gatewayv1.SecretObjectReference{Name: gatewayv1.ObjectName(name)}
	if ns != "" {
		r.Namespace = ptr(gatewayv1.Namespace(ns))
	}
	return r
}

func gateway(listeners ...gatewayv1.Listener) *gatewayv1.Gateway {
	return &gatewayv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: infraNS, Name: "gw", Generation: 3},
		Spec:       gatewayv1.GatewaySpec{GatewayClassName: "npl", Listeners: listeners},
	}
}

type routeMod func(*gatewayv1.HTTPRoute)

func route(name string, created int64, mods ...routeMod) *gatewayv1.HTTPRoute {
	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: name, Generation: 2,
		CreationTimestamp: metav1.Unix(created, 0)}}
	r.Spec.ParentRefs = []gatewayv1.ParentReference{{Name: "gw", Namespace: ptr(gatewayv1.Namespace(infraNS))}}
	for _, m := range mods {
		m(r)
	}
	return r
}

func hostnames(hs ...string) routeMod {
	return func(r *gatewayv1.HTTPRoute) {
		for _, h := range hs {
			r.Spec.Hostnames = append(r.Spec.Hostnames, gatewayv1.Hostname(h))
		}
	}
}

func parent(ref gatewayv1.ParentReference) routeMod {
	return func(r *gatewayv1.HTTPRoute) { r.Spec.ParentRefs = []gatewayv1.ParentReference{ref} }
}

func rule(matches []gatewayv1.HTTPRouteMatch, backends ...gatewayv1.HTTPBackendRef) routeMod {
	return func(r *gatewayv1.HTTPRoute) {
		r.Spec.Rules = append(r.Spec.Rules, gatewayv1.HTTPRouteRule{Matches: matches, BackendRefs: backends})
	}
}

func withFilter(f gatewayv1.HTTPRouteFilter) routeMod {
	return func(r *gatewayv1.HTTPRoute) {
		last := &r.Spec.Rules[len(r.Spec.Rules)-1]
		last.Filters = append(last.Filters, f)
	}
}

func prefixM(p string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchPathPrefix), Value: ptr(p)}}
}

func exactM(p string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchExact), Value: ptr(p)}}
}

func svcRef(name string, weight int32) gatewayv1.HTTPBackendRef {
	return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name), Port: ptr(gatewayv1.PortNumber(80))},
		Weight:                 ptr(weight),
	}}
}

func service(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromString("http")}},
		},
	}
}

func pod(ns, app, name, nodeIP string, nodePort int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app},
			Annotations: map[string]string{contract.PodKey: fmt.Sprintf(
				`[{"podPort":8080,"nodeIP":%q,"nodePort":%d,"protocol":"tcp","ipFamily":"IPv4"}]`, nodeIP, nodePort)}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

type testCert struct{ certPEM, keyPEM []byte }

func newCert(t testing.TB, host string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return testCert{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
}

func (c testCert) secret(ns, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: c.certPEM, corev1.TLSPrivateKeyKey: c.keyPEM}}
}

func up(ip string, port int32, weight int32) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: true, Weight: weight}
}

func poolName(route string, idx int) string {
	return lbmodel.GatewayPoolName(lbName, appNS, route, idx)
}

// cond finds a condition by type.
func cond(cs []metav1.Condition, typ string) metav1.Condition {
	for _, c := range cs {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// Listeners and routes of the other kinds.

func streamL(name string, proto gatewayv1.ProtocolType, port int32) gatewayv1.Listener {
	l := httpL(name, port, "")
	l.Protocol = proto
	return l
}

func tlsL(name string, port int32, host string, mode gatewayv1.TLSModeType, secrets ...gatewayv1.SecretObjectReference) gatewayv1.Listener {
	l := httpL(name, port, host)
	l.Protocol = gatewayv1.TLSProtocolType
	l.TLS = &gatewayv1.ListenerTLSConfig{Mode: ptr(mode), CertificateRefs: secrets}
	return l
}

func ref(name string, port int32, weight int32) gatewayv1.BackendRef {
	return gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name), Port: ptr(port)},
		Weight:                 ptr(weight),
	}
}

func toGateway(section string) []gatewayv1.ParentReference {
	p := gatewayv1.ParentReference{Name: "gw", Namespace: ptr(gatewayv1.Namespace(infraNS))}
	if section != "" {
		p.SectionName = ptr(gatewayv1.SectionName(section))
	}
	return []gatewayv1.ParentReference{p}
}

func routeMeta(name string, created int64) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: appNS, Name: name, Generation: 2, CreationTimestamp: metav1.Unix(created, 0)}
}

func tcpRoute(name string, created int64, section string, refs ...gatewayv1.BackendRef) *gatewayv1.TCPRoute {
	return &gatewayv1.TCPRoute{ObjectMeta: routeMeta(name, created), Spec: gatewayv1.TCPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: toGateway(section)},
		Rules:           []gatewayv1.TCPRouteRule{{BackendRefs: refs}}}}
}

func udpRoute(name string, created int64, section string, refs ...gatewayv1.BackendRef) *gatewayv1.UDPRoute {
	return &gatewayv1.UDPRoute{ObjectMeta: routeMeta(name, created), Spec: gatewayv1.UDPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: toGateway(section)},
		Rules:           []gatewayv1.UDPRouteRule{{BackendRefs: refs}}}}
}

func tlsRoute(name string, created int64, section string, hosts []string, refs ...gatewayv1.BackendRef) *gatewayv1.TLSRoute {
	r := &gatewayv1.TLSRoute{ObjectMeta: routeMeta(name, created), Spec: gatewayv1.TLSRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: toGateway(section)},
		Rules:           []gatewayv1.TLSRouteRule{{BackendRefs: refs}}}}
	for _, h := range hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gatewayv1.Hostname(h))
	}
	return r
}

// udpService is service with a UDP port 53 -> container port dns 5353
// next to its TCP port 80.
func udpService(ns, name string) *corev1.Service {
	s := service(ns, name)
	s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP,
		TargetPort: intstr.FromString("dns")})
	return s
}

// udpPod is pod with a UDP container port dns 5353 that npl-agent mapped
// to nodePort+1 (protocol udp in the annotation).
func udpPod(ns, app, name, nodeIP string, nodePort int) *corev1.Pod {
	p := pod(ns, app, name, nodeIP, nodePort)
	p.Annotations[contract.PodKey] = fmt.Sprintf(
		`[{"podPort":8080,"nodeIP":%q,"nodePort":%d,"protocol":"tcp","ipFamily":"IPv4"},{"podPort":5353,"nodeIP":%q,"nodePort":%d,"protocol":"udp","ipFamily":"IPv4"}]`,
		nodeIP, nodePort, nodeIP, nodePort+1)
	p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP})
	return p
}

// parentCond is the condition typ of the route's only parent status.
func parentCond(t *testing.T, res Result, kind, name, typ string) metav1.Condition {
	t.Helper()
	for _, r := range res.Routes {
		if r.Kind == kind && r.Name == name {
			if len(r.Parents) != 1 {
				t.Fatalf("%s %s: %d parents", kind, name, len(r.Parents))
			}
			return cond(r.Parents[0].Conditions, typ)
		}
	}
	t.Fatalf("%s %s: no status", kind, name)
	return metav1.Condition{}
}

func listenerResult(t *testing.T, res Result, name string) ListenerResult {
	t.Helper()
	for _, l := range res.Listeners {
		if string(l.Status.Name) == name {
			return l
		}
	}
	t.Fatalf("no listener %s", name)
	return ListenerResult{}
}
