package avi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vmware/alb-sdk/go/models"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/providertest"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
)

// gatewayLB is the load balancer of Gateway ns/gw (HTTP 80, HTTPS 443):
// a weighted route with a method, a header match and header modifiers on
// a wildcard host, redirects (one naming its scheme, one keeping it), a
// rewrite to a second pool and a fixed answer. It is normalized, as the
// registry hands it to the provider.
func gatewayLB(t testing.TB, cert lbmodel.TLSCert) *lbmodel.LoadBalancer {
	t.Helper()
	name := lbmodel.GatewayLoadBalancerName(cluster, "ns", "gw")
	api := lbmodel.GatewayPoolName(name, "ns", "api", 0)
	web := lbmodel.GatewayPoolName(name, "ns", "web", 0)
	weighted := func(ip string, port, weight int32, enabled bool) lbmodel.Member {
		return lbmodel.Member{IP: ip, Port: port, Enabled: enabled, Weight: weight}
	}
	cert.Ports = []int32{443}
	lb := &lbmodel.LoadBalancer{
		Name: name, Kind: lbmodel.L7, Gateway: "ns/gw",
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 443, Protocol: lbmodel.HTTPS}},
		Pools: []lbmodel.Pool{
			// Backend v1 (weight 70, two Pods, one draining), v2 (weight 30, one Pod).
			{Name: api, Members: []lbmodel.Member{weighted("198.18.0.11", 61000, 7, true),
				weighted("198.18.0.12", 61001, 7, false), weighted("198.18.0.13", 61002, 6, true)}},
			{Name: web, Members: []lbmodel.Member{member("198.18.0.11", 61003)}},
		},
		HTTP: &lbmodel.HTTPRoutes{
			Rules: []lbmodel.Rule{
				{Host: "*.example.com", Path: "/api", PathType: lbmodel.PathPrefix, Pool: api, Ports: []int32{80, 443},
					Method: "GET", Headers: []lbmodel.ValueMatch{{Name: "x-env", Value: "canary"}}, Order: 2,
					RequestHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "x-set", Value: "1"}},
						Add: []lbmodel.Header{{Name: "x-add", Value: "2"}}, Remove: []string{"x-gone"}}},
				{Host: "shop.example.com", Path: "/", PathType: lbmodel.PathPrefix, Ports: []int32{80},
					Redirect: &lbmodel.Redirect{Scheme: "https", StatusCode: 301}},
				{Host: "shop.example.com", Path: "/old", PathType: lbmodel.PathExact, Ports: []int32{80, 443},
					Redirect: &lbmodel.Redirect{Hostname: "new.example.com", StatusCode: 302,
						Path: &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/new"}}},
				{Path: "/rewrite", PathType: lbmodel.PathPrefix, Pool: web, Ports: []int32{443}, Order: 1,
					Rewrite: &lbmodel.Rewrite{Hostname: "backend.internal",
						Path: &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/x"}}},
				{Path: "/gone", PathType: lbmodel.PathExact, Ports: []int32{80}, FixedStatus: 404},
			},
			TLS: []lbmodel.TLSCert{cert},
		},
	}
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return n
}

