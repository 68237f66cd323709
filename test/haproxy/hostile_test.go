package haproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// What a namespace user can do, through the objects npl-lbsync serves, to
// the tenants it shares the edge's load balancers with: each test is one
// attack of the security review (docs/design.md, Tenant isolation), with
// real requests through the VIP.

// hostileLBSync starts, on the cluster bed, npl-lbsync name with config
// added to its configuration and the chart's grants for values, and
// returns the bed and the clients (the Gateway API's installed when
// gatewayAPI).
func hostileLBSync(t *testing.T, name, config string, values map[string]any, gatewayAPI bool) (*cluster.Cluster, *edgebed.Bed,
	kubernetes.Interface, gatewayclient.Interface) {
	t.Helper()
	c, b := clusterBed(t)
	ctx := context.Background()
	if gatewayAPI {
		if err := c.InstallGatewayAPI(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(values) > 0 {
		if err := stack.GrantChartValues(ctx, c, values); err != nil {
			t.Fatal(err)
		}
	}
	extraConfig = config
	startLBSync(t, c, b, name)
	extraConfig = ""
	gc, err := gatewayclient.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c, b, c.Client(), gc
}

// tenantApp runs app (a Deployment of the test server and its Service on
// port 80) in ns.
func tenantApp(t *testing.T, client kubernetes.Interface, ns, app string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, webDeployment(ns, app, replicas), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": app},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}}}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ingressClass creates an IngressClass of npl-lbsync's for the test.
func ingressClass(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}
	if _, err := client.NetworkingV1().IngressClasses().Create(context.Background(), ic, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.NetworkingV1().IngressClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// ingressOf is an Ingress of class with the paths path -> service per host.
func ingressOf(ns, name, class string, hosts map[string]map[string]string, tls ...networkingv1.IngressTLS) *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.IngressSpec{IngressClassName: &class, TLS: tls}}
	for _, host := range slices.Sorted(maps.Keys(hosts)) {
		r := networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
		for _, path := range slices.Sorted(maps.Keys(hosts[host])) {
			r.HTTP.Paths = append(r.HTTP.Paths, networkingv1.HTTPIngressPath{Path: path, PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: hosts[host][path], Port: networkingv1.ServiceBackendPort{Number: 80}}}})
		}
		ing.Spec.Rules = append(ing.Spec.Rules, r)
	}
	return ing
}

// tlsSecret creates a kubernetes.io/tls Secret for host in ns and returns
// its certificate, PEM.
func tlsSecret(t *testing.T, client kubernetes.Interface, ns, name, host string) []byte {
	t.Helper()
	certPEM, keyPEM := certFor(t, host)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
	if _, err := client.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return certPEM
}

