package bigip

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/providertest"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

func weighted(ip string, port, weight int32) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: true, Weight: weight}
}

// gatewayLB is the load balancer of Gateway shop/gw: HTTP on 80 and 8080,
// HTTPS on 443; a weighted pool for a route with every match and filter
// BIG-IP serves on port 80 only, a redirect on 8080, a catch-all rule on
// every port, and a certificate for port 443.
func gatewayLB(t *testing.T) *lbmodel.LoadBalancer {
	name := lbmodel.GatewayLoadBalancerName(testCluster, "shop", "gw")
	shop := lbmodel.GatewayPoolName(name, "shop", "web", 0)
	blog := lbmodel.GatewayPoolName(name, "shop", "web", 1)
	cert := tlsCert(t, "gw-tls", "shop.example.com")
	cert.Ports = []int32{443}
	return &lbmodel.LoadBalancer{
		Name: name, Kind: lbmodel.L7, Gateway: "shop/gw",
		Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP}, {Port: 8080, Protocol: lbmodel.HTTP}, {Port: 443, Protocol: lbmodel.HTTPS},
		},
		Pools: []lbmodel.Pool{
			{Name: shop, Members: []lbmodel.Member{weighted("198.18.0.11", 61000, 3), weighted("198.18.0.12", 61001, 1)}},
			{Name: blog, Members: []lbmodel.Member{member("198.18.0.13", 61002)}},
		},
		HTTP: &lbmodel.HTTPRoutes{
			Rules: []lbmodel.Rule{
				{Host: "*.example.com", Path: "/shop", PathType: lbmodel.PathPrefix, Pool: shop, Ports: []int32{80},
					Method: "GET", Headers: []lbmodel.ValueMatch{{Name: "X-Env", Value: "canary"}},
					Query:           []lbmodel.ValueMatch{{Name: "page", Value: "2"}},
					RequestHeaders:  &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-Set", Value: "1"}}, Add: []lbmodel.Header{{Name: "X-Add", Value: "2"}}, Remove: []string{"X-Gone"}},
					ResponseHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-Out", Value: ""}}},
					Rewrite:         &lbmodel.Rewrite{Hostname: "internal.example.com", Path: &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/store"}}},
				{Host: "shop.example.com", Path: "/old", PathType: lbmodel.PathExact, Ports: []int32{8080},
					Redirect: &lbmodel.Redirect{Scheme: "https", StatusCode: 302}},
				{Path: "/", PathType: lbmodel.PathPrefix, Pool: blog, Order: 4},
			},
			TLS: []lbmodel.TLSCert{cert},
		},
	}
}

// listedGateway is lb, normalized, as List reports it.
func listedGateway(t *testing.T, lb *lbmodel.LoadBalancer, vip string) lbmodel.LoadBalancer {
	t.Helper()
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return listedL7(n, vip)
}