func TestProvider_gatewayLaysOutPoolGroupsAndRules(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))
	api, web := lb.Pools[0].Name, lb.Pools[1].Name

	f.ensure(lb)

	wantWrites := []string{"POST vsvip", "POST pool", "POST pool", "POST pool", "POST pool", "POST poolgroup", "POST poolgroup",
		"POST sslkeyandcertificate", "POST httppolicyset", "POST virtualservice"}
	if diff := cmp.Diff(wantWrites, f.writes()); diff != "" {
		t.Errorf("writes, in order (-want +got):\n%s", diff)
	}
	// Weight 7 (one of two members enabled) and weight 6 (one member)
	// pools, and the empty weight-1 pool each pool group keeps.
	var groups []string
	for _, g := range objects[models.PoolGroup](f, "poolgroup") {
		var ms []string
		for _, m := range g.Members {
			ms = append(ms, fmt.Sprintf("%s:%d", refName(m.PoolRef), *m.Ratio))
		}
		groups = append(groups, deref(g.Name)+" "+strings.Join(ms, " "))
	}
	slices.Sort(groups)
	wantGroups := []string{
		api + " " + api + ":0 " + api + "-w6:6 " + api + "-w7:7",
		web + " " + web + ":1",
	}
	if diff := cmp.Diff(wantGroups, groups); diff != "" {
		t.Errorf("pool groups (-want +got):\n%s", diff)
	}

	policies := objects[models.HTTPPolicySet](f, "httppolicyset")
	if len(policies) != 1 {
		t.Fatalf("httppolicysets: %v", f.names("httppolicyset"))
	}
	var rules []string
	for _, r := range policies[0].HTTPRequestPolicy.Rules {
		rules = append(rules, describeRule(r))
	}
	wantRules := []string{
		"rule-0.0 host=HDR_EQUALS[shop.example.com] path=EQUALS[/old] ports=[80] redirect=HTTP:80 host=new.example.com path=new 302",
		"rule-0.0 host=HDR_EQUALS[shop.example.com] path=EQUALS[/old] ports=[443] redirect=HTTPS:443 host=new.example.com path=new 302",
		"rule-1.0 host=HDR_EQUALS[shop.example.com] path=BEGINS_WITH[/] ports=[80] redirect=HTTPS:443 host= path= 301",
		"rule-2.0/o2 host=HDR_ENDS_WITH[.example.com] path=EQUALS[/api] ports=[80 443] method=[HTTP_METHOD_GET] hdr=x-env:canary " +
			"hdr_action=HTTP_REPLACE_HDR:x-set:1,HTTP_ADD_HDR:x-add:2,HTTP_REMOVE_HDR:x-gone: group=" + api,
		"rule-2.1/o2 host=HDR_ENDS_WITH[.example.com] path=BEGINS_WITH[/api/] ports=[80 443] method=[HTTP_METHOD_GET] hdr=x-env:canary " +
			"hdr_action=HTTP_REPLACE_HDR:x-set:1,HTTP_ADD_HDR:x-add:2,HTTP_REMOVE_HDR:x-gone: group=" + api,
		"rule-3.0 path=EQUALS[/gone] ports=[80] local=HTTP_LOCAL_RESPONSE_STATUS_CODE_404",
		"rule-4.0/o1 path=EQUALS[/rewrite] ports=[443] rewrite=backend.internal x group=" + web,
		"rule-4.1/o1 path=BEGINS_WITH[/rewrite/] ports=[443] rewrite=backend.internal x group=" + web,
		// What no rule matches is answered 404, as Gateway API wants.
		"no-match-404 path=BEGINS_WITH[/] local=HTTP_LOCAL_RESPONSE_STATUS_CODE_404",
	}
	// The names of the redirect rules carry their port and "/d".
	for i, r := range rules {
		rules[i] = strings.NewReplacer("/p80/d", "", "/p443/d", "", "rule-1.0/d", "rule-1.0").Replace(r)
	}
	if diff := cmp.Diff(wantRules, rules); diff != "" {
		t.Errorf("request rules (-want +got):\n%s", diff)
	}

	vs := objects[models.VirtualService](f, "virtualservice")
	if len(vs) != 1 || markersOf(vs[0].Markers).Gateway != "ns/gw" {
		t.Errorf("virtual service markers: %v", vs)
	}

	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

// reopen opens a second provider on the same controller, as a restarted
// npl-lbsync does.
func (f *fixture) reopen() providers.Provider {
	f.t.Helper()
	p, err := f.cfg.open(context.Background())
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	f.t.Cleanup(func() { p.Close() })
	return providers.Validated(p)
}

