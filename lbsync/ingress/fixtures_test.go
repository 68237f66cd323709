package ingress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

// Fixtures: Ingresses of namespace shop in cluster c1, Services selecting
// app=<name> with one port 80 -> 8080 named http, and Ready Pods that
// npl-agent annotated, so each case states only what matters to it.

const (
	testCluster = "c1"
	testNS      = "shop"
)

type ingMod func(*networkingv1.Ingress)

func ingress(name string, mods ...ingMod) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}}
	for _, m := range mods {
		m(ing)
	}
	return ing
}

func inNS(ns string) ingMod { return func(i *networkingv1.Ingress) { i.Namespace = ns } }

func createdAt(sec int64) ingMod {
	return func(i *networkingv1.Ingress) { i.CreationTimestamp = metav1.Unix(sec, 0) }
}

func className(c string) ingMod {
	return func(i *networkingv1.Ingress) { i.Spec.IngressClassName = &c }
}

func annotated(k, v string) ingMod {
	return func(i *networkingv1.Ingress) {
		if i.Annotations == nil {
			i.Annotations = map[string]string{}
		}
		i.Annotations[k] = v
	}
}

// backend is a Service backend; port is an int (number) or a string (name).
func backend(svc string, port any) networkingv1.IngressBackend {
	b := networkingv1.IngressServiceBackend{Name: svc}
	switch p := port.(type) {
	case int:
		b.Port.Number = int32(p)
	case string:
		b.Port.Name = p
	}
	return networkingv1.IngressBackend{Service: &b}
}

func defaultBackend(b networkingv1.IngressBackend) ingMod {
	return func(i *networkingv1.Ingress) { i.Spec.DefaultBackend = &b }
}

type pathSpec struct {
	path string
	typ  networkingv1.PathType
	be   networkingv1.IngressBackend
}

func exact(path string, be networkingv1.IngressBackend) pathSpec {
	return pathSpec{path, networkingv1.PathTypeExact, be}
}

func prefix(path string, be networkingv1.IngressBackend) pathSpec {
	return pathSpec{path, networkingv1.PathTypePrefix, be}
}

func implSpecific(path string, be networkingv1.IngressBackend) pathSpec {
	return pathSpec{path, networkingv1.PathTypeImplementationSpecific, be}
}

func rule(host string, paths ...pathSpec) ingMod {
	return func(i *networkingv1.Ingress) {
		r := networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
		for _, p := range paths {
			typ := p.typ
			r.HTTP.Paths = append(r.HTTP.Paths, networkingv1.HTTPIngressPath{Path: p.path, PathType: &typ, Backend: p.be})
		}
		i.Spec.Rules = append(i.Spec.Rules, r)
	}
}

func tlsFor(secret string, hosts ...string) ingMod {
	return func(i *networkingv1.Ingress) {
		i.Spec.TLS = append(i.Spec.TLS, networkingv1.IngressTLS{Hosts: hosts, SecretName: secret})
	}
}

type svcMod func(*corev1.Service)

// service is a ClusterIP Service of shop selecting app=<name>, with port
// 80 (named http) to the container port named http.
func service(name string, mods ...svcMod) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromString("http")}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func svcNS(ns string) svcMod { return func(s *corev1.Service) { s.Namespace = ns } }

func svcType(t corev1.ServiceType) svcMod { return func(s *corev1.Service) { s.Spec.Type = t } }

func nodePort(np int32) svcMod { return func(s *corev1.Service) { s.Spec.Ports[0].NodePort = np } }

func udpPort(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolUDP }

// pod is a Ready Pod of app in shop with container port http 8080 that
// npl-agent mapped to nodeIP:nodePort.
func pod(app, name, nodeIP string, nodePortNum int, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: map[string]string{"app": app},
			Annotations: map[string]string{contract.PodKey: fmt.Sprintf(
				`[{"podPort":8080,"nodeIP":%q,"nodePort":%d,"protocol":"tcp","ipFamily":"IPv4"}]`, nodeIP, nodePortNum)}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.1.10",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func podNS(ns string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Namespace = ns } }

func node(name, ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		},
	}
}

// testCert is a self-signed certificate and its key, PEM encoded.
type testCert struct {
	certPEM, keyPEM []byte
}

func newCert(t testing.TB, host string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return testCert{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

func (c testCert) secret(ns, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: c.certPEM, corev1.TLSPrivateKeyKey: c.keyPEM},
	}
}

func (c testCert) model(secret string, hosts ...string) lbmodel.TLSCert {
	return lbmodel.TLSCert{Secret: secret, Hosts: hosts, Fingerprint: lbmodel.CertFingerprint(c.certPEM),
		CertPEM: c.certPEM, KeyPEM: c.keyPEM}
}

func up(ip string, port int32) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: true}
}

// lbName is the name of the load balancer of Ingress shop/<ing>.
func lbName(ing string) string { return lbmodel.IngressLoadBalancerName(testCluster, testNS, ing) }

// poolOf is the name of the pool of Service port <svc>:<port> in the load
// balancer lb.
func poolOf(lb, svc string, port int) string {
	ns, name, found := strings.Cut(svc, "/")
	if !found {
		ns, name = testNS, svc
	}
	return lbmodel.IngressPoolName(lb, ns, name, fmt.Sprint(port))
}

func pool(name string, members ...lbmodel.Member) lbmodel.Pool {
	if members == nil {
		members = []lbmodel.Member{}
	}
	return lbmodel.Pool{Name: name, Members: members}
}

var (
	httpListener  = lbmodel.Listener{Port: 80, Protocol: lbmodel.HTTP}
	httpsListener = lbmodel.Listener{Port: 443, Protocol: lbmodel.HTTPS}
)

// handSlice is a hand-written EndpointSlice of Service svc of shop whose
// endpoints name pods by targetRef.
func handSlice(svc string, pods ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: svc + "-manual",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.19.1.10"},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: testNS, Name: p}})
	}
	return s
}