func TestProvider_gatewayServesItsModelWithAPolicyPerListener(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := gatewayLB(t)
	e.ensure(t, lb)
	p := "/" + testPartition + "/"
	shop, blog := p+lb.Pools[0].Name, p+lb.Pools[1].Name
	got := e.sim.Dump()

	// One policy per HTTP(S) listener, holding the rules of its port.
	policies := map[string][]string{}
	for _, pol := range got.Policies {
		policies[pol.FullPath] = pol.Rules
	}
	want := map[string][]string{
		p + lb.Name + "-HTTP-80": {
			"rule-1.0: httpHost host endsWith [.example.com]; httpUri path equals [/shop]; httpMethod equals [GET]; " +
				"httpHeader name=X-Env equals [canary]; httpUri queryParameter name=page equals [2] -> " +
				"header replace X-Set 1, header insert X-Add 2, header remove X-Gone, host replace internal.example.com, " +
				"uri replace path /store, forward " + shop + ", header replace X-Out  at response",
			"rule-1.1: httpHost host endsWith [.example.com]; httpUri path startsWith [/shop/]; httpMethod equals [GET]; " +
				"httpHeader name=X-Env equals [canary]; httpUri queryParameter name=page equals [2] -> " +
				"header replace X-Set 1, header insert X-Add 2, header remove X-Gone, host replace internal.example.com, " +
				"uri replace path /store, forward " + shop + ", header replace X-Out  at response",
			"rule-2.0: httpUri path startsWith [/] -> forward " + blog,
		},
		p + lb.Name + "-HTTP-8080": {
			"rule-0.0: httpHost host equals [shop.example.com]; httpUri path equals [/old] -> redirect tcl:https://" +
				`[getfield [HTTP::host] ":" 1][HTTP::uri]`,
			"rule-2.0: httpUri path startsWith [/] -> forward " + blog,
		},
		p + lb.Name + "-HTTPS-443": {"rule-2.0: httpUri path startsWith [/] -> forward " + blog},
	}
	if diff := cmp.Diff(want, policies); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	// Weights are ratios.
	for _, pl := range got.Pools {
		if pl.FullPath != shop {
			if pl.LoadBalancingMode != "" {
				t.Errorf("pool %s: mode %s, want round-robin", pl.FullPath, pl.LoadBalancingMode)
			}
			continue
		}
		var ratios []int
		for _, m := range pl.Members {
			ratios = append(ratios, m.Ratio)
		}
		if pl.LoadBalancingMode != "ratio-member" || !cmp.Equal(ratios, []int{3, 0}) {
			t.Errorf("pool %s: mode %q ratios %v, want ratio-member [3 default]", pl.FullPath, pl.LoadBalancingMode, ratios)
		}
	}
	// Each virtual has its own policy; the certificate only on 443.
	profile := p + lbmodel.CertificateName(lb.Name, "shop/gw-tls")
	for _, v := range got.Virtuals {
		if !cmp.Equal(v.Policies, []string{v.FullPath}) {
			t.Errorf("virtual %s: policies %v, want its own", v.FullPath, v.Policies)
		}
		if https := strings.HasSuffix(v.FullPath, "-HTTPS-443"); https != (len(v.Profiles) == 3 && v.Profiles[2] == profile) {
			t.Errorf("virtual %s: profiles %v", v.FullPath, v.Profiles)
		}
	}

	// List returns the model applied.
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedGateway(t, lb, "198.18.100.1")}, e.list(t)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	// Nothing changed: no write, also from a restarted npl-lbsync.
	e.sim.ResetCounters()
	e.ensure(t, lb.Clone())
	if _, err := e.reopen(t).Ensure(context.Background(), lb.Clone()); err != nil {
		t.Fatalf("Ensure after a restart: %v", err)
	}
	if w := e.sim.Writes(); w != 0 {
		t.Errorf("Ensure of an unchanged model wrote %v", writesOnly(e.sim.Calls()))
	}
	// A rule is served on port 8080 too: the policies of 80 (its
	// description holds its ports) and 8080 change, 443's stays.
	lb2 := lb.Clone()
	lb2.HTTP.Rules[0].Ports = []int32{80, 8080}
	lb2.Pools[0].Members[0].Weight = 0
	e.sim.ResetCounters()
	e.ensure(t, lb2)
	writes := writesOnly(e.sim.Calls())
	if !cmp.Equal(writes, map[string]int{"PUT pool": 1, "PATCH ltm-policy": 2, "PUT ltm-policy": 2, "POST ltm-policy": 2}) {
		t.Errorf("writes %v, want one pool write and two policy drafts made, written and published", writes)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedGateway(t, lb2, "198.18.100.1")}, e.list(t)); diff != "" {
		t.Errorf("List after the change (-want +got):\n%s", diff)
	}
	st := e.sim.Dump()
	for _, pl := range st.Pools {
		if pl.LoadBalancingMode != "" {
			t.Errorf("pool %s without weights: mode %s", pl.FullPath, pl.LoadBalancingMode)
		}
	}

	// A listener goes: its virtual and its policy go.
	lb3 := lb2.Clone()
	lb3.Listeners = []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 443, Protocol: lbmodel.HTTPS}}
	lb3.HTTP.Rules[0].Ports = []int32{80}
	lb3.HTTP.Rules = slices2(lb3.HTTP.Rules[0], lb3.HTTP.Rules[2])
	e.ensure(t, lb3)
	st = e.sim.Dump()
	var names []string
	for _, pol := range st.Policies {
		names = append(names, pol.FullPath)
	}
	if !cmp.Equal(names, []string{p + lb.Name + "-HTTP-80", p + lb.Name + "-HTTPS-443"}) {
		t.Errorf("policies %v after the listener 8080 went", names)
	}

	if err := e.prov.Delete(context.Background(), lb.Name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	st = e.sim.Dump()
	if n := len(st.Virtuals) + len(st.Pools) + len(st.Policies) + len(st.ClientSSLProfiles) + len(st.Certificates) + len(st.Keys); n != 0 {
		t.Errorf("%d objects left after Delete: %+v", n, st)
	}
}

func slices2(rs ...lbmodel.Rule) []lbmodel.Rule { return rs }

