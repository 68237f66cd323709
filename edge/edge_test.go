package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/lbmodel"
)

func lb(name string, vip string, ports ...int32) *lbmodel.LoadBalancer {
	out := &lbmodel.LoadBalancer{Name: name, Service: "ns/x", VIPs: []string{vip}}
	for _, p := range ports {
		out.Listeners = append(out.Listeners, lbmodel.Listener{Port: p, Protocol: lbmodel.TCP,
			Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, p)}})
	}
	return out
}

func TestCheckRequest(t *testing.T) {
	l7 := lb("c1--ns-web-L7", "198.18.200.1", 80)
	l7.Kind, l7.Listeners[0].Protocol, l7.Listeners[0].Pool = lbmodel.L7, lbmodel.HTTP, lbmodel.Pool{}
	l7.Pools = []lbmodel.Pool{{Name: "c1--ns-web-L7-p"}}
	l7.HTTP = &lbmodel.HTTPRoutes{DefaultPool: "c1--ns-web-L7-p"}
	foreignPool := lb("c1--ns-web", "198.18.200.1", 80)
	foreignPool.Listeners[0].Pool.Name = "c2--ns-web-TCP-80"
	noVIP := lb("c1--ns-web", "198.18.200.1", 80)
	noVIP.VIPs = nil
	sticky := lb("c1--ns-web", "198.18.200.1", 80)
	sticky.Listeners[0].Pool.Policy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP}}
	stickyUDP := lb("c1--ns-web", "198.18.200.1", 53)
	stickyUDP.Listeners[0].Protocol, stickyUDP.Listeners[0].Pool.Name = lbmodel.UDP, lbmodel.PoolName("c1--ns-web", lbmodel.UDP, 53)
	stickyUDP.Listeners[0].Pool.Policy = sticky.Listeners[0].Pool.Policy
	for _, c := range []struct {
		name    string
		cluster string
		lb      *lbmodel.LoadBalancer
		want    string // "" for accepted
	}{
		{"valid", "c1", lb("c1--ns-web", "198.18.200.1", 80), ""},
		{"IPv4-mapped VIP is canonical", "c1", lb("c1--ns-web", "::ffff:198.18.200.1", 80), ""},
		{"another cluster's name", "c2", lb("c1--ns-web", "198.18.200.1", 80), "must start with the cluster name"},
		{"no cluster", "", lb("c1--ns-web", "198.18.200.1", 80), "must start with the cluster name"},
		{"no listener", "c1", lb("c1--ns-web", "198.18.200.1"), "no listeners"},
		{"L7", "c1", l7, ""},
		{"no VIP", "c1", noVIP, "want exactly one VIP, got 0"},
		{"bad VIP", "c1", lb("c1--ns-web", "nope", 80), `VIP "nope" is not an IP address`},
		{"a pool in another cluster's names", "c1", foreignPool, `pool c2--ns-web-TCP-80 does not start with the cluster name "c1"`},
		{"a cluster name that owns another's names", "c1-", lb("c1---ns-web", "198.18.200.1", 80), "cluster name"},
		{"a name a configuration would quote", "c1", lb("c1--ns-web\nfrontend x", "198.18.200.1", 80), "holds a character"},
		{"a policy HAProxy serves", "c1", sticky, ""},
		{"a policy the edge cannot serve", "c1", stickyUDP, "pool c1--ns-web-UDP-53: policy persistence.type=SourceIP is not supported by the haproxy provider"},
		{"the unspecified VIP", "c1", lb("c1--ns-web", "0.0.0.0", 8443), "0.0.0.0 is the unspecified address"},
		{"a loopback VIP", "c1", lb("c1--ns-web", "127.0.0.1", 8443), "127.0.0.1 is a loopback address"},
		{"a link-local VIP", "c1", lb("c1--ns-web", "169.254.169.254", 80), "a link-local address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := checkRequest(c.cluster, c.lb)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got.VIPs[0] != "198.18.200.1" {
					t.Errorf("VIP %q, want 198.18.200.1", got.VIPs[0])
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v; want ErrInvalid saying %q", err, c.want)
			}
		})
	}
}

func TestCheckConflicts_aVIPPortIsServedOnce(t *testing.T) {
	e := &Edge{desired: map[lbKey]*lbmodel.LoadBalancer{
		{"c1", "c1--ns-a"}: lb("c1--ns-a", "198.18.200.1", 80, 443),
	}}
	if err := e.checkConflicts("c1", lb("c1--ns-a", "198.18.200.1", 80), nil); err != nil {
		t.Errorf("the same load balancer again: %v", err)
	}
	if err := e.checkConflicts("c2", lb("c2--ns-b", "198.18.200.1", 8080), nil); err != nil {
		t.Errorf("another port of the VIP: %v", err)
	}
	if err := e.checkConflicts("c1", lb("c1--ns-b", "198.18.200.2", 80), nil); err != nil {
		t.Errorf("another VIP: %v", err)
	}
	err := e.checkConflicts("c2", lb("c2--ns-b", "198.18.200.1", 443), nil)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "198.18.200.1:443 is already served by load balancer c1--ns-a of cluster c1") {
		t.Errorf("a taken VIP and port: %v", err)
	}
}