// describeRule prints what a request rule matches and does.
func describeRule(r *models.HTTPRequestRule) string {
	var b strings.Builder
	b.WriteString(deref(r.Name))
	m := r.Match
	if m.HostHdr != nil {
		fmt.Fprintf(&b, " host=%s%v", deref(m.HostHdr.MatchCriteria), m.HostHdr.Value)
	}
	fmt.Fprintf(&b, " path=%s%v", deref(m.Path.MatchCriteria), m.Path.MatchStr)
	if m.VsPort != nil {
		fmt.Fprintf(&b, " ports=%v", m.VsPort.Ports)
	}
	if m.Method != nil {
		fmt.Fprintf(&b, " method=%v", m.Method.Methods)
	}
	for _, h := range m.Hdrs {
		fmt.Fprintf(&b, " hdr=%s:%s", deref(h.Hdr), strings.Join(h.Value, ","))
	}
	var acts []string
	for _, a := range r.HdrAction {
		v := ""
		if a.Hdr.Value != nil {
			v = deref(a.Hdr.Value.Val)
		}
		acts = append(acts, deref(a.Action)+":"+deref(a.Hdr.Name)+":"+v)
	}
	if len(acts) > 0 {
		b.WriteString(" hdr_action=" + strings.Join(acts, ","))
	}
	param := func(p *models.URIParam) string {
		if p == nil {
			return ""
		}
		return deref(p.Tokens[0].StrValue)
	}
	if d := r.RedirectAction; d != nil {
		fmt.Fprintf(&b, " redirect=%s:%d host=%s path=%s %s", deref(d.Protocol), *d.Port, param(d.Host), param(d.Path),
			strings.TrimPrefix(deref(d.StatusCode), "HTTP_REDIRECT_STATUS_CODE_"))
	}
	if w := r.RewriteURLAction; w != nil {
		fmt.Fprintf(&b, " rewrite=%s %s", param(w.HostHdr), param(w.Path))
	}
	if sw := r.SwitchingAction; sw != nil {
		switch deref(sw.Action) {
		case "HTTP_SWITCHING_SELECT_POOLGROUP":
			b.WriteString(" group=" + refName(sw.PoolGroupRef))
		case "HTTP_SWITCHING_SELECT_LOCAL":
			b.WriteString(" local=" + deref(sw.StatusCode))
		default:
			b.WriteString(" pool=" + refName(sw.PoolRef))
		}
	}
	return b.String()
}

func TestProvider_gatewayWritesOnlyWhatChanged(t *testing.T) {
	cert := tlsCert(t, "gw-tls", "shop.example.com")
	tests := []struct {
		name   string
		change func(*lbmodel.LoadBalancer)
		writes []string
	}{
		{"nothing", func(*lbmodel.LoadBalancer) {}, nil},
		{"a member drains", func(lb *lbmodel.LoadBalancer) { lb.Pools[0].Members[0].Enabled = false },
			[]string{"PUT pool", "PUT poolgroup"}},
		{"a weight", func(lb *lbmodel.LoadBalancer) { lb.Pools[0].Members[2].Weight = 5 },
			[]string{"POST pool", "PUT poolgroup", "DELETE pool"}},
		{"a header value", func(lb *lbmodel.LoadBalancer) {
			gwRule(t, lb, "*.example.com", "/api").Headers[0].Value = "stable"
		},
			[]string{"PUT httppolicyset"}},
		{"a route removed", func(lb *lbmodel.LoadBalancer) {
			lb.HTTP.Rules = slices.DeleteFunc(lb.HTTP.Rules, func(r lbmodel.Rule) bool { return r.Pool == lb.Pools[1].Name })
			lb.Pools = lb.Pools[:1]
		}, []string{"PUT httppolicyset", "DELETE poolgroup", "DELETE pool"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			f.ensure(gatewayLB(t, cert))
			f.sim.ResetCounters()
			lb := gatewayLB(t, cert)
			tt.change(lb)
			f.ensure(lb)
			if diff := cmp.Diff(tt.writes, f.writes()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			f.listsApplied(lb)
		})
	}
}

func TestProvider_gatewayRestartedProviderWritesNothing(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))
	f.ensure(lb)
	f.sim.ResetCounters()
	// A new provider (npl-lbsync restarted) against the same controller.
	again := f.reopen()
	if _, err := again.Ensure(context.Background(), lb); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes after a restart: %v, want none", w)
	}
}