func TestProvider_gatewayTCPAndUDPListenersAreVirtualsWithTheirPools(t *testing.T) {
	e := newEnv(t, envOptions{})
	// The unwrapped provider: the model's contract admits TCP and UDP
	// listeners on a Gateway's load balancer; this model is in its
	// canonical form already.
	name := lbmodel.GatewayLoadBalancerName(testCluster, "shop", "gw")
	lb := &lbmodel.LoadBalancer{
		Name: name, Kind: lbmodel.L7, Gateway: "shop/gw",
		Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP},
			{Port: 5432, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 5432),
				Members: []lbmodel.Member{weighted("198.18.0.11", 61000, 2), member("198.18.0.12", 61001)}}},
			{Port: 53, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.UDP, 53),
				Members: []lbmodel.Member{member("198.18.0.11", 61002)}}},
		},
		Pools: []lbmodel.Pool{},
		HTTP:  &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}},
	}
	prov := unwrap(t, e)
	if _, err := prov.Ensure(context.Background(), lb); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	p := "/" + testPartition + "/"
	st := e.sim.Dump()
	var virtuals []bigipsim.Virtual
	for _, v := range st.Virtuals {
		v.Description = ""
		virtuals = append(virtuals, v)
	}
	want := []bigipsim.Virtual{
		{FullPath: p + name + "-HTTP-80", Destination: p + "198.18.100.1:80", IPProtocol: "tcp", SourceAddressTranslation: "automap",
			Profiles: []string{"/Common/tcp", "/Common/http"}, Policies: []string{p + name + "-HTTP-80"}},
		{FullPath: p + name + "-TCP-5432", Destination: p + "198.18.100.1:5432", IPProtocol: "tcp", Pool: p + name + "-TCP-5432",
			SourceAddressTranslation: "automap", Profiles: []string{"/Common/tcp"}},
		{FullPath: p + name + "-UDP-53", Destination: p + "198.18.100.1:53", IPProtocol: "udp", Pool: p + name + "-UDP-53",
			SourceAddressTranslation: "automap", Profiles: []string{"/Common/udp"}},
	}
	if diff := cmp.Diff(want, virtuals); diff != "" {
		t.Errorf("virtuals (-want +got):\n%s", diff)
	}
	for _, pl := range st.Pools {
		if strings.HasSuffix(pl.FullPath, "-UDP-53") && pl.Monitor != "/Common/udp " {
			t.Errorf("UDP pool monitor %q", pl.Monitor)
		}
		if strings.HasSuffix(pl.FullPath, "-TCP-5432") && pl.LoadBalancingMode != "ratio-member" {
			t.Errorf("TCP pool mode %q, want ratio-member", pl.LoadBalancingMode)
		}
	}
	listed := *lb
	lbmodel.SortListeners(listed.Listeners)
	listed.VIPs = []string{"198.18.100.1"}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listed}, e.list(t)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	e.sim.ResetCounters()
	if _, err := prov.Ensure(context.Background(), lb); err != nil || e.sim.Writes() != 0 {
		t.Errorf("second Ensure: %v, writes %v", err, writesOnly(e.sim.Calls()))
	}
	if err := prov.Delete(context.Background(), name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if st := e.sim.Dump(); len(st.Virtuals)+len(st.Pools)+len(st.Policies) != 0 {
		t.Errorf("left after Delete: %+v", st)
	}
}