// ingressVIP waits for the Ingress's VIP in its status.
func ingressVIP(t *testing.T, client kubernetes.Interface, ns, name string) string {
	t.Helper()
	var vip string
	waitForCond(t, 90*time.Second, "the VIP of ingress "+ns+"/"+name, func() (bool, error) {
		i, err := client.NetworkingV1().Ingresses(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || len(i.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		vip = i.Status.LoadBalancer.Ingress[0].IP
		return true, nil
	})
	return vip
}

// sniGet opens a TLS connection to addr from the client namespace with
// server name host, as `openssl s_client -servername` does, and returns
// the certificate the VIP served (DER) and who answered GET path there.
func sniGet(ctx context.Context, b *edgebed.Bed, addr, host, path string) (cert []byte, backend string, err error) {
	conn, err := b.ClientDial(ctx, "tcp", addr, 3*time.Second)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(conn, &tls.Config{ServerName: host, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12, //nolint:gosec // the test reads which certificate is served.
		NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, "", err
	}
	cert = tc.ConnectionState().PeerCertificates[0].Raw
	if _, err := io.WriteString(tc, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n"); err != nil {
		return cert, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return cert, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return cert, "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return cert, strings.TrimSpace(string(body)), nil
}

// derOf is the DER of the first certificate of certPEM.
func derOf(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	return block.Bytes
}

// warningEvent waits for a Warning Event of reason on the object of kind
// and name in ns whose message holds want.
func warningEvent(t *testing.T, client kubernetes.Interface, ns, kind, name, reason, want string) {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason}.String()
	waitForCond(t, 30*time.Second, fmt.Sprintf("a %s Event on %s %s/%s saying %q", reason, kind, ns, name, want), func() (bool, error) {
		evs, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestHostile_aStolenHostAndCertificate: on the shared-VIP Ingress, a
// tenant creates, after the shop's Ingress for shop.example, one of its own
// that routes shop.example/login to its Pods and gives shop.example a
// certificate from a Secret whose name sorts first. A client that asks the
// VIP for shop.example (SNI, as `openssl s_client -servername`) gets the
// shop's certificate, and its /login reaches the shop's Pod; the tenant's
// own host works, and its Ingress says what was refused.
func TestHostile_aStolenHostAndCertificate(t *testing.T) {
	const class = "npl-hostile-tls"
	c, b, client, _ := hostileLBSync(t, "hostile-tls", "ingressClass: "+class+"\ningressSharedVIP: true\n",
		map[string]any{"ingressClass.readTLSSecrets": true}, false)
	ctx := context.Background()
	ingressClass(t, client, class)
	// The attacker's namespace sorts first: the certificates of the shared
	// listener were sorted by namespace/name, the first one HAProxy's
	// choice for a name two of them hold.
	suffix := strconv.FormatInt(time.Now().UnixNano()%100000, 10)
	shop, evil := "hostile-z-shop-"+suffix, "hostile-a-evil-"+suffix
	for _, ns := range []string{shop, evil} {
		if _, err := c.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	tenantApp(t, client, shop, "shop", 1)
	tenantApp(t, client, evil, "evil", 1)
	shopCert := tlsSecret(t, client, shop, "shop-tls", "shop.example")
	tlsSecret(t, client, evil, "aaa", "shop.example")
	tlsSecret(t, client, evil, "evil-tls", "evil.example")
	if _, err := client.NetworkingV1().Ingresses(shop).Create(ctx, ingressOf(shop, "shop", class,
		map[string]map[string]string{"shop.example": {"/": "shop"}},
		networkingv1.IngressTLS{Hosts: []string{"shop.example"}, SecretName: "shop-tls"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip := ingressVIP(t, client, shop, "shop")
	time.Sleep(1100 * time.Millisecond) // a later creationTimestamp (seconds)
	if _, err := client.NetworkingV1().Ingresses(evil).Create(ctx, ingressOf(evil, "steal", class,
		map[string]map[string]string{"shop.example": {"/login": "evil"}, "evil.example": {"/": "evil"}},
		networkingv1.IngressTLS{Hosts: []string{"shop.example"}, SecretName: "aaa"},
		networkingv1.IngressTLS{Hosts: []string{"evil.example"}, SecretName: "evil-tls"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := ingressVIP(t, client, evil, "steal"); got != vip {
		t.Fatalf("the second Ingress got VIP %s, want the shared %s", got, vip)
	}
	https := net.JoinHostPort(vip, "443")
	hc := b.ClientHTTP(3 * time.Second)
	waitForCond(t, 60*time.Second, "evil.example served over HTTP and HTTPS by its own Pod", func() (bool, error) {
		got, err := getHost(ctx, hc, edgebed.URL(vip, 80), "evil.example", "/")
		if err != nil || !strings.HasPrefix(got, "evil-") {
			return false, fmt.Errorf("http: %q, %v", got, err)
		}
		_, got, err = sniGet(ctx, b, https, "evil.example", "/")
		return err == nil && strings.HasPrefix(got, "evil-"), err
	})
	want := derOf(t, shopCert)
	for range 10 {
		cert, got, err := sniGet(ctx, b, https, "shop.example", "/login")
		if err != nil {
			t.Fatalf("https://shop.example/login: %v", err)
		}
		if !bytes.Equal(cert, want) {
			t.Fatalf("SNI shop.example got another certificate than the shop's")
		}
		if !strings.HasPrefix(got, "shop-") {
			t.Fatalf("https://shop.example/login answered by %s, want the shop's Pod", got)
		}
		if got, err := getHost(ctx, hc, edgebed.URL(vip, 80), "shop.example", "/login"); err != nil || !strings.HasPrefix(got, "shop-") {
			t.Fatalf("http://shop.example/login answered by %q (%v), want the shop's Pod", got, err)
		}
	}
	warningEvent(t, client, evil, "Ingress", "steal", "InvalidIngress", "host shop.example ignored: namespace "+shop+" owns it")
	warningEvent(t, client, evil, "Ingress", "steal", "InvalidIngress", "TLS host shop.example is not served over HTTPS with Secret "+evil+"/aaa")
}

// TestHostile_theUnspecifiedAndLoopbackVIPsAreNeverServed: even with an
// operator's allowedVIPs that holds every address, a Service that asks for
// 0.0.0.0 (HAProxy bound it as every address of the edge) or 127.0.0.1 is
// refused: its condition says why, and the edge serves nothing for it.
func TestHostile_theUnspecifiedAndLoopbackVIPsAreNeverServed(t *testing.T) {
	const name = "hostile-vip"
	c, b, client, _ := hostileLBSync(t, name, "allowedVIPs: [\"0.0.0.0/0\"]\n", nil, false)
	ctx := context.Background()
	ns := c.TestNamespace(t)
	tenantApp(t, client, ns, "web", 1)
	class := "npl.io/" + name
	for _, vip := range []string{"0.0.0.0", "127.0.0.1"} {
		svcName := "vip-" + strings.ReplaceAll(vip, ".", "-")
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns,
			Annotations: map[string]string{contract.LoadBalancerIPKey: vip}}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}}}
		if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForCond(t, 60*time.Second, svcName+"'s condition False InvalidModel", func() (bool, error) {
			s, err := client.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, cond := range s.Status.Conditions {
				if cond.Type == contract.SyncedConditionType && cond.Status == metav1.ConditionFalse && cond.Reason == "InvalidModel" &&
					(strings.Contains(cond.Message, vip+" is the unspecified address") || strings.Contains(cond.Message, vip+" is a loopback address")) {
					return true, nil
				}
			}
			return false, nil
		})
	}
	p, err := b.OpenProvider(ctx, name, b.ProviderSection(name))
	if err != nil {
		t.Fatal(err)
	}
	lbs, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, lb := range lbs {
		if strings.Contains(lb.Name, "vip-") {
			t.Errorf("the edge serves %s on %v", lb.Name, lb.VIPs)
		}
	}
}

// hostileGateway is a Gateway of its own class in ns infra with a listener
// on port 80 without a hostname that takes routes from every namespace,
// and its VIP.
func hostileGateway(t *testing.T, c *cluster.Cluster, gc gatewayclient.Interface, infra string) string {
	t.Helper()
	ctx := context.Background()
	gw1 := gc.GatewayV1()
	className := "npl-" + infra
	if _, err := gw1.GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw1.GatewayClasses().Delete(context.Background(), className, metav1.DeleteOptions{}) })
	all := gatewayv1.NamespacesFromAll
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: infra, Name: "shared"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(className),
		Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType,
			AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &all}}}}}}
	if _, err := gw1.Gateways(infra).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip string
	waitForCond(t, 90*time.Second, "the Gateway's VIP", func() (bool, error) {
		g, err := gw1.Gateways(infra).Get(ctx, "shared", metav1.GetOptions{})
		if err != nil || len(g.Status.Addresses) == 0 {
			return false, err
		}
		vip = g.Status.Addresses[0].Value
		return true, nil
	})
	return vip
}

// httpRoute is an HTTPRoute of ns on the shared Gateway of infra for host
// whose rules' matches send to svc.
func httpRoute(ns, name, infra, host, svc string, matches ...gatewayv1.HTTPRouteMatch) *gatewayv1.HTTPRoute {
	port := gatewayv1.PortNumber(80)
	gwNS := gatewayv1.Namespace(infra)
	return &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "shared", Namespace: &gwNS}}},
		Hostnames:       []gatewayv1.Hostname{gatewayv1.Hostname(host)},
		Rules: []gatewayv1.HTTPRouteRule{{Matches: matches, BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: &port}}}}}},
	}}
}

