package ingress

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
)

type buildCase struct {
	name       string
	in         Input
	want       *lbmodel.LoadBalancer
	wantReport builder.Report
}

func runBuildCases(t *testing.T, tests []buildCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			if in.ClusterName == "" {
				in.ClusterName = testCluster
			}
			lb, report := Build(in)
			if diff := cmp.Diff(tt.want, lb, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("model (-want +got):\n%s", diff)
			}
			// PoolBackends has a test of its own (TestBuild_poolBackends).
			if diff := cmp.Diff(tt.wantReport, report, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(builder.Report{}, "PoolBackends")); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}

// l7 is an expected L7 load balancer of Ingress shop/<ing> with HTTP/80.
func l7(ing string, pools []lbmodel.Pool, rules []lbmodel.Rule, mods ...func(*lbmodel.LoadBalancer)) *lbmodel.LoadBalancer {
	lb := &lbmodel.LoadBalancer{
		Name: lbName(ing), Kind: lbmodel.L7, Ingress: testNS + "/" + ing,
		Listeners: []lbmodel.Listener{httpListener},
		Pools:     pools,
		HTTP:      &lbmodel.HTTPRoutes{Rules: rules},
	}
	for _, m := range mods {
		m(lb)
	}
	return lb
}

func withDefault(pool string) func(*lbmodel.LoadBalancer) {
	return func(lb *lbmodel.LoadBalancer) { lb.HTTP.DefaultPool = pool }
}

func withTLS(certs ...lbmodel.TLSCert) func(*lbmodel.LoadBalancer) {
	return func(lb *lbmodel.LoadBalancer) {
		lb.HTTP.TLS = certs
		lb.Listeners = []lbmodel.Listener{httpListener, httpsListener}
	}
}

func ingresses(ings ...*networkingv1.Ingress) []*networkingv1.Ingress { return ings }

