package haproxy

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeportlocal/npl/lbmodel"
)

// FuzzRenderParse feeds arbitrary rules (JSON) to an HTTP frontend: every
// set of rules lbmodel.Normalize accepts renders into a configuration
// that Parse reads back as the same rules, whatever their values hold
// (quotes, blanks, #, braces). Seeds: the rules of gatewayRules and
// sampleProxies.
func FuzzRenderParse(f *testing.F) {
	for _, rules := range [][]lbmodel.Rule{gatewayRules(), sampleProxies().Frontends[3].Rules} {
		b, err := json.Marshal(rules)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rules []lbmodel.Rule
		if json.Unmarshal(data, &rules) != nil {
			return
		}
		lb := &lbmodel.LoadBalancer{Name: "c1--x", Kind: lbmodel.L7, Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP}, {Port: 8443, Protocol: lbmodel.HTTP}},
			Pools: []lbmodel.Pool{{Name: "c1--ns-gw-a"}, {Name: "c1--ns-ing-L7-ns-api-80"}, {Name: "c1--ns-ing-L7-ns-web-80"}},
			HTTP:  &lbmodel.HTTPRoutes{Rules: rules}}
		n, err := lbmodel.Normalize(lb)
		if err != nil || len(n.HTTP.Rules) == 0 {
			return
		}
		in := Proxies{Frontends: []Frontend{{Name: "c1--x-HTTP-80", Cluster: "c1", LoadBalancer: "c1--x", HTTP: true,
			VIP: netip.MustParseAddr("198.18.200.1"), Port: 80, Rules: n.HTTP.Rules}}}
		text := Render(Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}, in).Text
		checkLines(t, text)
		got, err := Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Frontends) != 1 {
			t.Fatalf("Parse found %d frontends", len(got.Frontends))
		}
		if diff := cmp.Diff(n.HTTP.Rules, got.Frontends[0].Rules); diff != "" {
			t.Fatalf("rules read back (-rendered +parsed):\n%s", diff)
		}
	})
}

// FuzzRenderParseSNI feeds arbitrary SNI routes (JSON) to a TLS listener:
// every set lbmodel.Normalize accepts renders into a configuration that
// Parse reads back as the same routes, one frontend, whatever the hosts
// hold. Seeds: the routes of sampleProxies' TLS listener.
func FuzzRenderParseSNI(f *testing.F) {
	for _, fr := range sampleProxies().Frontends {
		if len(fr.SNI) > 0 {
			b, err := json.Marshal(fr.SNI)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, false)
			f.Add(b, true)
		}
	}
	f.Add([]byte(`[{"host":"a\nfrontend","pool":"c1--ns-gw-a"},{"host":"*.b\u0000","pool":"c1--ns-gw-b"}]`), false)
	f.Fuzz(func(t *testing.T, data []byte, terminate bool) {
		var routes []lbmodel.SNIRoute
		if json.Unmarshal(data, &routes) != nil {
			return
		}
		lb := &lbmodel.LoadBalancer{Name: "c1--x", Kind: lbmodel.L7, Gateway: "ns/gw", Listeners: []lbmodel.Listener{
			{Port: 8883, Protocol: lbmodel.TLS, SNI: routes}},
			Pools: []lbmodel.Pool{{Name: "c1--ns-gw-a"}, {Name: "c1--ns-gw-b"}},
			HTTP:  &lbmodel.HTTPRoutes{}}
		n, err := lbmodel.Normalize(lb)
		if err != nil || len(n.Listeners[0].SNI) == 0 {
			return
		}
		fr := Frontend{Name: "c1--x-TLS-8883", Cluster: "c1", LoadBalancer: "c1--x", Gateway: "ns/gw", Listener: lbmodel.TLS,
			VIP: netip.MustParseAddr("198.18.200.1"), Port: 8883, SNI: n.Listeners[0].SNI}
		if terminate {
			fr.Certificates = []CertFile{{Path: "/run/tls/a.pem", Cert: lbmodel.TLSCert{Secret: "ns/a", Fingerprint: "aa"}}}
		}
		text := Render(Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}, Proxies{Frontends: []Frontend{fr}}).Text
		got, err := Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Frontends) != 1 {
			t.Fatalf("Parse found %d frontends:\n%s", len(got.Frontends), text)
		}
		if diff := cmp.Diff(n.Listeners[0].SNI, got.Frontends[0].SNI); diff != "" {
			t.Fatalf("routes read back (-rendered +parsed):\n%s", diff)
		}
		checkLines(t, text)
	})
}

// checkLines fails t when the configuration text has a line the renderer
// did not start: a value that ended a line.
func checkLines(t *testing.T, text []byte) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(string(text), "\n"), "\n") {
		if line != "" && line[0] != ' ' && line[0] != '#' && !slices.Contains([]string{"global", "defaults"}, line) &&
			!strings.HasPrefix(line, "frontend ") && !strings.HasPrefix(line, "backend ") {
			t.Fatalf("a stray line %q:\n%s", line, text)
		}
	}
}

// FuzzRenderParsePolicy feeds arbitrary policies (JSON) to an HTTP pool:
// every policy lbmodel.Normalize accepts renders into a backend whose
// lines no value can end or add to (names, paths and hosts with quotes,
// #, blanks), with a member whose server keywords stay one word each, and
// Parse reads the policy back. Seeds: the sample's policies.
func FuzzRenderParsePolicy(f *testing.F) {
	for _, b := range sampleProxies().Backends {
		if b.Policy != nil {
			data, err := json.Marshal(b.Policy)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte(`{"persistence":{"type":"Cookie","name":"a#b'c"},"healthCheck":{"type":"HTTP","path":"/x#\n'y","host":"h.example"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p lbmodel.Policy
		if json.Unmarshal(data, &p) != nil {
			return
		}
		lb := &lbmodel.LoadBalancer{Name: "c1--x", Kind: lbmodel.L7, Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}},
			Pools: []lbmodel.Pool{{Name: "c1--x-p", Policy: &p, Members: []lbmodel.Member{{IP: "198.18.0.11", Port: 61000, Enabled: true}}}},
			HTTP:  &lbmodel.HTTPRoutes{DefaultPool: "c1--x-p"}}
		n, err := lbmodel.Normalize(lb)
		if err != nil || n.Pools[0].Policy == nil {
			return
		}
		px := ProxiesOf([]Desired{{Cluster: "c1", LB: &lbmodel.LoadBalancer{Name: n.Name, Kind: n.Kind, Listeners: n.Listeners,
			Pools: n.Pools, HTTP: n.HTTP, VIPs: []string{"198.18.200.1"}}}}, testFiles)
		text := Render(Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}, px).Text
		checkLines(t, text)
		for _, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(line, "    server 198.18.0.11_61000 ") && strings.ContainsAny(strings.ReplaceAll(line, `\ `, ""), "'\"#") {
				t.Fatalf("a server line holds a quote or #: %q", line)
			}
		}
		got, err := Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(got.Backends, func(b Backend) bool { return b.Name == "c1--x-p" })
		if i < 0 {
			t.Fatalf("Parse found no backend c1--x-p:\n%s", text)
		}
		if diff := cmp.Diff(n.Pools[0].Policy, got.Backends[i].Policy); diff != "" {
			t.Fatalf("policy read back (-rendered +parsed):\n%s", diff)
		}
	})
}