func TestHandler_refusesBadBodiesBeforeTouchingHAProxy(t *testing.T) {
	e, err := New(Config{HAProxyBin: "/nonexistent/haproxy", Dir: filepath.Join(t.TempDir(), "e")})
	if err != nil {
		t.Fatal(err)
	}
	h := e.Handler()
	for _, c := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"unknown field", api.LoadBalancerPath("c1", "c1--ns-web"), `{"name":"c1--ns-web","bogus":1}`, http.StatusBadRequest, `unknown field "bogus"`},
		{"name differs from the path", api.LoadBalancerPath("c1", "c1--ns-web"), `{"name":"c1--ns-other"}`, http.StatusBadRequest, "the body names load balancer"},
		{"not JSON", api.LoadBalancerPath("c1", "c1--ns-web"), `nope`, http.StatusBadRequest, "body"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, asClient(httptest.NewRequest(http.MethodPut, c.path, strings.NewReader(c.body)), "c1"))
			var body api.Error
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if rec.Code != c.status || !strings.Contains(body.Error, c.want) {
				t.Fatalf("HTTP %d %q; want %d saying %q", rec.Code, body.Error, c.status, c.want)
			}
		})
	}
	// Not running yet: List says so rather than reporting nothing.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, asClient(httptest.NewRequest(http.MethodGet, api.LoadBalancersPath("c1"), nil), "c1"))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("List before HAProxy runs: HTTP %d, want 503", rec.Code)
	}
}

// asClient makes r a request of a client whose verified certificate
// names clusters (api.ClusterURI), as the TLS handshake leaves it.
func asClient(r *http.Request, clusters ...string) *http.Request {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "npl-lbsync"}}
	for _, c := range clusters {
		cert.URIs = append(cert.URIs, api.ClusterURI(c))
	}
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	return r
}

// stoppedEdge is an edge whose HAProxy does not run: a change is checked
// with haproxy -c and saved, and answered ErrUnavailable (skipped without
// the haproxy binary).
func stoppedEdge(t *testing.T) *Edge {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("haproxy not found: run make deps (apt-get install haproxy)")
	}
	e, err := New(Config{HAProxyBin: bin, Dir: filepath.Join(t.TempDir(), "e")})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A client may read and change the load balancers of the clusters its
// certificate names only: any client of the CA could change any cluster's
// before (REFERENCE 17). A body over the limit is 413, naming the limit.
func TestHandler_authorizesEachClusterByTheClientCertificate(t *testing.T) {
	e := stoppedEdge(t)
	h := e.Handler()
	body := `{"name":"c2--ns_web","service":"ns/web","vips":["198.18.200.1"],"listeners":[{"port":80,"protocol":"TCP","pool":{"name":"c2--ns_web-TCP-80","members":[]}}]}`
	for _, c := range []struct {
		name   string
		req    *http.Request
		status int
		want   string
	}{
		{"PUT of another cluster", asClient(httptest.NewRequest(http.MethodPut, api.LoadBalancerPath("c2", "c2--ns_web"), strings.NewReader(body)), "c1"),
			http.StatusForbidden, `the client certificate "npl-lbsync" does not name cluster c2: it needs the URI SAN npl://cluster/c2`},
		{"DELETE of another cluster", asClient(httptest.NewRequest(http.MethodDelete, api.LoadBalancerPath("c2", "c2--ns_web"), nil), "c1", "c3"),
			http.StatusForbidden, "does not name cluster c2"},
		{"GET of another cluster", asClient(httptest.NewRequest(http.MethodGet, api.LoadBalancerPath("c2", "c2--ns_web"), nil), "c1"),
			http.StatusForbidden, "does not name cluster c2"},
		{"List of another cluster", asClient(httptest.NewRequest(http.MethodGet, api.LoadBalancersPath("c2"), nil)),
			http.StatusForbidden, "does not name cluster c2"},
		{"no client certificate", httptest.NewRequest(http.MethodGet, api.LoadBalancersPath("c2"), nil),
			http.StatusForbidden, "does not name cluster c2"},
		{"a cluster name that could own another's objects", asClient(httptest.NewRequest(http.MethodGet, api.LoadBalancersPath("c2--x"), nil), "c2--x"),
			http.StatusBadRequest, `cluster name: "c2--x" must not contain "--"`},
		{"a body over the limit", asClient(httptest.NewRequest(http.MethodPut, api.LoadBalancerPath("c2", "c2--ns_web"),
			strings.NewReader(`{"name":"`+strings.Repeat("a", maxBody)+`"}`)), "c2"),
			http.StatusRequestEntityTooLarge, "larger than the limit of 8388608 bytes"},
		{"its own cluster", asClient(httptest.NewRequest(http.MethodPut, api.LoadBalancerPath("c2", "c2--ns_web"), strings.NewReader(body)), "c1", "c2"),
			http.StatusServiceUnavailable, ""}, // accepted, saved: HAProxy does not run here
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, c.req)
			var got api.Error
			_ = json.Unmarshal(rec.Body.Bytes(), &got)
			if rec.Code != c.status || !strings.Contains(got.Error, c.want) {
				t.Fatalf("HTTP %d %q; want %d saying %q", rec.Code, got.Error, c.status, c.want)
			}
		})
	}
	if _, ok := e.desired[lbKey{"c2", "c2--ns_web"}]; !ok {
		t.Error("the authorized PUT was not kept")
	}
}

