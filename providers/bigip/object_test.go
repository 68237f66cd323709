package bigip

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

// Every kind goes through one ensure sequence, so every kind survives a
// create that meets an object the read before it missed (made in between
// by another instance): BIG-IP answers 409 (a policy's draft, 400
// 01070734), the provider reads the object,
// checks it is the load balancer's, and writes only what differs.
func TestProvider_l7AdoptsObjectsFoundOnCreate(t *testing.T) {
	cert := tlsCert(t, "shop-tls", "shop.example.com")
	lb := ingressLB(cert)
	profile := lb.Name + "_shop_shop-tls-TLS"
	tests := []struct {
		name   string
		missed string // the path whose read misses the object
		edit   map[string]any
		writes map[string]int
	}{
		{"client-ssl profile", "ltm/profile/client-ssl/~", map[string]any{"sniDefault": "false"},
			map[string]int{"POST client-ssl": 1, "PATCH client-ssl": 1}},
		{"certificate", "sys/file/ssl-cert/~", nil,
			map[string]int{"POST upload": 1, "POST ssl-cert": 1}},
		// BIG-IP answers a draft made while the published policy exists
		// with 400 01070734 "Published policy ... exists, use create-draft"
		// rather than 409 (REFERENCE §18).
		{"policy", "ltm/policy/~", nil, map[string]int{"POST ltm-policy": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.ensure(t, lb)
			if tt.edit != nil {
				e.do(t, "PATCH", "/mgmt/tm/ltm/profile/client-ssl/~npl-c1~"+profile, tt.edit)
			}
			want := e.sim.Dump()
			if _, err := e.sim.InjectFault(bigipsim.Fault{Method: "GET", Path: tt.missed, Status: 404, Count: 1}); err != nil {
				t.Fatal(err)
			}
			e.sim.ResetCounters()
			if _, err := e.prov.Ensure(context.Background(), lb); err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if diff := cmp.Diff(tt.writes, writesOnly(e.sim.Calls())); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if tt.edit == nil {
				if diff := cmp.Diff(want, e.sim.Dump()); diff != "" {
					t.Errorf("configuration (-want +got):\n%s", diff)
				}
			} else if got := e.sim.Dump().ClientSSLProfiles; len(got) != 1 || !got[0].SNIDefault {
				t.Errorf("client-ssl profiles after the repair: %+v", got)
			}
		})
	}
}