// unwrap returns the provider of e without the registry's Normalize in
// front: for models the contract admits before Normalize does.
func unwrap(t *testing.T, e *env) providers.Provider {
	t.Helper()
	cfg, err := parseSection(map[string]any{"url": e.sim.URL(), "usernameFile": e.dir + "/username", "passwordFile": e.dir + "/password",
		"insecure": true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProvider_gatewayRefusesWhatLTMPoliciesCannotExpress(t *testing.T) {
	for field, change := range map[string]func(*lbmodel.LoadBalancer){
		"pathType RegularExpression": func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[2].PathType = lbmodel.PathRegex },
		"regular-expression header match": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[0].Headers[0].Regex = true
		},
		"regular-expression query match": func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[0].Query[0].Regex = true },
		"fixedStatus 500": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[2].Pool, lb.HTTP.Rules[2].FixedStatus = "", 500
		},
		"backends (an LTM policy forwards a rule's requests to one pool)": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[2].Pool = ""
			lb.HTTP.Rules[2].Backends = []lbmodel.RuleBackend{{Pool: lb.Pools[0].Name, Weight: 1}, {Pool: lb.Pools[1].Name, Weight: 1}}
		},
		"cors (an LTM policy answers no preflight request)": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[2].CORS = &lbmodel.CORS{AllowOrigins: []string{"https://a.example"}, MaxAgeSeconds: 5}
		},
		"redirect statusCode 301": func(lb *lbmodel.LoadBalancer) { lb.HTTP.Rules[1].Redirect.StatusCode = 301 },
		"redirect path ReplaceFullPath": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[1].Redirect.Path = &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/new"}
		},
		"rewrite path ReplacePrefixMatch": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[0].Rewrite.Path = &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/new"}
		},
		"appProtocol h2c": func(lb *lbmodel.LoadBalancer) { lb.Pools[1].AppProtocol = lbmodel.AppProtocolH2C },
		// The share of invalid backendRefs that Gateway API answers 500.
		"invalid weight 3 (the share of invalid backendRefs answered 500)": func(lb *lbmodel.LoadBalancer) { lb.Pools[1].InvalidWeight = 3 },
		"requestHeaders X-Add: a value that starts with tcl:": func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules[0].RequestHeaders.Add[0].Value = "TCL:[exec id]"
		},
	} {
		e := newEnv(t, envOptions{})
		lb := gatewayLB(t)
		change(lb)
		before := writesOnly(e.sim.Calls())
		_, err := e.prov.Ensure(context.Background(), lb)
		if !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Ensure = %v, want ErrUnsupported naming it", field, err)
		}
		if w := writesOnly(e.sim.Calls()); !cmp.Equal(w, before) {
			t.Errorf("%s: writes %v, want none", field, w)
		}
		// The builder's check, rule by rule, refuses it with the same
		// message (providers.ModelCheckerOf sees through Validated).
		if err := providertest.RuleRefusal(providers.ModelCheckerOf(e.prov), lb); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: CheckRule = %v, want the error naming it", field, err)
		}
	}
	if err := providertest.RuleRefusal(providers.ModelCheckerOf(newEnv(t, envOptions{}).prov), gatewayLB(t)); err != nil {
		t.Errorf("CheckRule of a model BIG-IP serves: %v", err)
	}
	// A TLS listener (TLSRoute), through the provider itself.
	e := newEnv(t, envOptions{})
	lb := gatewayLB(t)
	lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: 8443, Protocol: lbmodel.TLS,
		SNI: []lbmodel.SNIRoute{{Host: "db.example.com", Pool: lb.Pools[0].Name}}})
	if _, err := unwrap(t, e).Ensure(context.Background(), lb); !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), "TLS listener") {
		t.Errorf("TLS listener: Ensure = %v, want ErrUnsupported naming it", err)
	}
	if e.sim.Writes() != 0 {
		t.Errorf("TLS listener: writes %v", writesOnly(e.sim.Calls()))
	}
	// The builder's check, listener by listener, refuses that listener
	// alone and serves the others.
	mc := providers.ModelCheckerOf(e.prov)
	if err := providertest.ListenerRefusal(mc, lb); err == nil || !strings.Contains(err.Error(), "listener TLS/8443: a TLS listener") {
		t.Errorf("the listener check = %v, want the error naming the TLS listener", err)
	}
	if err := providertest.ListenerRefusal(mc, gatewayLB(t)); err != nil {
		t.Errorf("the listener check of a model BIG-IP serves: %v", err)
	}
}

func TestProvider_gatewayErrorsDeleteNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := gatewayLB(t)
	e.ensure(t, lb)
	before := e.sim.Dump()
	// Listener 8080 goes (its virtual and policy would be deleted) and its
	// redirect moves to port 80 (the policy of 80 changes): the policy
	// write fails, so nothing is deleted. A failed publish leaves the
	// draft it wrote, which the next Ensure reuses.
	published := func() bigipsim.State {
		st := e.sim.Dump()
		st.Policies = slices.DeleteFunc(st.Policies, func(p bigipsim.Policy) bool { return p.Status == "draft" })
		return st
	}
	next := lb.Clone()
	next.Listeners = []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 443, Protocol: lbmodel.HTTPS}}
	next.HTTP.Rules[1].Ports = []int32{80}
	for _, fault := range []bigipsim.Fault{
		{Method: "PATCH", Path: "ltm/policy/", Status: 500, Message: "policy store busy"},
		{Method: "POST", Path: "ltm/policy", Status: 500, Message: "policy store busy"},
	} {
		id, err := e.sim.InjectFault(fault)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.prov.Ensure(context.Background(), next); err == nil || !strings.Contains(err.Error(), "policy store busy") {
			t.Errorf("%s %s failing: Ensure = %v, want the error", fault.Method, fault.Path, err)
		}
		e.sim.RemoveFault(id)
		if diff := cmp.Diff(before, published()); diff != "" {
			t.Errorf("%s %s failing: the configuration changed (-before +after):\n%s", fault.Method, fault.Path, diff)
		}
	}
	e.ensure(t, next)
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedGateway(t, next, "198.18.100.1")}, e.list(t)); diff != "" {
		t.Errorf("List after the faults went (-want +got):\n%s", diff)
	}
	if st := e.sim.Dump(); len(st.Policies) != 2 || len(st.Virtuals) != 2 {
		t.Errorf("policies %+v and virtuals %+v, want those of 80 and 443 only, no draft", st.Policies, st.Virtuals)
	}
}