func TestProvider_gatewayDeleteRemovesEverything(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	l4 := webLB("web", tcp(80, member("198.18.0.11", 61000)))
	f.ensure(l4)
	lb := gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))
	f.ensure(lb)
	if err := f.p.Delete(context.Background(), lb.Name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, typ := range []string{"virtualservice", "vsvip", "pool", "poolgroup", "httppolicyset", "sslkeyandcertificate"} {
		for _, n := range f.names(typ) {
			if strings.HasPrefix(n, lb.Name) {
				t.Errorf("%s %s left", typ, n)
			}
		}
	}
	if diff := cmp.Diff([]string{l4.Name}, lbNames(f.list())); diff != "" {
		t.Errorf("List after Delete (-want +got):\n%s", diff)
	}
}

// gwRule returns the rule of lb for host and path.
func gwRule(t testing.TB, lb *lbmodel.LoadBalancer, host, path string) *lbmodel.Rule {
	t.Helper()
	for i := range lb.HTTP.Rules {
		if r := &lb.HTTP.Rules[i]; r.Host == host && r.Path == path {
			return r
		}
	}
	t.Fatalf("no rule %s%s", host, path)
	return nil
}

func lbNames(lbs []lbmodel.LoadBalancer) []string {
	var out []string
	for _, lb := range lbs {
		out = append(out, lb.Name)
	}
	return out
}

func TestProvider_gatewayRefusesWhatAviCannotExpress(t *testing.T) {
	rule := func(lb *lbmodel.LoadBalancer, host, path string) *lbmodel.Rule { return gwRule(t, lb, host, path) }
	api := func(lb *lbmodel.LoadBalancer) *lbmodel.Rule { return rule(lb, "*.example.com", "/api") }
	for field, change := range map[string]func(*lbmodel.LoadBalancer){
		"query":                   func(lb *lbmodel.LoadBalancer) { api(lb).Query = []lbmodel.ValueMatch{{Name: "x", Value: "y"}} },
		"fixedStatus 500":         func(lb *lbmodel.LoadBalancer) { rule(lb, "", "/gone").FixedStatus = 500 },
		"redirect statusCode 308": func(lb *lbmodel.LoadBalancer) { rule(lb, "shop.example.com", "/").Redirect.StatusCode = 308 },
		"rewrite path ReplacePrefixMatch": func(lb *lbmodel.LoadBalancer) {
			rule(lb, "", "/rewrite").Rewrite.Path = &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/x"}
		},
		"responseHeaders": func(lb *lbmodel.LoadBalancer) {
			api(lb).ResponseHeaders = &lbmodel.HeaderFilter{Remove: []string{"server"}}
		},
		"a RegularExpression header match": func(lb *lbmodel.LoadBalancer) { api(lb).Headers[0].Regex = true },
		"backends (a pool group changes no request per pool)": func(lb *lbmodel.LoadBalancer) {
			r := api(lb)
			r.Pool, r.Backends = "", []lbmodel.RuleBackend{{Pool: lb.Pools[0].Name, Weight: 1}, {Pool: lb.Pools[1].Name, Weight: 2}}
		},
		"cors (the layout answers no preflight request)": func(lb *lbmodel.LoadBalancer) {
			api(lb).CORS = &lbmodel.CORS{AllowOrigins: []string{"*"}, MaxAgeSeconds: 5}
		},
		"pathType RegularExpression": func(lb *lbmodel.LoadBalancer) { rule(lb, "", "/gone").PathType = lbmodel.PathRegex },
		"method QUERY":               func(lb *lbmodel.LoadBalancer) { api(lb).Method = "QUERY" },
		"appProtocol h2c":            func(lb *lbmodel.LoadBalancer) { lb.Pools[1].AppProtocol = lbmodel.AppProtocolH2C },
		// The share of invalid backendRefs that Gateway API answers 500.
		"invalid weight 3 (the share of invalid backendRefs answered 500)": func(lb *lbmodel.LoadBalancer) { lb.Pools[1].InvalidWeight = 3 },
		"ratio of 1280": func(lb *lbmodel.LoadBalancer) {
			for i := range 5 {
				lb.Pools[0].Members = append(lb.Pools[0].Members,
					lbmodel.Member{IP: fmt.Sprintf("198.18.1.%d", i+1), Port: 61000, Enabled: true, Weight: 256})
			}
		},
	} {
		t.Run(field, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			lb := gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))
			change(lb)
			_, err := providers.Validated(f.v).Ensure(context.Background(), lb)
			if !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), field) {
				t.Errorf("Ensure = %v, want ErrUnsupported naming %q", err, field)
			}
			if w := f.writes(); len(w) != 0 {
				t.Errorf("writes %v, want none", w)
			}
			// The builder's check, rule by rule, refuses it with the same
			// message (providers.ModelCheckerOf sees through Validated).
			if err := providertest.RuleRefusal(providers.ModelCheckerOf(f.v), lb); err == nil || !strings.Contains(err.Error(), field) {
				t.Errorf("CheckRule = %v, want the error naming %q", err, field)
			}
		})
	}
	if err := providertest.RuleRefusal(newFixture(t, fixtureOptions{}).p, gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))); err != nil {
		t.Errorf("CheckRule of a model Avi serves: %v", err)
	}
}