// regexPath is a RegularExpression path match.
func regexPath(p string) gatewayv1.HTTPRouteMatch {
	t := gatewayv1.PathMatchRegularExpression
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: &t, Value: &p}}
}

// routeAccepted waits for the route's Accepted condition of status.
func routeAccepted(t *testing.T, gc gatewayclient.Interface, ns, name string, status metav1.ConditionStatus, want string) {
	t.Helper()
	waitForCond(t, 60*time.Second, fmt.Sprintf("httproute %s/%s Accepted %s saying %q", ns, name, status, want), func() (bool, error) {
		r, err := gc.GatewayV1().HTTPRoutes(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range r.Status.Parents {
			for _, cond := range p.Conditions {
				if cond.Type == string(gatewayv1.RouteConditionAccepted) && cond.Status == status && strings.Contains(cond.Message, want) {
					return true, nil
				}
			}
		}
		return false, nil
	})
}

// scaleServed scales the Deployment app of ns and waits until requests for
// host through each URL are answered by exactly its ready Pods: its
// members changed on every load balancer that serves it.
func scaleServed(t *testing.T, client kubernetes.Interface, b *edgebed.Bed, ns, app, host string, replicas int32, urls ...string) {
	t.Helper()
	ctx := context.Background()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := client.AppsV1().Deployments(ns).Patch(ctx, app, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	hc := b.ClientHTTP(3 * time.Second)
	waitForCond(t, 60*time.Second, fmt.Sprintf("requests for %s reach exactly the %d ready Pods of %s through %v", host, replicas, app, urls), func() (bool, error) {
		pods, err := readyPods(ctx, client, ns, app)
		if err != nil || len(pods) != int(replicas) {
			return false, err
		}
		for _, url := range urls {
			seen := map[string]bool{}
			for range 6 * replicas {
				got, err := getHost(ctx, hc, url, host, "/")
				if err != nil {
					return false, fmt.Errorf("%s: %w", url, err)
				}
				seen[strings.TrimSpace(got)] = true
			}
			if got := slices.Sorted(maps.Keys(seen)); !slices.Equal(got, pods) {
				return false, fmt.Errorf("%s answered by %v, ready Pods %v", url, got, pods)
			}
		}
		return true, nil
	})
}

// TestHostile_badObjectsStopOnlyThemselves: a tenant's Ingress with a
// control character in a path (the API server accepts it) on the shared
// VIP, and its HTTPRoutes on a shared Gateway with a regular expression Go
// accepts and HAProxy's PCRE2 refuses (\Q, \x{100}) and a catastrophic one
// ((a|aa)+), while another tenant scales its Deployment: the other
// tenant's members change on both load balancers within the usual time,
// and each bad object is refused alone and says why.
func TestHostile_badObjectsStopOnlyThemselves(t *testing.T) {
	const class = "npl-hostile-bad"
	c, b, client, gc := hostileLBSync(t, "hostile-bad", "ingressClass: "+class+"\ningressSharedVIP: true\ngatewayAPI: {enabled: true}\n",
		map[string]any{"gatewayAPI.enabled": true}, true)
	ctx := context.Background()
	ingressClass(t, client, class)
	infra, shop, evil := c.TestNamespace(t), c.TestNamespace(t), c.TestNamespace(t)
	tenantApp(t, client, shop, "shop", 1)
	tenantApp(t, client, evil, "evil", 1)
	gwVIP := hostileGateway(t, c, gc, infra)
	if _, err := client.NetworkingV1().Ingresses(shop).Create(ctx, ingressOf(shop, "shop", class,
		map[string]map[string]string{"shop.example": {"/": "shop"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.GatewayV1().HTTPRoutes(shop).Create(ctx, httpRoute(shop, "shop", infra, "shop.example", "shop"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ingVIP := ingressVIP(t, client, shop, "shop")
	urls := []string{edgebed.URL(ingVIP, 80), edgebed.URL(gwVIP, 80)}
	scaleServed(t, client, b, shop, "shop", "shop.example", 1, urls...)

	if _, err := client.NetworkingV1().Ingresses(evil).Create(ctx, ingressOf(evil, "ctl", class,
		map[string]map[string]string{"evil.example": {"/x\x7f": "evil", "/ok": "evil"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, expr := range map[string]string{"quote": `/x\Qfoo`, "wide": `/\x{100}`, "slow": `/(a|aa)+`} {
		if _, err := gc.GatewayV1().HTTPRoutes(evil).Create(ctx, httpRoute(evil, name, infra, "evil.example", "evil", regexPath(expr)),
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scaleServed(t, client, b, shop, "shop", "shop.example", 3, urls...)
	for _, name := range []string{"quote", "wide", "slow"} {
		routeAccepted(t, gc, evil, name, metav1.ConditionFalse, "regular expression")
	}
	warningEvent(t, client, evil, "Ingress", "ctl", "InvalidIngress", `path "/x\x7f" of host "evil.example" (Prefix) ignored`)
	hc := b.ClientHTTP(3 * time.Second)
	if got, err := getHost(ctx, hc, urls[0], "evil.example", "/ok"); err != nil || !strings.HasPrefix(got, "evil-") {
		t.Errorf("the bad Ingress's other path: %q, %v; want its Pod", got, err)
	}
}

// TestHostile_anOversizeRouteStopsOnlyItself: a tenant's HTTPRoute of
// about 1.3 MB (128 matches with long header values, 16 hostnames: 2048
// rules of the model, some 20 MB for the edge, which cuts requests at
// 8 MiB) on a shared Gateway is refused alone, with a TooLarge Event, and
// another tenant's route keeps updating.
func TestHostile_anOversizeRouteStopsOnlyItself(t *testing.T) {
	c, b, client, gc := hostileLBSync(t, "hostile-size", "gatewayAPI: {enabled: true}\n", map[string]any{"gatewayAPI.enabled": true}, true)
	ctx := context.Background()
	infra, shop, evil := c.TestNamespace(t), c.TestNamespace(t), c.TestNamespace(t)
	tenantApp(t, client, shop, "shop", 1)
	tenantApp(t, client, evil, "evil", 1)
	gwVIP := hostileGateway(t, c, gc, infra)
	if _, err := gc.GatewayV1().HTTPRoutes(shop).Create(ctx, httpRoute(shop, "shop", infra, "shop.example", "shop"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	url := edgebed.URL(gwVIP, 80)
	scaleServed(t, client, b, shop, "shop", "shop.example", 1, url)

	big := httpRoute(evil, "big", infra, "h0.example", "evil")
	for i := 1; i < 16; i++ {
		big.Spec.Hostnames = append(big.Spec.Hostnames, gatewayv1.Hostname(fmt.Sprintf("h%d.example", i)))
	}
	for r := range 16 {
		rule := gatewayv1.HTTPRouteRule{BackendRefs: big.Spec.Rules[0].BackendRefs}
		for m := range 8 {
			path := fmt.Sprintf("/r%d/m%d", r, m)
			exact := gatewayv1.PathMatchExact
			match := gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: &path}}
			for h := range 16 {
				match.Headers = append(match.Headers, gatewayv1.HTTPHeaderMatch{Name: gatewayv1.HTTPHeaderName(fmt.Sprintf("x-h%d", h)),
					Value: strings.Repeat("v", 600)})
			}
			rule.Matches = append(rule.Matches, match)
		}
		big.Spec.Rules = append(big.Spec.Rules, rule)
	}
	big.Spec.Rules = big.Spec.Rules[1:]
	if _, err := gc.GatewayV1().HTTPRoutes(evil).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	routeAccepted(t, gc, evil, "big", metav1.ConditionFalse, fmt.Sprintf("more than %d", lbmodel.MaxObjectRules))
	scaleServed(t, client, b, shop, "shop", "shop.example", 2, url)
	warningEvent(t, client, evil, "HTTPRoute", "big", gateway.ReasonTooLarge, "rules to the Gateway's model")
}