func TestProvider_gatewayListenerChangesProtocolOnItsPort(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := gatewayLB(t)
	e.ensure(t, lb)
	// Listener 8080 becomes HTTPS: the HTTP virtual on that port goes
	// before the HTTPS one is made (BIG-IP holds one per address, port and
	// IP protocol), and its policy with it.
	next := lb.Clone()
	next.Listeners[1].Protocol = lbmodel.HTTPS
	next.HTTP.TLS[0].Ports = []int32{443, 8080}
	e.ensure(t, next)
	p := "/" + testPartition + "/"
	st := e.sim.Dump()
	var virtuals, policies []string
	for _, v := range st.Virtuals {
		virtuals = append(virtuals, v.FullPath)
	}
	for _, pol := range st.Policies {
		policies = append(policies, pol.FullPath)
	}
	want := []string{p + lb.Name + "-HTTP-80", p + lb.Name + "-HTTPS-443", p + lb.Name + "-HTTPS-8080"}
	if !cmp.Equal(virtuals, want) || !cmp.Equal(policies, want) {
		t.Errorf("virtuals %v, policies %v, want %v", virtuals, policies, want)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedGateway(t, next, "198.18.100.1")}, e.list(t)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	e.sim.ResetCounters()
	e.ensure(t, next.Clone())
	if w := e.sim.Writes(); w != 0 {
		t.Errorf("Ensure of an unchanged model wrote %v", writesOnly(e.sim.Calls()))
	}
}

// BIG-IP evaluates a redirect's location as a Tcl expression built from
// the scheme, the host and the request's URI: a host holding Tcl (which the
// host rule once let through: "[", "$", ";", "\", quotes) would run on the
// BIG-IP. Such a model is refused before any call; a plain host is written
// as it is.
func TestProvider_redirectLocationCarriesNoTclFromTheModel(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, host := range []string{`evil[exec /bin/sh -c id]`, `evil[exec${IFS}id]`, `a$::tcl_platform(os)`, `a;b`, `a\"b`} {
		lb := gatewayLB(t)
		lb.HTTP.Rules[1].Redirect.Hostname = host
		_, err := e.prov.Ensure(context.Background(), lb)
		if err == nil || !strings.Contains(err.Error(), "is not a host name") {
			t.Errorf("redirect to %q: %v, want the model refused", host, err)
		}
	}
	if w := e.sim.Writes(); w != 0 {
		t.Errorf("%d writes for refused models", w)
	}
	lb := gatewayLB(t)
	lb.HTTP.Rules[1].Redirect.Hostname = "www.example.com"
	e.ensure(t, lb)
	var found bool
	for _, pol := range e.sim.Dump().Policies {
		for _, r := range pol.Rules {
			if strings.Contains(r, "tcl:https://www.example.com[HTTP::uri]") {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no redirect to tcl:https://www.example.com[HTTP::uri] in %+v", e.sim.Dump().Policies)
	}
}

// An HTTPS listener that verifies client certificates (Gateway
// spec.tls.frontend) is refused by name before anything is written, and
// the builder's listener check refuses that listener alone: it is never
// served without the check.
func TestProvider_gatewayRefusesClientCertificateValidation(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := gatewayLB(t)
	i := slices.IndexFunc(lb.Listeners, func(l lbmodel.Listener) bool { return l.Protocol == lbmodel.HTTPS })
	lb.Listeners[i].ClientValidation = &lbmodel.ClientValidation{CACertPEM: string(lb.HTTP.TLS[0].CertPEM)}
	want := "listener HTTPS/443: clientValidation"
	before := writesOnly(e.sim.Calls())
	if _, err := e.prov.Ensure(context.Background(), lb); !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), want) {
		t.Errorf("Ensure = %v, want ErrUnsupported naming %q", err, want)
	}
	if w := writesOnly(e.sim.Calls()); !cmp.Equal(w, before) {
		t.Errorf("writes %v, want none", w)
	}
	if err := providertest.ListenerRefusal(providers.ModelCheckerOf(e.prov), lb); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the listener check = %v, want the error naming %q", err, want)
	}
}