func TestBuild_routesHostsAndPathsToOnePoolPerServicePort(t *testing.T) {
	lb := lbName("web")
	shop, cart := poolOf(lb, "shop", 80), poolOf(lb, "cart", 80)
	runBuildCases(t, []buildCase{
		{
			name: "two hosts, three path types, members from npl-agent's annotations",
			in: Input{
				Ingresses: ingresses(ingress("web",
					rule("shop.example.com",
						prefix("/", backend("shop", 80)),
						exact("/checkout", backend("cart", "http")),
						implSpecific("/cart/", backend("cart", 80))),
					rule("*.example.com", prefix("/static", backend("shop", "http"))))),
				Services: []*corev1.Service{service("shop"), service("cart")},
				Pods: []*corev1.Pod{
					pod("shop", "shop-1", "198.18.0.12", 61000),
					pod("shop", "shop-2", "198.18.0.11", 61003),
					pod("cart", "cart-1", "198.18.0.11", 61001),
				},
			},
			want: l7("web",
				[]lbmodel.Pool{
					pool(cart, up("198.18.0.11", 61001)),
					pool(shop, up("198.18.0.11", 61003), up("198.18.0.12", 61000)),
				},
				[]lbmodel.Rule{
					{Host: "shop.example.com", Path: "/checkout", PathType: lbmodel.PathExact, Pool: cart},
					{Host: "shop.example.com", Path: "/cart", PathType: lbmodel.PathPrefix, Pool: cart},
					{Host: "shop.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: shop},
					{Host: "*.example.com", Path: "/static", PathType: lbmodel.PathPrefix, Pool: shop},
				}),
			wantReport: builder.Report{ReadyBackends: 3},
		},
		{
			name: "a backend Service without a selector has the Pods its hand-written EndpointSlice names",
			in: Input{
				Ingresses: ingresses(ingress("web", rule("", prefix("/", backend("ext", 80))))),
				Services:  []*corev1.Service{service("ext", func(s *corev1.Service) { s.Spec.Selector = nil })},
				Pods: []*corev1.Pod{
					pod("other", "ext-1", "198.18.0.11", 61000),
					pod("other", "not-named", "198.18.0.12", 61001),
				},
				EndpointSlices: []*discoveryv1.EndpointSlice{handSlice("ext", "ext-1")},
			},
			want: l7("web",
				[]lbmodel.Pool{pool(poolOf(lbName("web"), "ext", 80), up("198.18.0.11", 61000))},
				[]lbmodel.Rule{{Path: "/", PathType: lbmodel.PathPrefix, Pool: poolOf(lbName("web"), "ext", 80)}}),
			wantReport: builder.Report{ReadyBackends: 1},
		},
		{
			name: "a rule without a host serves every host; an empty prefix path is /; hosts are lower-cased",
			in: Input{
				Ingresses: ingresses(ingress("web",
					rule("", implSpecific("", backend("shop", 80))),
					rule("Shop.Example.com", exact("/a", backend("shop", 80))))),
				Services: []*corev1.Service{service("shop")},
			},
			want: l7("web", []lbmodel.Pool{pool(shop)}, []lbmodel.Rule{
				{Host: "shop.example.com", Path: "/a", PathType: lbmodel.PathExact, Pool: shop},
				{Path: "/", PathType: lbmodel.PathPrefix, Pool: shop},
			}),
		},
		{
			name: "the default backend is the default pool",
			in: Input{
				Ingresses: ingresses(ingress("web", defaultBackend(backend("shop", "http")),
					rule("a.example.com", prefix("/", backend("cart", 80))))),
				Services: []*corev1.Service{service("shop"), service("cart")},
				Pods:     []*corev1.Pod{pod("shop", "shop-1", "198.18.0.12", 61000)},
			},
			want: l7("web", []lbmodel.Pool{pool(cart), pool(shop, up("198.18.0.12", 61000))},
				[]lbmodel.Rule{{Host: "a.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: cart}},
				withDefault(shop)),
			wantReport: builder.Report{ReadyBackends: 1},
		},
		{
			name: "NodePort mode: members are every Ready node's nodePort",
			in: Input{
				ServiceType: builder.ServiceTypeNodePort,
				Ingresses:   ingresses(ingress("web", defaultBackend(backend("shop", 80)))),
				Services:    []*corev1.Service{service("shop", svcType(corev1.ServiceTypeNodePort), nodePort(30080))},
				Nodes:       []*corev1.Node{node("n1", "198.18.0.11"), node("n2", "198.18.0.12")},
			},
			want: l7("web", []lbmodel.Pool{pool(shop, up("198.18.0.11", 30080), up("198.18.0.12", 30080))},
				[]lbmodel.Rule{}, withDefault(shop)),
			wantReport: builder.Report{ReadyBackends: 2},
		},
		{
			name: "the requested VIP annotation of the Ingress",
			in: Input{
				Ingresses: ingresses(ingress("web", annotated(contract.LoadBalancerIPKey, "203.0.113.7"),
					defaultBackend(backend("shop", 80)))),
				Services: []*corev1.Service{service("shop")},
			},
			want: l7("web", []lbmodel.Pool{pool(shop)}, []lbmodel.Rule{}, withDefault(shop),
				func(lb *lbmodel.LoadBalancer) { lb.RequestedVIP = "203.0.113.7" }),
		},
	})
}

func TestBuild_reportsBackendsThatGiveNoMembers(t *testing.T) {
	lb := lbName("web")
	runBuildCases(t, []buildCase{
		{
			name: "a NodePort Service in NodePortLocal mode: warning, empty pool, rule kept",
			in: Input{
				Ingresses: ingresses(ingress("web", rule("a.example.com", prefix("/", backend("shop", 80))))),
				Services:  []*corev1.Service{service("shop", svcType(corev1.ServiceTypeNodePort), nodePort(30080))},
				Pods:      []*corev1.Pod{pod("shop", "shop-1", "198.18.0.12", 61000)},
			},
			want: l7("web", []lbmodel.Pool{pool(poolOf(lb, "shop", 80))}, []lbmodel.Rule{
				{Host: "a.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: poolOf(lb, "shop", 80)}}),
			wantReport: builder.Report{Warnings: []string{"ingress shop/web: backend Service shop/shop is of type NodePort: " +
				"NodePortLocal does not map its Pods, its pool is empty; make it a ClusterIP Service"}},
		},
		{
			name: "a missing Service, a missing port, a UDP port, a resource backend",
			in: Input{
				Ingresses: ingresses(ingress("web", rule("a.example.com",
					prefix("/gone", backend("gone", 80)),
					prefix("/noport", backend("shop", "grpc")),
					prefix("/udp", backend("dns", 80)),
					prefix("/bucket", networkingv1.IngressBackend{})))),
				Services: []*corev1.Service{service("shop"), service("dns", udpPort)},
			},
			want: l7("web",
				[]lbmodel.Pool{pool(poolOf(lb, "dns", 80)), pool(lb + "_shop_gone_80"), pool(lb + "_shop_shop_grpc")},
				[]lbmodel.Rule{
					{Host: "a.example.com", Path: "/noport", PathType: lbmodel.PathPrefix, Pool: lb + "_shop_shop_grpc"},
					{Host: "a.example.com", Path: "/gone", PathType: lbmodel.PathPrefix, Pool: lb + "_shop_gone_80"},
					{Host: "a.example.com", Path: "/udp", PathType: lbmodel.PathPrefix, Pool: poolOf(lb, "dns", 80)},
				}),
			wantReport: builder.Report{Errors: []string{
				"ingress shop/web: backend Service shop/gone not found: its pool is empty",
				"ingress shop/web: backend Service shop/shop has no port grpc: its pool is empty",
				"ingress shop/web: backend Service shop/dns port 80 is UDP, not TCP: its pool is empty",
				"ingress shop/web: path a.example.com/bucket: only Service backends are supported: ignored",
			}},
		},
		{
			name: "Pods without a node port yet are reported as for a LoadBalancer Service",
			in: Input{
				Ingresses: ingresses(ingress("web", defaultBackend(backend("shop", 80)))),
				Services:  []*corev1.Service{service("shop")},
				Pods: []*corev1.Pod{pod("shop", "shop-1", "198.18.0.12", 61000, func(p *corev1.Pod) {
					p.Annotations = nil
				})},
			},
			want: l7("web", []lbmodel.Pool{pool(poolOf(lb, "shop", 80))}, []lbmodel.Rule{}, withDefault(poolOf(lb, "shop", 80))),
			wantReport: builder.Report{Skipped: []builder.Skip{{Kind: builder.SkipPod, Name: "shop/shop-1",
				Reason: "no node port yet: annotation nodeportlocal.antrea.io is absent"}}},
		},
		{
			name: "the same host and path twice: the first wins, and the loser's backend gets no pool",
			in: Input{
				Ingresses: ingresses(ingress("web",
					rule("a.example.com", prefix("/x/", backend("shop", 80))),
					rule("a.example.com", prefix("/x", backend("cart", 80)), prefix("/x", backend("shop", 80))))),
				Services: []*corev1.Service{service("shop"), service("cart")},
			},
			want: l7("web", []lbmodel.Pool{pool(poolOf(lb, "shop", 80))}, []lbmodel.Rule{
				{Host: "a.example.com", Path: "/x", PathType: lbmodel.PathPrefix, Pool: poolOf(lb, "shop", 80)}}),
			wantReport: builder.Report{Errors: []string{
				"ingress shop/web: path a.example.com/x (Prefix) ignored: ingress shop/web routes it already"}},
		},
		{
			name: "no rules and no default backend",
			in:   Input{Ingresses: ingresses(ingress("web"))},
			want: l7("web", nil, []lbmodel.Rule{}),
			wantReport: builder.Report{Warnings: []string{
				"ingress shop/web: no rules and no default backend: it routes nothing"}},
		},
	})
}

func TestBuild_tls(t *testing.T) {
	good := newCert(t, "a.example.com")
	other := newCert(t, "b.example.com")
	lb := lbName("web")
	shop := poolOf(lb, "shop", 80)
	rules := []lbmodel.Rule{{Host: "a.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: shop}}
	base := func(mods ...ingMod) []*networkingv1.Ingress {
		return ingresses(ingress("web", append([]ingMod{rule("a.example.com", prefix("/", backend("shop", 80)))}, mods...)...))
	}
	broken := good.secret(testNS, "broken")
	broken.Data[corev1.TLSPrivateKeyKey] = other.keyPEM
	runBuildCases(t, []buildCase{
		{
			name: "a Secret's certificate adds the HTTPS listener",
			in: Input{
				Ingresses: base(tlsFor("a-cert", "A.example.com"), tlsFor("b-cert", "b.example.com"), tlsFor("a-cert", "c.example.com")),
				Services:  []*corev1.Service{service("shop")},
				Secrets:   []*corev1.Secret{good.secret(testNS, "a-cert"), other.secret(testNS, "b-cert"), good.secret("elsewhere", "a-cert")},
			},
			want: l7("web", []lbmodel.Pool{pool(shop)}, rules, withTLS(
				good.model("shop/a-cert", "a.example.com", "c.example.com"),
				other.model("shop/b-cert", "b.example.com"))),
		},
		{
			name: "a missing Secret: error, and no HTTPS listener without any certificate",
			in: Input{
				Ingresses: base(tlsFor("a-cert", "a.example.com")),
				Services:  []*corev1.Service{service("shop")},
				Secrets:   []*corev1.Secret{good.secret("elsewhere", "a-cert")},
			},
			want: l7("web", []lbmodel.Pool{pool(shop)}, rules),
			wantReport: builder.Report{Errors: []string{
				"ingress shop/web: TLS Secret shop/a-cert not found: hosts [a.example.com] are not served over HTTPS"}},
		},
		{
			name: "a key that does not match the certificate, and a Secret without a key: errors; the good one is served",
			in: Input{
				Ingresses: base(tlsFor("broken", "a.example.com"), tlsFor("empty", "b.example.com"), tlsFor("b-cert", "b.example.com")),
				Services:  []*corev1.Service{service("shop")},
				Secrets: []*corev1.Secret{broken, other.secret(testNS, "b-cert"),
					{ObjectMeta: other.secret(testNS, "empty").ObjectMeta, Data: map[string][]byte{corev1.TLSCertKey: other.certPEM}}},
			},
			want: l7("web", []lbmodel.Pool{pool(shop)}, rules, withTLS(other.model("shop/b-cert", "b.example.com"))),
			wantReport: builder.Report{Errors: []string{
				"ingress shop/web: TLS Secret shop/broken: tls: private key does not match public key: hosts [a.example.com] are not served over HTTPS",
				"ingress shop/web: TLS Secret shop/empty has no tls.crt or tls.key: hosts [b.example.com] are not served over HTTPS",
			}},
		},
		{
			name: "a TLS entry without a Secret is a warning",
			in: Input{
				Ingresses: base(tlsFor("", "a.example.com")),
				Services:  []*corev1.Service{service("shop")},
			},
			want: l7("web", []lbmodel.Pool{pool(shop)}, rules),
			wantReport: builder.Report{Warnings: []string{
				"ingress shop/web: TLS entry for hosts [a.example.com] has no secretName: they are not served over HTTPS"}},
		},
	})
}

func TestBuild_sharedVIP(t *testing.T) {
	shared := lbmodel.SharedIngressLoadBalancerName(testCluster, "npl")
	cert := newCert(t, "b.example.com")
	blogPool := lbmodel.IngressPoolName(shared, "blog", "blog", "80")
	older := ingress("old", inNS("blog"), createdAt(100), defaultBackend(backend("blog", 80)),
		rule("a.example.com", prefix("/", backend("blog", 80))),
		tlsFor("cert", "b.example.com"))
	newer := ingress("new", createdAt(200), annotated(contract.LoadBalancerIPKey, "203.0.113.9"),
		defaultBackend(backend("shop", 80)),
		rule("a.example.com", prefix("/", backend("shop", 80)), exact("/shop", backend("shop", "http"))))
	runBuildCases(t, []buildCase{{
		name: "all Ingresses of the class on one load balancer; the oldest wins conflicts, and owns its host",
		in: Input{
			SharedVIP: true, IngressClass: "npl",
			Ingresses: ingresses(newer, older),
			Services:  []*corev1.Service{service("shop"), service("blog", svcNS("blog"))},
			Pods: []*corev1.Pod{pod("blog", "blog-1", "198.18.0.11", 61000, podNS("blog")),
				pod("shop", "shop-1", "198.18.0.12", 61000)},
			Secrets: []*corev1.Secret{cert.secret("blog", "cert")},
		},
		want: &lbmodel.LoadBalancer{
			Name: shared, Kind: lbmodel.L7,
			Listeners: []lbmodel.Listener{httpListener, httpsListener},
			Pools:     []lbmodel.Pool{pool(blogPool, up("198.18.0.11", 61000))},
			HTTP: &lbmodel.HTTPRoutes{
				Rules: []lbmodel.Rule{
					{Host: "a.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: blogPool},
				},
				DefaultPool: blogPool,
				TLS:         []lbmodel.TLSCert{cert.model("blog/cert", "b.example.com")},
			},
		},
		wantReport: builder.Report{
			ReadyBackends: 1,
			Warnings:      []string{"ingress shop/new: annotation npl.io/load-balancer-ip ignored: the Ingresses of class npl share one VIP"},
			Errors: []string{
				"ingress shop/new: default backend ignored: the VIP's default backend is that of ingress blog/old",
				"ingress shop/new: host a.example.com ignored: namespace blog owns it on the shared VIP (an older Ingress claims it)",
			},
		},
	}})
}

func TestBuild_refusesInputThatGivesNoModel(t *testing.T) {
	web := ingress("web")
	for _, tt := range []struct {
		name string
		in   Input
		want string
	}{
		{"no Ingress", Input{}, "no Ingress to build from"},
		{"two Ingresses without a shared VIP", Input{Ingresses: ingresses(web, ingress("b"))}, "2 Ingresses without a shared VIP"},
		{"a shared VIP without a class", Input{SharedVIP: true, Ingresses: ingresses(web)}, "a shared VIP needs the IngressClass name"},
		{"an unknown service type", Input{ServiceType: "LoadBalancer", Ingresses: ingresses(web)}, `unknown service type "LoadBalancer"`},
		{"an unknown family", Input{Family: "IPv5", Ingresses: ingresses(web)}, `unknown IP family "IPv5"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lb, r := Build(tt.in)
			if lb != nil {
				t.Errorf("Build returned a model: %+v", lb)
			}
			if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], tt.want) {
				t.Errorf("errors %q, want one containing %q", r.Errors, tt.want)
			}
		})
	}
}

func TestBuild_modelPassesTheProvidersValidation(t *testing.T) {
	cert := newCert(t, "a.example.com")
	lb, r := Build(Input{
		ClusterName: testCluster,
		Ingresses: ingresses(ingress("web", defaultBackend(backend("shop", 80)), tlsFor("cert", "a.example.com"),
			rule("a.example.com", prefix("/a/", backend("shop", 80)), exact("/b", backend("shop", 80))))),
		Services: []*corev1.Service{service("shop")},
		Pods:     []*corev1.Pod{pod("shop", "shop-1", "198.18.0.12", 61000)},
		Secrets:  []*corev1.Secret{cert.secret(testNS, "cert")},
	})
	if len(r.Errors) > 0 {
		t.Fatalf("report errors: %v", r.Errors)
	}
	if _, err := lbmodel.Normalize(lb); err != nil {
		t.Errorf("Normalize: %v", err)
	}
	if s := fmt.Sprintf("%+v %v %#v", lb, *lb.HTTP, lb.HTTP.TLS); strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "KeyPEM") {
		t.Errorf("printing the model shows the private key: %s", s)
	}
}

// The pools of Ingresses of different namespaces on the shared load
// balancer never share a name: a/b-web and a-b/web both were
// <lb>-a-b-web-80, so one Ingress's requests went to the other's Pods.
func TestBuild_sharedVIPPoolsOfCollidingNamesStayApart(t *testing.T) {
	shared := lbmodel.SharedIngressLoadBalancerName(testCluster, "npl")
	first := lbmodel.IngressPoolName(shared, "a", "b-web", "80")
	second := lbmodel.IngressPoolName(shared, "a-b", "web", "80")
	runBuildCases(t, []buildCase{{
		name: "a/b-web and a-b/web",
		in: Input{
			SharedVIP: true, IngressClass: "npl",
			Ingresses: ingresses(
				ingress("x", inNS("a"), createdAt(100), rule("x.example.com", prefix("/", backend("b-web", 80)))),
				ingress("y", inNS("a-b"), createdAt(200), rule("y.example.com", prefix("/", backend("web", 80))))),
			Services: []*corev1.Service{service("b-web", svcNS("a")), service("web", svcNS("a-b"))},
			Pods: []*corev1.Pod{pod("b-web", "x-1", "198.18.0.11", 61000, podNS("a")),
				pod("web", "y-1", "198.18.0.12", 61000, podNS("a-b"))},
		},
		want: &lbmodel.LoadBalancer{
			Name: shared, Kind: lbmodel.L7,
			Listeners: []lbmodel.Listener{httpListener},
			Pools:     []lbmodel.Pool{pool(second, up("198.18.0.12", 61000)), pool(first, up("198.18.0.11", 61000))},
			HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{
				{Host: "x.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: first},
				{Host: "y.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: second},
			}},
		},
		wantReport: builder.Report{ReadyBackends: 2},
	}})
}

// The report names the backend Service of each pool, for a Service's
// LoadBalancerPolicy: a pool whose Service is missing too.
func TestBuild_poolBackends(t *testing.T) {
	shared := lbmodel.SharedIngressLoadBalancerName(testCluster, "npl")
	blog := ingress("old", inNS("blog"), createdAt(100), rule("a.example.com", prefix("/", backend("blog", 80))))
	shop := ingress("new", createdAt(200), rule("b.example.com", prefix("/", backend("shop", 80)), exact("/gone", backend("gone", 80))))
	_, report := Build(Input{ClusterName: testCluster, SharedVIP: true, IngressClass: "npl",
		Ingresses: ingresses(shop, blog), Services: []*corev1.Service{service("shop"), service("blog", svcNS("blog"))}})
	want := map[string][]string{
		lbmodel.IngressPoolName(shared, "blog", "blog", "80"): {"blog/blog"},
		lbmodel.IngressPoolName(shared, "shop", "shop", "80"): {"shop/shop"},
		lbmodel.IngressPoolName(shared, "shop", "gone", "80"): {"shop/gone"},
	}
	if diff := cmp.Diff(want, report.PoolBackends); diff != "" {
		t.Errorf("pool backends (-want +got):\n%s", diff)
	}
}