// TLS listeners of a Gateway are refused before anything is written
// (lbmodel.Normalize may or may not accept them yet).
func TestSupported_refusesAGatewaysTLSListeners(t *testing.T) {
	lb := gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))
	lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: 5432, Protocol: lbmodel.TLS})
	err := supported(lb)
	want := "listener TLS/5432: a TLS listener of a Gateway is"
	if !errors.Is(err, lbmodel.ErrUnsupported) ||
		!strings.Contains(err.Error(), want) {
		t.Errorf("supported = %v, want ErrUnsupported naming %q", err, want)
	}
	// The builder's check, listener by listener, refuses that listener
	// alone, with the same message, and serves the others (TCP and UDP
	// listeners too).
	mc := providers.ModelCheckerOf(newFixture(t, fixtureOptions{}).p)
	if err := providertest.ListenerRefusal(mc, lb); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the listener check = %v, want the error naming %q", err, want)
	}
	if err := providertest.ListenerRefusal(mc, withL4(gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com")))); err != nil {
		t.Errorf("the listener check of HTTP, HTTPS, TCP and UDP listeners: %v", err)
	}
}

// withL4 adds to a Gateway's load balancer a TCP listener (weights 3 and 1)
// and a UDP one, as the controller builds them for TCPRoutes and
// UDPRoutes. The provider is called without providers.Validated, whose
// Normalize may not accept them yet.
func withL4(lb *lbmodel.LoadBalancer) *lbmodel.LoadBalancer {
	lb.Listeners = append(lb.Listeners,
		lbmodel.Listener{Port: 5432, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lb.Name, lbmodel.TCP, 5432),
			Members: []lbmodel.Member{{IP: "198.18.0.11", Port: 61010, Enabled: true, Weight: 3}, {IP: "198.18.0.12", Port: 61011, Enabled: true}}}},
		lbmodel.Listener{Port: 53, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lb.Name, lbmodel.UDP, 53),
			Members: []lbmodel.Member{member("198.18.0.13", 61012)}}})
	lbmodel.SortListeners(lb.Listeners)
	return lb
}