// A PUT that replaces an old name swaps the load balancer of its owner for
// the new one in one change, and passes its VIP and ports over; one of
// another owner (the old names were ambiguous) stays, and its VIP and port
// are still its own.
func TestPut_replacesTheOldNameOfItsOwnerOnly(t *testing.T) {
	e := stoppedEdge(t)
	ctx := context.Background()
	put := func(l *lbmodel.LoadBalancer, replaces string) error {
		_, err := e.Put(ctx, "c1", l, replaces)
		if errors.Is(err, ErrUnavailable) { // saved; HAProxy does not run here
			return nil
		}
		return err
	}
	old := lb("c1--team-a-x", "198.18.200.1", 80)
	old.Service = "team-a/x"
	if err := put(old, ""); err != nil {
		t.Fatal(err)
	}
	// The other Service that had the same old name asks for it: refused
	// (the VIP and port are the owner's), and the owner's stays.
	impostor := lb("c1--team_a-x", "198.18.200.1", 80)
	impostor.Service = "team/a-x"
	if err := put(impostor, "c1--team-a-x"); !errors.Is(err, ErrConflict) {
		t.Fatalf("the impostor's takeover: %v, want a conflict", err)
	}
	if e.desired[lbKey{"c1", "c1--team-a-x"}] == nil {
		t.Fatal("the impostor's takeover removed the owner's load balancer")
	}
	// The owner renames it: one load balancer, the new name, same VIP.
	renamed := lb("c1--team-a_x", "198.18.200.1", 80)
	renamed.Service = "team-a/x"
	if err := put(renamed, "c1--team-a-x"); err != nil {
		t.Fatalf("the owner's takeover: %v", err)
	}
	var names []string
	for k := range e.desired {
		names = append(names, k.name)
	}
	if len(names) != 1 || names[0] != "c1--team-a_x" {
		t.Errorf("desired load balancers %v, want [c1--team-a_x]", names)
	}
	// Again (the provider retries): nothing left to replace, no error.
	if err := put(renamed, "c1--team-a-x"); err != nil {
		t.Errorf("the takeover again: %v", err)
	}
	// Another cluster's name cannot be replaced.
	if _, err := e.Put(ctx, "c1", renamed, "c2--team-a-x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("replacing another cluster's name: %v, want ErrInvalid", err)
	}
}

func TestNew_refusesASocketPathHAProxyCannotBind(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if _, err := New(Config{HAProxyBin: "haproxy", Dir: dir}); err == nil || !strings.Contains(err.Error(), "longer than HAProxy's limit") {
		t.Fatalf("New with a long directory = %v; want an error about the socket path", err)
	}
}

// The runtime commands that failed for another load balancer's members do
// not fail this one's write; its own, and what concerns the whole edge, do.
func TestOwnErrors_keepsWhatConcernsTheLoadBalancer(t *testing.T) {
	ctx := context.Background()
	theirs := &memberError{lb: "c1--ns-b", err: errors.New("load balancer c1--ns-b: add member x: refused")}
	mine := &memberError{lb: "c1--ns-a", err: errors.New("load balancer c1--ns-a: add member y: refused")}
	down := fmt.Errorf("%w: admin socket", ErrUnavailable)

	if err := ownErrors(ctx, errors.Join(theirs), "c1--ns-a"); err != nil {
		t.Errorf("another load balancer's failure alone: %v, want nil", err)
	}
	if err := ownErrors(ctx, theirs, "c1--ns-a"); err != nil {
		t.Errorf("another load balancer's failure, not joined: %v, want nil", err)
	}
	err := ownErrors(ctx, errors.Join(theirs, mine, down), "c1--ns-a")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "c1--ns-a") || strings.Contains(err.Error(), "c1--ns-b") {
		t.Errorf("mixed: %v, want this load balancer's and the edge's errors only", err)
	}
	if err := ownErrors(ctx, nil, "c1--ns-a"); err != nil {
		t.Errorf("no error: %v", err)
	}
}
