package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	l7.Pools = []lbmodel.Pool{{Name: "p"}}
	l7.HTTP = &lbmodel.HTTPRoutes{DefaultPool: "p"}
	noVIP := lb("c1--ns-web", "198.18.200.1", 80)
	noVIP.VIPs = nil
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
	if err := e.checkConflicts("c1", lb("c1--ns-a", "198.18.200.1", 80)); err != nil {
		t.Errorf("the same load balancer again: %v", err)
	}
	if err := e.checkConflicts("c2", lb("c2--ns-b", "198.18.200.1", 8080)); err != nil {
		t.Errorf("another port of the VIP: %v", err)
	}
	if err := e.checkConflicts("c1", lb("c1--ns-b", "198.18.200.2", 80)); err != nil {
		t.Errorf("another VIP: %v", err)
	}
	err := e.checkConflicts("c2", lb("c2--ns-b", "198.18.200.1", 443))
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
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, c.path, strings.NewReader(c.body)))
			var body api.Error
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if rec.Code != c.status || !strings.Contains(body.Error, c.want) {
				t.Fatalf("HTTP %d %q; want %d saying %q", rec.Code, body.Error, c.status, c.want)
			}
		})
	}
	// Not running yet: List says so rather than reporting nothing.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, api.LoadBalancersPath("c1"), nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("List before HAProxy runs: HTTP %d, want 503", rec.Code)
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