func TestProvider_gatewayTCPAndUDPListenersAreAnL4VirtualServiceOnTheVsVip(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	cert := tlsCert(t, "gw-tls", "shop.example.com")
	lb := withL4(gatewayLB(t, cert))
	if _, err := f.p.Ensure(ctx, lb); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	w := f.writes()
	if got := w[len(w)-4:]; !slices.Equal(got, []string{"POST httppolicyset", "POST virtualservice", "POST l4policyset", "POST virtualservice"}) {
		t.Errorf("writes end with %v", got)
	}
	vss := map[string]*models.VirtualService{}
	for _, vs := range objects[models.VirtualService](f, "virtualservice") {
		vss[deref(vs.Name)] = vs
	}
	l7, l4 := vss[lb.Name], vss[lb.Name+"-L4"]
	if l7 == nil || l4 == nil || len(vss) != 2 {
		t.Fatalf("virtual services %v", f.names("virtualservice"))
	}
	if deref(l4.VsvipRef) != deref(l7.VsvipRef) {
		t.Errorf("the L4 virtual service's VsVip %s, the HTTP one's %s: want one VsVip", deref(l4.VsvipRef), deref(l7.VsvipRef))
	}
	var services []string
	for _, svc := range l4.Services {
		services = append(services, fmt.Sprintf("%d %s", *svc.Port, refName(svc.OverrideNetworkProfileRef)))
	}
	if want := []string{"53 System-UDP-Fast-Path", "5432 "}; !slices.Equal(services, want) ||
		refName(l4.ApplicationProfileRef) != "System-L4-Application" {
		t.Errorf("L4 services %v (profile %s), want %v", services, refName(l4.ApplicationProfileRef), want)
	}
	tcpPool := lbmodel.PoolName(lb.Name, lbmodel.TCP, 5432)
	if got, want := poolGroupRatios(f, tcpPool), []string{tcpPool + "-w3:3", tcpPool + ":1"}; !slices.Equal(got, want) {
		t.Errorf("pool group %s: %v, want %v", tcpPool, got, want)
	}
	for _, ps := range objects[models.L4PolicySet](f, "l4policyset") {
		for _, r := range ps.L4ConnectionPolicy.Rules {
			if a := r.Action.SelectPool; deref(a.ActionType) != "L4_RULE_ACTION_SELECT_POOLGROUP" || a.PoolRef != nil {
				t.Errorf("L4 rule %s: %s", deref(r.Name), deref(a.ActionType))
			}
		}
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	// Again: no write. Without the TCP and UDP listeners: their objects go.
	f.sim.ResetCounters()
	if _, err := f.p.Ensure(ctx, withL4(gatewayLB(t, cert))); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes %v, want none", w)
	}
	plain := gatewayLB(t, cert)
	if _, err := f.p.Ensure(ctx, plain); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	want := []string{"DELETE virtualservice", "DELETE l4policyset", "DELETE poolgroup", "DELETE poolgroup", "DELETE pool", "DELETE pool", "DELETE pool"}
	if diff := cmp.Diff(want, f.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(plain, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_gatewayWithTCPListenersOnly(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	name := lbmodel.GatewayLoadBalancerName(cluster, "ns", "tcp")
	lb := withL4(&lbmodel.LoadBalancer{Name: name, Kind: lbmodel.L7, Gateway: "ns/tcp",
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}})
	if _, err := f.p.Ensure(ctx, lb); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if got := f.names("virtualservice"); !slices.Equal(got, []string{name + "-L4"}) {
		t.Errorf("virtual services %v, want the L4 one only", got)
	}
	if got := f.names("httppolicyset"); len(got) != 0 {
		t.Errorf("HTTP policy sets %v, want none", got)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.200.1")}, f.list(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if err := f.p.Delete(ctx, name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, typ := range []string{"virtualservice", "vsvip", "pool", "poolgroup", "l4policyset"} {
		if n := f.names(typ); len(n) != 0 {
			t.Errorf("%s left: %v", typ, n)
		}
	}
}

// poolGroupRatios returns "<pool>:<ratio>" for the members of the pool
// group name.
func poolGroupRatios(f *fixture, name string) []string {
	var out []string
	for _, g := range objects[models.PoolGroup](f, "poolgroup") {
		if deref(g.Name) != name {
			continue
		}
		for _, m := range g.Members {
			out = append(out, fmt.Sprintf("%s:%d", refName(m.PoolRef), *m.Ratio))
		}
	}
	slices.Sort(out)
	return out
}

// An error stops the apply before anything is deleted: the pool group and
// pools of a removed route stay until the policy set that used them is
// written, and every member stays.
func TestProvider_gatewayErrorDeletesNothing(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	cert := tlsCert(t, "gw-tls", "shop.example.com")
	f.ensure(gatewayLB(t, cert))
	before := f.list()
	pools, groups := f.names("pool"), f.names("poolgroup")

	lb := gatewayLB(t, cert)
	web := lb.Pools[1].Name
	lb.HTTP.Rules = slices.DeleteFunc(lb.HTTP.Rules, func(r lbmodel.Rule) bool { return r.Pool == web })
	lb.Pools = lb.Pools[:1]
	lb.Pools[0].Members[0].Enabled = false
	f.sim.AddFault(avisim.Fault{Method: "PUT", Path: "/api/httppolicyset/*", Status: http.StatusInternalServerError, Count: 1})
	f.sim.ResetCounters()
	if _, err := f.v.Ensure(context.Background(), lb); err == nil {
		t.Fatal("Ensure succeeded through a failed write")
	}
	for _, w := range f.writes() {
		if strings.HasPrefix(w, "DELETE") {
			t.Errorf("%s after an error", w)
		}
	}
	if got := f.names("pool"); !slices.Equal(got, pools) {
		t.Errorf("pools %v, were %v", got, pools)
	}
	if got := f.names("poolgroup"); !slices.Equal(got, groups) {
		t.Errorf("pool groups %v, were %v", got, groups)
	}
	after := f.list()
	if len(after) != 1 || len(after[0].Pools) != len(before[0].Pools) {
		t.Errorf("List after the error: %v", after)
	}

	// The next apply converges.
	f.ensure(lb)
	f.listsApplied(lb)
}

// A request rule changed by hand (a query test added, a rule disabled) is
// left out of List and rewritten by the next Ensure.
func TestProvider_gatewayRepairsRulesChangedByHand(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))
	f.ensure(lb)
	ps := objects[models.HTTPPolicySet](f, "httppolicyset")[0]
	ps.HTTPRequestPolicy.Rules[0].Match.Query = &models.QueryMatch{MatchCriteria: ptr("QUERY_MATCH_CONTAINS"), MatchStr: []string{"a=b"}}
	ps.HTTPRequestPolicy.Rules[5].Enable = ptr(false)
	ctx := context.Background()
	s, done, err := f.p.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = update(s, httpPolicyKind.typ, deref(ps.UUID), ps)
	done()
	if err != nil {
		t.Fatalf("change the policy set by hand: %v", err)
	}
	listed := f.list()
	if n, want := len(listed[0].HTTP.Rules), len(lb.HTTP.Rules)-2; n != want {
		t.Errorf("List shows %d rules, want %d (the changed ones left out)", n, want)
	}
	f.sim.ResetCounters()
	f.ensure(lb)
	if diff := cmp.Diff([]string{"PUT httppolicyset"}, f.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

// A member whose weight changes moves from one weight's pool to another's.
// The pool it joins is written before the pool groups and the pool it
// leaves after them, so a write that fails in between never leaves it in
// neither: List still has it, and the next apply converges.
func TestProvider_gatewayWeightChangeNeverDropsAMemberOnError(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	cert := tlsCert(t, "gw-tls", "shop.example.com")
	f.ensure(gatewayLB(t, cert))

	lb := gatewayLB(t, cert)
	web := lb.Pools[1].Name
	lb.Pools[1].Members[0].Weight = 5
	f.sim.AddFault(avisim.Fault{Method: "POST", Path: "/api/pool", Status: http.StatusInternalServerError, Count: 1})
	f.sim.ResetCounters()
	if _, err := f.v.Ensure(context.Background(), lb); err == nil {
		t.Fatal("Ensure succeeded through a failed write")
	}
	for _, w := range f.writes() {
		if strings.HasPrefix(w, "DELETE") || strings.HasPrefix(w, "PUT /api/pool/") {
			t.Errorf("%s after a failed create of the member's new pool", w)
		}
	}
	listed := f.list()
	if len(listed) != 1 {
		t.Fatalf("List after the error: %v", listed)
	}
	i := slices.IndexFunc(listed[0].Pools, func(p lbmodel.Pool) bool { return p.Name == web })
	if i < 0 || len(listed[0].Pools[i].Members) != 1 || listed[0].Pools[i].Members[0].IP != "198.18.0.11" {
		t.Errorf("pool %s after the error: %+v, want its member still there", web, listed[0].Pools)
	}

	f.ensure(lb)
	f.listsApplied(lb)
}

// Two members that swap weights each move to the other's weight pool: both
// pools gain a member and lose one. Whichever of the two writes fails, each
// member is still in a pool (the pools are first written with the union of
// old and new members, and only after the pool groups with the new ones),
// and the next apply converges.
func TestProvider_gatewayWeightSwapNeverDropsAMemberOnError(t *testing.T) {
	for _, failing := range []int32{6, 7} {
		t.Run(fmt.Sprintf("the write of the weight-%d pool fails", failing), func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			cert := tlsCert(t, "gw-tls", "shop.example.com")
			f.ensure(gatewayLB(t, cert))
			poolsOf := func() map[string][]string {
				out := map[string][]string{}
				for _, p := range objects[models.Pool](f, "pool") {
					for _, m := range membersOf(p) {
						out[m.IP] = append(out[m.IP], deref(p.Name))
					}
				}
				return out
			}
			var uuid string
			for _, p := range objects[models.Pool](f, "pool") {
				if strings.HasSuffix(deref(p.Name), fmt.Sprintf("-w%d", failing)) && strings.Contains(deref(p.Name), "api") {
					uuid = deref(p.UUID)
				}
			}
			if uuid == "" {
				t.Fatalf("no weight-%d pool of api among %v", failing, f.names("pool"))
			}

			// 198.18.0.11 (weight 7) and 198.18.0.13 (weight 6) swap.
			lb := gatewayLB(t, cert)
			lb.Pools[0].Members[0].Weight, lb.Pools[0].Members[2].Weight = 6, 7
			f.sim.AddFault(avisim.Fault{Method: "PUT", Path: "/api/pool/" + uuid, Status: http.StatusInternalServerError, Count: 1})
			if _, err := f.v.Ensure(context.Background(), lb); err == nil {
				t.Fatal("Ensure succeeded through a failed write")
			}
			in := poolsOf()
			for _, ip := range []string{"198.18.0.11", "198.18.0.13"} {
				if len(in[ip]) == 0 {
					t.Errorf("member %s is in no pool after the failed write (pools: %v)", ip, in)
				}
			}

			f.ensure(lb)
			f.listsApplied(lb)
		})
	}
}

// listsApplied checks that List returns exactly lb, normalized, as applied
// with the fixture's first VIP.
func (f *fixture) listsApplied(lb *lbmodel.LoadBalancer) {
	f.t.Helper()
	want, err := lbmodel.Normalize(lb)
	if err != nil {
		f.t.Fatal(err)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(want, "198.18.200.1")}, f.list()); diff != "" {
		f.t.Errorf("List (-want +got):\n%s", diff)
	}
}

