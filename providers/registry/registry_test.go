package registry

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/mock"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

func TestNames_listsEveryProviderSorted(t *testing.T) {
	if diff := cmp.Diff([]string{"avi", "bigip", "haproxy", "mock"}, Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	for _, n := range Names() {
		if !Known(n) {
			t.Errorf("Known(%q) = false", n)
		}
	}
	if Known("f5") {
		t.Error(`Known("f5") = true`)
	}
}

func TestParse_buildsTheNamedProvider(t *testing.T) {
	common := providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/29")}}
	cfg, err := Parse("mock", common, []byte(`{"failCalls":1}`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	p, err := cfg.Open(context.Background())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	m, ok := providers.Unwrap(p).(*mock.Mock)
	if !ok {
		t.Fatalf("Open(mock) = %T behind the check, want *mock.Mock", providers.Unwrap(p))
	}
	// failCalls: 1 fails the first call; the VIP comes from the common pool.
	lb := model("web")
	if _, err := p.Ensure(context.Background(), lb); !errors.Is(err, mock.ErrInjected) {
		t.Errorf("first Ensure = %v, want the injected failure", err)
	}
	if st, err := p.Ensure(context.Background(), lb); err != nil || len(st.VIPs) != 1 || st.VIPs[0] != "203.0.113.1" {
		t.Errorf("second Ensure = %v, %v; want VIP 203.0.113.1", st, err)
	}
	if c := m.Counters(); c.Ensure != 2 {
		t.Errorf("mock counters = %+v, want 2 Ensures", c)
	}
}

// model is load balancer svc of cluster c1: one TCP listener, one member.
func model(svc string) *lbmodel.LoadBalancer {
	name := lbmodel.LoadBalancerName("c1", "shop", svc)
	return &lbmodel.LoadBalancer{Name: name, Service: "shop/" + svc, Listeners: []lbmodel.Listener{{
		Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 80),
			Members: []lbmodel.Member{{IP: "198.18.0.11", Port: 61000, Enabled: true}}},
	}}}
}

// writeFile writes content into a new file of dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// backend is a load balancer (a simulator, or the mock itself) and the
// configuration section of the provider that drives it.
type backend struct {
	section  map[string]any
	requests func() int // requests or calls the load balancer received
	reset    func()
	state    func() any // everything the load balancer holds
	// bind, when set, hands the backend the opened provider (the mock).
	bind func(providers.Provider)
}

func newBackend(t *testing.T, name string) backend {
	dir := t.TempDir()
	switch name {
	case "avi":
		sim := avisim.New(avisim.Options{Username: "admin", Password: "s3cret"})
		if _, err := sim.Start(); err != nil {
			t.Fatalf("start the Avi simulator: %v", err)
		}
		t.Cleanup(func() { sim.Close() })
		return backend{
			section: map[string]any{"controller": sim.Host(), "vipNetwork": "vip-net",
				"usernameFile": writeFile(t, dir, "username", "admin\n"), "passwordFile": writeFile(t, dir, "password", "s3cret\n"),
				"caFile": writeFile(t, dir, "ca.crt", string(sim.CACertPEM()))},
			requests: func() int { return len(sim.Requests()) }, reset: sim.ResetCounters,
			state: func() any { return sim.Dump() },
		}
	case "bigip":
		sim := bigipsim.New(bigipsim.Options{Username: "admin", Password: "s3cret"})
		if err := sim.Start(); err != nil {
			t.Fatalf("start the BIG-IP simulator: %v", err)
		}
		t.Cleanup(sim.Close)
		return backend{
			section: map[string]any{"url": sim.URL(), "insecure": true,
				"usernameFile": writeFile(t, dir, "username", "admin\n"), "passwordFile": writeFile(t, dir, "password", "s3cret\n")},
			requests: sim.Writes, reset: sim.ResetCounters,
			state: func() any { return sim.Dump() },
		}
	case "haproxy":
		return fakeEdge(t, dir)
	case "mock":
		state := filepath.Join(dir, "state.json")
		var m *mock.Mock
		b := backend{section: map[string]any{"stateFile": state}}
		// The mock is its own load balancer: its counters are the requests.
		b.requests = func() int { c := m.Counters(); return int(c.Ensure + c.Delete) }
		b.state = func() any { return m.State().LoadBalancers }
		b.reset = func() {}
		b.bind = func(p providers.Provider) { m = providers.Unwrap(p).(*mock.Mock) }
		return b
	}
	t.Fatalf("no backend for provider %s", name)
	return backend{}
}

// An SCTP-only Service builds a model without listeners. Whichever provider
// is configured, such a model must not reach the load balancer: BIG-IP would
// delete the Service's objects, Avi would fail and retry forever, the mock
// would assign a VIP.
func TestOpen_noProviderReceivesAModelWithoutListeners(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			b := newBackend(t, name)
			raw, err := json.Marshal(b.section)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(name, providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/29")}}, raw)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			p, err := cfg.Open(context.Background())
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if c, ok := providers.Unwrap(p).(interface{ Close() error }); ok {
				t.Cleanup(func() { _ = c.Close() })
			}
			if b.bind != nil {
				b.bind(p)
			}
			if _, err := p.Ensure(context.Background(), model("web")); err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			before := b.state()
			b.reset()
			requests := b.requests()
			for _, svc := range []string{"web", "sctp-only"} {
				lb := model(svc)
				lb.Listeners = nil
				_, err := p.Ensure(context.Background(), lb)
				var invalid *lbmodel.InvalidModelError
				if !errors.As(err, &invalid) || !errors.Is(err, lbmodel.ErrNoListeners) {
					t.Errorf("Ensure(%s without listeners) = %v, want an InvalidModelError for ErrNoListeners", svc, err)
				}
			}
			if n := b.requests() - requests; n != 0 {
				t.Errorf("the load balancer received %d requests, want none", n)
			}
			if diff := cmp.Diff(before, b.state()); diff != "" {
				t.Errorf("the load balancer changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestParse_errors(t *testing.T) {
	tests := []struct {
		name, provider, section, wantErr string
	}{
		{"unknown provider lists the valid ones", "f5", `{}`, `unknown provider "f5" (valid: avi, bigip, haproxy, mock)`},
		{"empty name", "", `{}`, `unknown provider "" (valid: avi, bigip, haproxy, mock)`},
		{"the provider's own error is kept as is", "mock", `{"latency":"x"}`, `latency: time: invalid duration "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.provider, providers.Common{ClusterName: "c1"}, []byte(tt.section))
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// fakeEdge is an npl-edge API that accepts every PUT and lists what it was
// given: enough to count the requests the haproxy provider makes (the real
// edge and HAProxy are tested in test/haproxy).
func fakeEdge(t *testing.T, dir string) backend {
	var mu sync.Mutex
	var requests int
	lbs := map[string]lbmodel.LoadBalancer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests++
		switch r.Method {
		case http.MethodPut:
			var lb lbmodel.LoadBalancer
			if err := json.NewDecoder(r.Body).Decode(&lb); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			lbs[lb.Name] = lb
			_ = json.NewEncoder(w).Encode(map[string]any{"changed": true})
		case http.MethodGet:
			out := []lbmodel.LoadBalancer{}
			for _, lb := range lbs {
				out = append(out, lb)
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"loadBalancers": out})
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"deleted": true})
		}
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "npl-lbsync"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return backend{
		section: map[string]any{"edges": []string{srv.URL},
			"certFile": writeFile(t, dir, "tls.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))),
			"keyFile":  writeFile(t, dir, "tls.key", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))),
			"caFile":   writeFile(t, dir, "ca.crt", string(caPEM))},
		requests: func() int { mu.Lock(); defer mu.Unlock(); return requests },
		reset:    func() {},
		state: func() any {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(lbs)
		},
	}
}
