package gateway

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayv1client "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/typed/apis/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestLBSync_gatewayAPI: an npl-lbsync with gatewayAPI enabled, as the
// chart's ServiceAccount with the chart's gatewayAPI grants, serves a
// Gateway with an HTTP and an HTTPS listener and its HTTPRoutes on the mock:
// exactly the expected rules, weighted pools of the Pods' nodeIP:nodePort
// and certificate; it writes the GatewayClass, Gateway (VIP) and route
// statuses; invalid neighbours do not remove valid routes; a route deleted
// and the Gateway deleted are cleaned up, and the backends' opt-in goes.
func TestLBSync_gatewayAPI(t *testing.T) {
	e := setup(t)
	ctx := lbsyncbed.Context(t, 4*time.Minute)
	if err := e.Cluster.InstallGatewayAPI(ctx); err != nil {
		t.Fatalf("install the Gateway API CRDs: %v", err)
	}
	if err := stack.GrantChartValues(ctx, e.Cluster, map[string]any{"gatewayAPI.enabled": true, "gatewayAPI.readTLSSecrets": true}); err != nil {
		t.Fatal(err)
	}
	name := lbsyncbed.ClusterName + "-gw"
	cfg := e.Config(name, "NodePortLocal", "npl.io/gw", "198.18.110.0/28") + "gatewayAPI:\n  enabled: true\n"
	l := e.StartSyncer(t, "npl-lbsync-gw", name, cfg, false)
	gc, err := gatewayclient.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	gw1 := gc.GatewayV1()
	ns := e.Namespace(t)

	className := "npl-" + ns
	class := &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}
	if _, err := gw1.GatewayClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw1.GatewayClasses().Delete(context.Background(), className, metav1.DeleteOptions{}) })

	// Backends: Service a (one Pod on node 0), b (one Pod on node 1).
	for i, app := range []string{"a", "b"} {
		e.Pod(t, ns, app+"-1", e.NodeName(i), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(i), 61000+i, "tcp")), func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": app}
		})
		e.CreateService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		}})
	}
	certPEM, keyPEM := selfSigned(t, "*.example.com")
	if _, err := e.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tls"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wildcard := gatewayv1.Hostname("*.example.com")
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(className),
		Listeners: []gatewayv1.Listener{
			{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
			{Name: "https", Port: 443, Protocol: gatewayv1.HTTPSProtocolType, Hostname: &wildcard,
				TLS: &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "tls"}}}},
		},
	}}
	if _, err := gw1.Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exact, prefix := gatewayv1.PathMatchExact, gatewayv1.PathMatchPathPrefix
	match := func(typ gatewayv1.PathMatchType, path string) []gatewayv1.HTTPRouteMatch {
		return []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &typ, Value: &path}}}
	}
	ref := func(svc string, weight int32) gatewayv1.HTTPBackendRef {
		port := gatewayv1.PortNumber(80)
		return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: &port}, Weight: &weight}}
	}
	route := func(name string, parent gatewayv1.ParentReference, hostnames []gatewayv1.Hostname, rules ...gatewayv1.HTTPRouteRule) {
		t.Helper()
		r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{parent}},
			Hostnames:       hostnames, Rules: rules}}
		if _, err := gw1.HTTPRoutes(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	toGW := gatewayv1.ParentReference{Name: "gw"}
	route("r1", toGW, []gatewayv1.Hostname{"shop.example.com"},
		gatewayv1.HTTPRouteRule{Matches: match(exact, "/a"), BackendRefs: []gatewayv1.HTTPBackendRef{ref("a", 1)}},
		gatewayv1.HTTPRouteRule{Matches: match(prefix, "/b/"), BackendRefs: []gatewayv1.HTTPBackendRef{ref("a", 3), ref("b", 1)}})
	// Invalid neighbours: a missing backend (its rule answers 500), a
	// parentRef to no listener (not attached).
	route("r2", toGW, nil, gatewayv1.HTTPRouteRule{Matches: match(prefix, "/x"), BackendRefs: []gatewayv1.HTTPBackendRef{ref("nope", 1)}})
	section := gatewayv1.SectionName("nope")
	route("r3", gatewayv1.ParentReference{Name: "gw", SectionName: &section}, nil,
		gatewayv1.HTTPRouteRule{Matches: match(prefix, "/y"), BackendRefs: []gatewayv1.HTTPBackendRef{ref("c", 1)}})

	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	pool := func(route string, rule int) string { return lbmodel.GatewayPoolName(lbName, ns, route, rule) }
	ip0, ip1 := e.NodeIP(0), e.NodeIP(1)
	wantPools := []lbmodel.Pool{
		{Name: pool("r1", 0), Members: []lbmodel.Member{{IP: ip0, Port: 61000, Enabled: true}}},
		{Name: pool("r1", 1), Members: []lbmodel.Member{{IP: ip0, Port: 61000, Enabled: true, Weight: 256}, {IP: ip1, Port: 61001, Enabled: true, Weight: 85}}},
	}
	r1Rules := []lbmodel.Rule{
		{Host: "shop.example.com", Path: "/a", PathType: lbmodel.PathExact, Pool: pool("r1", 0), Ports: []int32{80, 443}, Order: 0},
		{Host: "shop.example.com", Path: "/b", PathType: lbmodel.PathPrefix, Pool: pool("r1", 1), Ports: []int32{80, 443}, Order: 1},
	}
	r2Rules := []lbmodel.Rule{
		{Host: "*.example.com", Path: "/x", PathType: lbmodel.PathPrefix, FixedStatus: 500, Ports: []int32{443}, Order: 2},
		{Path: "/x", PathType: lbmodel.PathPrefix, FixedStatus: 500, Ports: []int32{80}, Order: 2},
	}
	lb := waitModel(t, l, lbName, wantPools, slices.Concat(r1Rules, r2Rules))
	if len(lb.VIPs) != 1 {
		t.Fatalf("VIPs %v", lb.VIPs)
	}
	wantListeners := []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 443, Protocol: lbmodel.HTTPS}}
	if d := gocmp.Diff(wantListeners, lb.Listeners, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("listeners (-want +got):\n%s", d)
	}
	if len(lb.HTTP.TLS) != 1 || lb.HTTP.TLS[0].Secret != ns+"/tls" || !slices.Equal(lb.HTTP.TLS[0].Ports, []int32{443}) ||
		lb.HTTP.TLS[0].Fingerprint != lbmodel.CertFingerprint(certPEM) {
		t.Errorf("certificates %v", lb.HTTP.TLS)
	}

	// Statuses.
	lbsyncbed.WaitFor(t, 30*time.Second, "the GatewayClass status", func() (bool, error) {
		c, err := gw1.GatewayClasses().Get(ctx, className, metav1.GetOptions{})
		return err == nil && hasCond(c.Status.Conditions, "Accepted", metav1.ConditionTrue, "Accepted") &&
			len(c.Status.SupportedFeatures) == len(gateway.FeaturesFor("mock")), err
	})
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway status", func() (bool, error) {
		g, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(g.Status.Addresses) != 1 || g.Status.Addresses[0].Value != lb.VIPs[0] ||
			!hasCond(g.Status.Conditions, "Accepted", metav1.ConditionTrue, "Accepted") ||
			!hasCond(g.Status.Conditions, "Programmed", metav1.ConditionTrue, "Programmed") || len(g.Status.Listeners) != 2 {
			return false, fmt.Errorf("status %+v", g.Status)
		}
		for _, ls := range g.Status.Listeners {
			if ls.AttachedRoutes != 2 || !hasCond(ls.Conditions, "Programmed", metav1.ConditionTrue, "Programmed") ||
				!hasCond(ls.Conditions, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs") {
				return false, fmt.Errorf("listener %+v", ls)
			}
		}
		return true, nil
	})
	wantRoute := map[string][2]string{"r1": {"Accepted", "ResolvedRefs"}, "r2": {"Accepted", "BackendNotFound"}, "r3": {"NoMatchingParent", "BackendNotFound"}}
	for r, want := range wantRoute {
		lbsyncbed.WaitFor(t, 30*time.Second, "the status of route "+r, func() (bool, error) {
			rt, err := gw1.HTTPRoutes(ns).Get(ctx, r, metav1.GetOptions{})
			if err != nil || len(rt.Status.Parents) != 1 {
				return false, err
			}
			p := rt.Status.Parents[0]
			return p.ControllerName == gateway.ControllerName && p.ParentRef.Name == "gw" &&
				hasCond(p.Conditions, "Accepted", "", want[0]) && hasCond(p.Conditions, "ResolvedRefs", "", want[1]), fmt.Errorf("parents %+v", p)
		})
	}
	// The backends are opted in to NodePortLocal.
	for _, s := range []string{"a", "b"} {
		lbsyncbed.WaitFor(t, 20*time.Second, "the opt-in of "+s, func() (bool, error) {
			svc := e.Service(t, ns, s)
			return svc.Annotations[contract.ServiceEnabledKey] == "true" && svc.Annotations[contract.AutoAnnotatedKey] == "true", nil
		})
	}

	// A Gateway of another controller's class: no load balancer, no status.
	foreignClass := "other-" + ns
	if _, err := gw1.GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: foreignClass},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: "example.org/other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw1.GatewayClasses().Delete(context.Background(), foreignClass, metav1.DeleteOptions{}) })
	foreign := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "foreign"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(foreignClass),
		Listeners:        []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw1.Gateways(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.SyncedAfter(t, "services", ns, "a", l)
	if st, err := l.MockState(); err != nil {
		t.Fatal(err)
	} else if _, ok := stack.FindLoadBalancer(st, lbmodel.GatewayLoadBalancerName(name, ns, "foreign")); ok {
		t.Errorf("a load balancer for the Gateway of another controller")
	}
	if g, err := gw1.Gateways(ns).Get(ctx, "foreign", metav1.GetOptions{}); err != nil || len(g.Status.Listeners) != 0 || len(g.Status.Addresses) != 0 ||
		slices.ContainsFunc(g.Status.Conditions, func(c metav1.Condition) bool { return c.Reason == "Accepted" || c.Reason == "Programmed" }) {
		t.Errorf("the Gateway of another controller got a status: %+v (%v)", g.Status, err)
	}
	if c, err := gw1.GatewayClasses().Get(ctx, foreignClass, metav1.GetOptions{}); err != nil || len(c.Status.SupportedFeatures) != 0 {
		t.Errorf("the GatewayClass of another controller got a status: %+v (%v)", c.Status, err)
	}

	// nplctl pools shows the Gateway's pools, in sync, from the provider
	// with the configuration and from the Gateway's status without it; not
	// those of the other controller's Gateway. A member the provider lacks
	// is drift, and --check says which.
	type row struct {
		Owner, Pool, Protocol string
		Port                  int32
		State                 string
		Members               int
	}
	rows := func(r inspect.Report) []row {
		var out []row
		for _, p := range r.Pools {
			out = append(out, row{p.Service, p.Name, p.Protocol, p.Port, p.State, len(p.Expected)})
		}
		return out
	}
	owner := "gateway " + ns + "/gw"
	wantRows := []row{{owner, pool("r1", 0), "HTTP", 80, inspect.StateInSync, 1}, {owner, pool("r1", 1), "HTTP", 80, inspect.StateInSync, 2}}
	report, stderr, code := nplctlPools(t, "--kubeconfig", e.Cluster.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check")
	if d := gocmp.Diff(wantRows, rows(report)); d != "" || code != 0 {
		t.Errorf("nplctl pools --config --check: exit %d (-want +got):\n%s%s", code, d, stderr)
	}
	report, stderr, code = nplctlPools(t, "--kubeconfig", e.Cluster.Kubeconfig(), "-n", ns, "--check")
	if len(report.Pools) != 2 || code != 0 {
		t.Errorf("nplctl pools --check from the status: exit %d, %+v\n%s", code, report.Pools, stderr)
	}
	for _, p := range report.Pools {
		if p.Service != owner || p.State != inspect.StateInSync || !slices.Equal(p.VIPs, lb.VIPs) {
			t.Errorf("pool from the Gateway's status: %+v, want %s in-sync with VIPs %v", p, owner, lb.VIPs)
		}
	}
	stateFile := filepath.Join(e.StateDir, "npl-io-gw.json")
	drifted := filepath.Join(t.TempDir(), "drifted.json")
	dropMember(t, stateFile, drifted, pool("r1", 1))
	driftCfg := filepath.Join(t.TempDir(), "lbsync.yaml")
	if !strings.Contains(cfg, stateFile) {
		t.Fatalf("the configuration does not name the state file %s:\n%s", stateFile, cfg)
	}
	if err := os.WriteFile(driftCfg, []byte(strings.Replace(cfg, stateFile, drifted, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	report, stderr, code = nplctlPools(t, "--kubeconfig", e.Cluster.Kubeconfig(), "--config", driftCfg, "-n", ns, "--check")
	wantRows[1].State = inspect.StateDrift
	if d := gocmp.Diff(wantRows, rows(report)); d != "" || code != 1 || !strings.Contains(stderr, owner+" "+pool("r1", 1)+": drift; missing ") {
		t.Errorf("nplctl pools --check with a member gone: exit %d, want 1 (-want +got):\n%s%s", code, d, stderr)
	}

	// r2 deleted: its rules go, r1's stay.
	if err := gw1.HTTPRoutes(ns).Delete(ctx, "r2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitModel(t, l, lbName, wantPools, r1Rules)

	// r1 deleted: no rule, no pool; the backends lose the opt-in we added.
	if err := gw1.HTTPRoutes(ns).Delete(ctx, "r1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitModel(t, l, lbName, nil, nil)
	for _, s := range []string{"a", "b"} {
		lbsyncbed.WaitFor(t, 20*time.Second, "the opt-in of "+s+" removed", func() (bool, error) {
			svc := e.Service(t, ns, s)
			_, on := svc.Annotations[contract.ServiceEnabledKey]
			return !on, nil
		})
	}

	// The Gateway deleted: its load balancer goes, and our status on r3.
	if err := gw1.Gateways(ns).Delete(ctx, "gw", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway's load balancer deleted", func() (bool, error) {
		st, err := l.MockState()
		if err != nil {
			return false, err
		}
		_, ok := stack.FindLoadBalancer(st, lbName)
		return !ok, nil
	})
	lbsyncbed.WaitFor(t, 30*time.Second, "route r3 without our parent status", func() (bool, error) {
		rt, err := gw1.HTTPRoutes(ns).Get(ctx, "r3", metav1.GetOptions{})
		return err == nil && len(rt.Status.Parents) == 0, err
	})
	if _, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Gateway is still there: %v", err)
	}
}

// waitModel waits until the mock holds exactly the pools and rules for the
// load balancer, and returns it.
func waitModel(t *testing.T, l *lbsyncbed.Syncer, lbName string, pools []lbmodel.Pool, rules []lbmodel.Rule) lbmodel.LoadBalancer {
	t.Helper()
	byKey := func(a, b lbmodel.Rule) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Path, b.Path))
	}
	slices.SortFunc(rules, byKey)
	var lb lbmodel.LoadBalancer
	var diff string
	lbsyncbed.WaitFor(t, 30*time.Second, "the model of "+lbName, func() (bool, error) {
		st, err := l.MockState()
		if err != nil {
			return false, err
		}
		var ok bool
		if lb, ok = stack.FindLoadBalancer(st, lbName); !ok || lb.HTTP == nil {
			diff = "no load balancer"
			return false, nil
		}
		got := slices.Clone(lb.HTTP.Rules)
		slices.SortFunc(got, byKey)
		diff = gocmp.Diff(pools, lb.Pools, cmpopts.EquateEmpty()) + gocmp.Diff(rules, got, cmpopts.EquateEmpty())
		return diff == "", nil
	})
	if diff != "" {
		t.Fatalf("model (-want +got):\n%s", diff)
	}
	return lb
}

// listenerRefused checks that listener of Gateway ns/gw is Accepted False
// with reason, its message containing message.
func listenerRefused(t *testing.T, gw1 gatewayv1client.GatewayV1Interface, ns, gw, listener, reason, message string) {
	t.Helper()
	g, err := gw1.Gateways(ns).Get(context.Background(), gw, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(g.Status.Listeners, func(l gatewayv1.ListenerStatus) bool { return string(l.Name) == listener })
	if i < 0 || !hasCond(g.Status.Listeners[i].Conditions, "Accepted", metav1.ConditionFalse, reason) ||
		!strings.Contains(meta.FindStatusCondition(g.Status.Listeners[i].Conditions, "Accepted").Message, message) {
		t.Errorf("listener %s: %+v, want Accepted False %s naming %q", listener, g.Status.Listeners, reason, message)
	}
}

func hasCond(cs []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) bool {
	return slices.ContainsFunc(cs, func(c metav1.Condition) bool {
		return c.Type == typ && (status == "" || c.Status == status) && c.Reason == reason
	})
}

// selfSigned returns a self-signed certificate for host and its key, PEM.
func selfSigned(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// TestLBSync_gatewayRouteAcceptedOnceOnTheLoadBalancer: with a provider
// whose every call takes a second (the mock's latency), a new HTTPRoute
// reads Accepted only once the load balancer holds its rule: npl-lbsync
// writes the statuses after the apply, so a client that waits for Accepted
// and Programmed does not reach the load balancer before the route.
func TestLBSync_gatewayRouteAcceptedOnceOnTheLoadBalancer(t *testing.T) {
	e := setup(t)
	b := e.startGatewayBedWith(t, "mock", "gwslow", "198.18.116.0/28", "    latency: 1s\n")
	ctx, l, gw1, ns, className, name := b.ctx, b.l, b.gw1, b.ns, b.class, b.name
	if _, err := gw1.Gateways(ns).Create(ctx, &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(className),
			Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 60*time.Second, "the Gateway programmed", func() (bool, error) {
		g, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
		return err == nil && hasCond(g.Status.Conditions, "Programmed", metav1.ConditionTrue, "Programmed"), err
	})

	prefix, path, port := gatewayv1.PathMatchPathPrefix, "/slow", gatewayv1.PortNumber(80)
	if _, err := gw1.HTTPRoutes(ns).Create(ctx, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: &path}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{Name: "a", Port: &port}}}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Polled often: the second the apply takes is the window in which a
	// status written first would read Accepted without the rule.
	deadline := time.Now().Add(60 * time.Second)
	for {
		rt, err := gw1.HTTPRoutes(ns).Get(ctx, "r", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rt.Status.Parents) == 1 && hasCond(rt.Status.Parents[0].Conditions, "Accepted", metav1.ConditionTrue, "Accepted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("route r not accepted: %+v", rt.Status.Parents)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := l.MockState()
	if err != nil {
		t.Fatal(err)
	}
	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	lb, ok := stack.FindLoadBalancer(st, lbName)
	if !ok || lb.HTTP == nil || !slices.ContainsFunc(lb.HTTP.Rules, func(r lbmodel.Rule) bool { return r.Path == path }) {
		t.Errorf("route r reads Accepted, but the load balancer %s does not hold its rule %s: %+v", lbName, path, lb.HTTP)
	}
}
