package haproxy

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
)

func TestProxiesOf_gatewayStreams(t *testing.T) {
	name := "c1--ns-gw-GW"
	in := &lbmodel.LoadBalancer{Name: name, Kind: lbmodel.L7, Gateway: "ns/gw", VIPs: []string{"198.18.200.1"},
		Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP},
			{Port: 9000, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: name + "-TCP-9000"}},
			{Port: 9000, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: name + "-UDP-9000"}},
			{Port: 8883, Protocol: lbmodel.TLS, SNI: []lbmodel.SNIRoute{{Host: "a.example", Pool: "both"}}},
			{Port: 9443, Protocol: lbmodel.TLS, Terminate: true, SNI: []lbmodel.SNIRoute{{Pool: "both"}}},
		},
		Pools: []lbmodel.Pool{{Name: "both"}, {Name: "grpc", AppProtocol: lbmodel.AppProtocolH2C, InvalidWeight: 2}},
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{{Path: "/", PathType: lbmodel.PathPrefix, Pool: "both"}},
			TLS: []lbmodel.TLSCert{{Secret: "ns/t", Ports: []int32{9443}, Fingerprint: "ff"}}},
	}
	px := ProxiesOf([]Desired{{Cluster: "c1", LB: in}}, testFiles)
	var fronts, backs []string
	for _, f := range px.Frontends {
		fronts = append(fronts, fmt.Sprintf("%s http=%v listener=%s default=%s sni=%d certs=%d", f.Name, f.HTTP, f.Listener,
			f.DefaultBackend, len(f.SNI), len(f.Certificates)))
	}
	for _, b := range px.Backends {
		backs = append(backs, fmt.Sprintf("%s http=%v app=%s pool=%s invalid=%d", b.Name, b.HTTP, b.AppProtocol, b.Pool, b.InvalidWeight))
	}
	want := []string{
		name + "-HTTP-80 http=true listener= default= sni=0 certs=0",
		name + "-TCP-9000 http=false listener=TCP default=" + name + "-TCP-9000 sni=0 certs=0",
		name + "-TLS-8883 http=false listener=TLS default= sni=1 certs=0",
		name + "-TLS-9443 http=false listener=TLS default= sni=1 certs=1",
	}
	if diff := cmp.Diff(want, fronts); diff != "" {
		t.Errorf("frontends (-want +got):\n%s", diff)
	}
	// The UDP listener is not HAProxy's; the pool of HTTP rules and TLS
	// routes has a backend of each mode; an HTTP pool's invalid share is
	// its backend's.
	wantBacks := []string{
		"both http=true app= pool= invalid=0",
		"both:tls http=false app= pool=both invalid=0",
		name + "-TCP-9000 http=false app= pool= invalid=0",
		"grpc http=true app=h2c pool= invalid=2",
	}
	if diff := cmp.Diff(wantBacks, backs); diff != "" {
		t.Errorf("backends (-want +got):\n%s", diff)
	}
}

// What ProxiesOf serves, rendered, parsed back and joined with the
// servers' states, is the model again: listeners, rules, certificates
// (without keys), pools with their members' weights and drain states and
// their invalid shares; another cluster's load balancers are not read.
func TestLoadBalancers_readsBackWhatProxiesOfServes(t *testing.T) {
	l4 := &lbmodel.LoadBalancer{Name: "c1--ns-svc", Service: "ns/svc", VIPs: []string{"198.18.200.1"},
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "c1--ns-svc-TCP-80",
			Members: []lbmodel.Member{{IP: "198.18.0.11", Port: 61000, Enabled: true, Weight: 3}, {IP: "198.18.0.12", Port: 61001}}}}}}
	gw := "c1--ns-gw-GW"
	members := []lbmodel.Member{{IP: "198.18.0.11", Port: 61002, Enabled: true}}
	l7 := &lbmodel.LoadBalancer{Name: gw, Kind: lbmodel.L7, Gateway: "ns/gw", VIPs: []string{"198.18.200.2"},
		Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP},
			{Port: 443, Protocol: lbmodel.HTTPS, ClientValidation: &lbmodel.ClientValidation{CACertPEM: "ca", Optional: true},
				Hostnames: []string{"a.example", "*.example", ""}},
			{Port: 8883, Protocol: lbmodel.TLS, SNI: []lbmodel.SNIRoute{{Host: "a.example", Pool: "both"}}},
			{Port: 9000, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: gw + "-TCP-9000", Members: members}},
		},
		Pools: []lbmodel.Pool{{Name: "both", Members: members},
			{Name: "grpc", AppProtocol: lbmodel.AppProtocolH2C, Members: members, InvalidWeight: 2}},
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{
			{Host: "a.example", Path: "/", PathType: lbmodel.PathPrefix, Pool: "both"},
			{Path: "/g", PathType: lbmodel.PathPrefix, Pool: "grpc", Ports: []int32{80}},
		}, TLS: []lbmodel.TLSCert{{Secret: "ns/t", Fingerprint: "ff", Ports: []int32{443}}}},
	}
	other := &lbmodel.LoadBalancer{Name: "c2--ns-svc", VIPs: []string{"198.18.200.3"},
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "c2--ns-svc-TCP-80",
			Members: []lbmodel.Member{}}}}}
	px := ProxiesOf([]Desired{{"c1", l4}, {"c1", l7}, {"c2", other}}, testFiles)
	parsed, err := Parse(Render(testGlobals, px).Text)
	if err != nil {
		t.Fatal(err)
	}
	var states []ServerState
	for _, b := range px.Backends {
		for _, m := range b.Members {
			s := ServerState{Backend: b.Name, Name: ServerName(m), IP: netip.MustParseAddr(m.IP), Port: m.Port, Weight: Weight(m)}
			if !m.Enabled {
				s.AdminState = adminForcedDrain
			}
			states = append(states, s)
		}
		if b.InvalidWeight > 0 {
			states = append(states, ServerState{Backend: b.Name, Name: InvalidServer, Weight: int(b.InvalidWeight)})
		}
	}

	got := LoadBalancers(parsed, states, "c1")
	for _, lb := range got {
		lbmodel.SortListeners(lb.Listeners)
		lbmodel.SortPools(lb.Pools)
		if lb.HTTP != nil {
			lbmodel.SortRules(lb.HTTP.Rules)
		}
	}
	l4.Listeners[0].Pool.Members = lbmodel.SortMembers(l4.Listeners[0].Pool.Members)
	lbmodel.SortListeners(l7.Listeners)
	lbmodel.SortRules(l7.HTTP.Rules)
	want := map[string]*lbmodel.LoadBalancer{l4.Name: l4, gw: l7}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadBalancers (-want +got):\n%s", diff)
	}
}

// testFiles name the edge's files under /run/edge.
var testFiles = Files{
	Cert: func(fp string) string { return "/run/edge/tls/" + fp + ".pem" },
	CA:   func(pemData string) string { return "/run/edge/ca/" + strconv.Itoa(len(pemData)) + ".pem" },
}
