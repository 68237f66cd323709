package haproxy

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/providers"
)

// FuzzRenderParse feeds arbitrary rules (JSON) to an HTTP frontend: every
// set of rules providers.Normalize accepts renders into a configuration
// that Parse reads back as the same rules, whatever their values hold
// (quotes, blanks, #, braces). Seeds: the rules of gatewayRules and
// sampleProxies.
func FuzzRenderParse(f *testing.F) {
	for _, rules := range [][]providers.Rule{gatewayRules(), sampleProxies().Frontends[3].Rules} {
		b, err := json.Marshal(rules)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rules []providers.Rule
		if json.Unmarshal(data, &rules) != nil {
			return
		}
		lb := &providers.LoadBalancer{Name: "c1--x", Kind: providers.L7, Listeners: []providers.Listener{
			{Port: 80, Protocol: providers.HTTP}, {Port: 8443, Protocol: providers.HTTP}},
			Pools: []providers.Pool{{Name: "c1--ns-gw-a"}, {Name: "c1--ns-ing-L7-ns-api-80"}, {Name: "c1--ns-ing-L7-ns-web-80"}},
			HTTP:  &providers.HTTPRoutes{Rules: rules}}
		n, err := providers.Normalize(lb)
		if err != nil || len(n.HTTP.Rules) == 0 {
			return
		}
		in := Proxies{Frontends: []Frontend{{Name: "c1--x-HTTP-80", Cluster: "c1", LoadBalancer: "c1--x", HTTP: true,
			VIP: netip.MustParseAddr("198.18.200.1"), Port: 80, Rules: n.HTTP.Rules}}}
		got, err := Parse(Render(Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}, in).Text)
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