// A Gateway whose requested address changes gets a new VsVip: a controller
// refuses a new address for an existing vip, and refuses to delete a VsVip
// its two virtual services (HTTP and L4) still use.
func TestProvider_gatewayRequestedAddressMovesBothVirtualServices(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	lb := withL4(gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com")))
	lb.RequestedVIP = "198.18.200.60"
	if _, err := f.p.Ensure(ctx, lb); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	lb.RequestedVIP = "198.18.200.61"
	f.sim.ResetCounters()
	st, err := f.p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure with a new address: %v", err)
	}
	if !slices.Equal(st.VIPs, []string{"198.18.200.61"}) {
		t.Errorf("VIPs %v, want [198.18.200.61]", st.VIPs)
	}
	want := []string{"DELETE virtualservice", "DELETE virtualservice", "DELETE vsvip", "POST vsvip", "POST virtualservice", "POST virtualservice"}
	if diff := cmp.Diff(want, f.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, "198.18.200.61")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

// An HTTPS listener that verifies client certificates (Gateway
// spec.tls.frontend) is refused by name before anything is written, and
// the builder's listener check refuses that listener alone: it is never
// served without the check.
func TestProvider_gatewayRefusesClientCertificateValidation(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))
	ca := tlsCert(t, "ca", "ca.example.com").CertPEM
	lb.Listeners[1].ClientValidation = &lbmodel.ClientValidation{CACertPEM: string(ca)}
	want := "listener HTTPS/443: clientValidation"
	if _, err := providers.Validated(f.v).Ensure(context.Background(), lb); !errors.Is(err, lbmodel.ErrUnsupported) ||
		!strings.Contains(err.Error(), want) {
		t.Errorf("Ensure = %v, want ErrUnsupported naming %q", err, want)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes %v, want none", w)
	}
	mc := providers.ModelCheckerOf(f.v)
	if err := providertest.ListenerRefusal(mc, lb); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the listener check = %v, want the error naming %q", err, want)
	}
}
