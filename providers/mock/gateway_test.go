package mock

import (
	"context"
	"encoding/pem"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/providertest"
)

// gatewayStreamsModel is a Gateway's load balancer with every kind of
// listener: HTTP, a TCP listener with weighted members, a UDP listener, a
// passthrough TLS listener with SNI routes, a terminating one, an h2c
// pool, and a pool that answers the share of invalid backends 500.
func gatewayStreamsModel() *lbmodel.LoadBalancer {
	name := lbmodel.GatewayLoadBalancerName(cluster, "shop", "gw")
	grpc := lbmodel.GatewayPoolName(name, "shop", "grpc", 0)
	half := lbmodel.GatewayPoolName(name, "shop", "half", 0)
	tls := lbmodel.GatewayPoolName(name, "shop", "tls", 0)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("cert-t")})
	weighted := member("198.18.0.12", 61002)
	weighted.Weight = 70
	return &lbmodel.LoadBalancer{
		Name: name, Kind: lbmodel.L7, Gateway: "shop/gw",
		Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP},
			{Port: 9000, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 9000),
				Members: []lbmodel.Member{member("198.18.0.11", 61002), weighted}}},
			{Port: 5300, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.UDP, 5300),
				Members: []lbmodel.Member{member("198.18.0.11", 61003)}}},
			{Port: 8883, Protocol: lbmodel.TLS, SNI: []lbmodel.SNIRoute{{Host: "*.example.com", Pool: tls}, {Host: "a.example.com", Pool: grpc}}},
			{Port: 9443, Protocol: lbmodel.TLS, Terminate: true, SNI: []lbmodel.SNIRoute{{Pool: tls}}},
		},
		Pools: []lbmodel.Pool{
			{Name: grpc, AppProtocol: lbmodel.AppProtocolH2C, Members: []lbmodel.Member{member("198.18.0.11", 61000)}},
			{Name: tls, Members: []lbmodel.Member{member("198.18.0.11", 61001)}},
			{Name: half, Members: []lbmodel.Member{member("198.18.0.11", 61004)}, InvalidWeight: 1},
		},
		HTTP: &lbmodel.HTTPRoutes{
			Rules: []lbmodel.Rule{{Path: "/pkg.Svc", PathType: lbmodel.PathPrefix, Pool: grpc, Ports: []int32{80}},
				{Path: "/half", PathType: lbmodel.PathPrefix, Pool: half, Ports: []int32{80}}},
			TLS: []lbmodel.TLSCert{{Secret: "shop/t", Ports: []int32{9443}, Fingerprint: lbmodel.CertFingerprint(cert),
				CertPEM: cert, KeyPEM: []byte("key-t")}},
		},
	}
}

func TestMock_gatewayStreamsAreStoredAndListedExactly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	m := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	lb := gatewayStreamsModel()
	vips := mustEnsure(t, m, lb)
	got, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{listed(lb, vips[0])}, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	// A reopened mock holds the same model: no write.
	m2 := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	mustEnsure(t, m2, gatewayStreamsModel())
	if w := m2.Counters().Writes; w != 0 {
		t.Errorf("Ensure after reopen wrote %d times, want 0", w)
	}
	if got, _ := m2.List(ctx); len(got) != 1 || !cmp.Equal(listed(lb, vips[0]), got[0]) {
		t.Errorf("List after reopen: %+v", got)
	}
}

func TestMock_gatewayStreamsWriteOnlyWhatChanged(t *testing.T) {
	tests := []struct {
		name   string
		change func(*lbmodel.LoadBalancer)
		writes int64
	}{
		{"nothing", func(*lbmodel.LoadBalancer) {}, 0},
		{"the SNI routes in another order", func(lb *lbmodel.LoadBalancer) {
			s := lb.Listeners[3].SNI
			s[0], s[1] = s[1], s[0]
		}, 0},
		{"an SNI route's pool", func(lb *lbmodel.LoadBalancer) { lb.Listeners[3].SNI[0].Pool = lb.Pools[0].Name }, 1},
		{"an SNI host", func(lb *lbmodel.LoadBalancer) { lb.Listeners[3].SNI[1].Host = "b.example.com" }, 1},
		{"terminate", func(lb *lbmodel.LoadBalancer) {
			lb.Listeners[3].Terminate = true
			lb.HTTP.TLS[0].Ports = []int32{8883, 9443}
		}, 1},
		{"a pool's appProtocol", func(lb *lbmodel.LoadBalancer) { lb.Pools[0].AppProtocol = "" }, 1},
		{"a TCP member's weight", func(lb *lbmodel.LoadBalancer) { lb.Listeners[1].Pool.Members[1].Weight = 30 }, 1},
		{"a pool's invalid weight", func(lb *lbmodel.LoadBalancer) { lb.Pools[2].InvalidWeight = 2 }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMock(t, Config{Common: common("203.0.113.0/29")})
			mustEnsure(t, m, gatewayStreamsModel())
			lb := gatewayStreamsModel()
			tt.change(lb)
			vips := mustEnsure(t, m, lb)
			if got := m.Counters().Writes - 1; got != tt.writes {
				t.Errorf("writes after the change: %d, want %d", got, tt.writes)
			}
			if got, _ := m.List(context.Background()); len(got) != 1 || !cmp.Equal(listed(lb, vips[0]), got[0]) {
				t.Errorf("List after the change: %+v", got)
			}
		})
	}
}

// The mock serves no TLS: a listener that verifies client certificates is
// refused by name, and its check refuses that listener alone.
func TestMock_refusesClientCertificateValidation(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	lb := gatewayStreamsModel()
	lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: 9443, Protocol: lbmodel.HTTPS,
		ClientValidation: &lbmodel.ClientValidation{CACertPEM: string(lb.HTTP.TLS[0].CertPEM)}})
	lb.Listeners = slices.DeleteFunc(lb.Listeners, func(l lbmodel.Listener) bool { return l.Protocol == lbmodel.TLS && l.Port == 9443 })
	want := "listener HTTPS/9443: clientValidation"
	if _, err := m.Ensure(context.Background(), lb); !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), want) {
		t.Errorf("Ensure = %v, want ErrUnsupported naming %q", err, want)
	}
	if got, _ := m.List(context.Background()); len(got) != 0 {
		t.Errorf("List = %v, want nothing stored", got)
	}
	if err := providertest.ListenerRefusal(m, lb); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the listener check = %v, want the error naming %q", err, want)
	}
	if err := providertest.ListenerRefusal(m, gatewayStreamsModel()); err != nil {
		t.Errorf("the listener check of a model the mock serves: %v", err)
	}
}

// The mock answers no request: a rule that answers cross-origin requests
// is refused by name, and the rule check refuses that rule alone.
func TestMock_refusesCORS(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	lb := gatewayStreamsModel()
	lb.HTTP.Rules[0].CORS = &lbmodel.CORS{AllowOrigins: []string{"https://a.example"}, MaxAgeSeconds: 5}
	want := "cors (cross-origin requests"
	if _, err := m.Ensure(context.Background(), lb); !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), want) {
		t.Errorf("Ensure = %v, want ErrUnsupported naming %q", err, want)
	}
	if got, _ := m.List(context.Background()); len(got) != 0 {
		t.Errorf("List = %v, want nothing stored", got)
	}
	if err := providertest.RuleRefusal(m, lb); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the rule check = %v, want the error naming %q", err, want)
	}
	if err := providertest.RuleRefusal(m, gatewayStreamsModel()); err != nil {
		t.Errorf("the rule check of a model the mock serves: %v", err)
	}
}
