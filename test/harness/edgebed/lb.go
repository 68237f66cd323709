package edgebed

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/registry"
)

// AdminSocket is the path of the admin socket of the edge's HAProxy
// worker: in npl-edge's state directory, or the host's when attached.
func (e *EdgeHost) AdminSocket() string {
	if e.b.Attach {
		return e.hostAdminSocket()
	}
	return filepath.Join(e.StateDir(), "admin.sock")
}

// ServerSessions reads, from HAProxy's own counters ("show stat"), how many
// connections each server of a backend took so far, by server name
// (haproxy.ServerName of the member).
func (e *EdgeHost) ServerSessions(ctx context.Context, backend string) (map[string]int64, error) {
	out, err := haproxy.Command(ctx, e.AdminSocket(), "show stat")
	if err != nil {
		return nil, err
	}
	rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(out, "# "))).ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, fmt.Errorf("show stat: unreadable answer %q: %w", out, err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	px, sv, stot := col["pxname"], col["svname"], col["stot"]
	if _, ok := col["stot"]; !ok {
		return nil, fmt.Errorf("show stat: no stot column in %q", rows[0])
	}
	got := map[string]int64{}
	for _, r := range rows[1:] {
		if len(r) <= stot || r[px] != backend || r[sv] == "BACKEND" || r[sv] == "FRONTEND" {
			continue
		}
		n, err := strconv.ParseInt(r[stot], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("show stat: %s/%s stot %q: %w", r[px], r[sv], r[stot], err)
		}
		got[r[sv]] = n
	}
	return got, nil
}

// GetVia sends one request to url from the client namespace and returns
// the body (the name of the Pod or backend that answered) and the server of
// backend, on edge e, that HAProxy sent it to: the one whose connection
// count grew. Requests must not overlap on that backend.
func (b *Bed) GetVia(ctx context.Context, c *http.Client, url string, e *EdgeHost, backend string) (body, server string, err error) {
	before, err := e.ServerSessions(ctx, backend)
	if err != nil {
		return "", "", err
	}
	body, err = Get(ctx, c, url)
	if err != nil {
		return "", "", err
	}
	after, err := e.ServerSessions(ctx, backend)
	if err != nil {
		return body, "", err
	}
	for name, n := range after {
		if n > before[name] {
			if server != "" {
				return body, "", fmt.Errorf("backend %s: servers %s and %s both took a connection: requests overlap", backend, server, name)
			}
			server = name
		}
	}
	if server == "" {
		return body, "", fmt.Errorf("backend %s: no server took the request", backend)
	}
	return body, server, nil
}

// OpenProviderPool is OpenProvider with the VIPs taken from pool.
func (b *Bed) OpenProviderPool(ctx context.Context, cluster string, pool []netip.Prefix, section []byte) (providers.Provider, error) {
	cfg, err := registry.Parse("haproxy", providers.Common{ClusterName: cluster, VIPPool: pool}, section)
	if err != nil {
		return nil, err
	}
	return cfg.Open(ctx)
}

// LBBackend is the bed as the load balancer behind npl-lbsync in the demo and
// the tests of test/harness/stack (it has the methods of stack.Backend): its
// Pools are what the edge's HAProxy serves, read through the provider.
type LBBackend struct {
	Bed     *Bed
	Cluster string
	p       providers.Provider
}

// NewLBBackend reads the load balancers of cluster from the bed's first
// edge, whose npl-edge must run.
func NewLBBackend(ctx context.Context, b *Bed, cluster string) (*LBBackend, error) {
	p, err := b.OpenProvider(ctx, cluster, b.ProviderSection(cluster))
	if err != nil {
		return nil, err
	}
	return &LBBackend{Bed: b, Cluster: cluster, p: p}, nil
}

// Name is the provider name.
func (l *LBBackend) Name() string { return "haproxy" }

// ProviderConfig is the provider section of npl-lbsync's configuration.
func (l *LBBackend) ProviderConfig() string {
	var section map[string]any
	_ = json.Unmarshal(l.Bed.ProviderSection(l.Cluster), &section)
	s, _ := json.Marshal(map[string]any{"name": "haproxy", "haproxy": section})
	return "provider: " + string(s) + "\n"
}

// Pools returns the pools HAProxy serves for the load balancer lbName, by
// pool name, and its VIPs.
func (l *LBBackend) Pools(lbName string) (map[string][]lbmodel.Member, []string, bool, error) {
	lbs, err := l.p.List(context.Background())
	if err != nil {
		return nil, nil, false, err
	}
	for _, lb := range lbs {
		if lb.Name != lbName {
			continue
		}
		pools := map[string][]lbmodel.Member{}
		for _, ln := range lb.Listeners {
			if ln.Pool.Name != "" {
				pools[ln.Pool.Name] = ln.Pool.Members
			}
		}
		for _, p := range lb.Pools {
			pools[p.Name] = p.Members
		}
		return pools, lb.VIPs, true, nil
	}
	return nil, nil, false, nil
}

// List returns the load balancers of the cluster the edge serves.
func (l *LBBackend) List(ctx context.Context) ([]lbmodel.LoadBalancer, error) { return l.p.List(ctx) }

// Writes counts the changes the first edge applied.
func (l *LBBackend) Writes() int {
	st, err := l.Bed.Status(context.Background())
	if err != nil {
		return -1
	}
	return int(st.Writes)
}

// AddForeign puts a load balancer of another cluster on the edge and
// returns a check that it is still there.
func (l *LBBackend) AddForeign() (func() bool, error) {
	ctx := context.Background()
	p, err := l.Bed.OpenProvider(ctx, l.Cluster+"-foreign", l.Bed.ProviderSection(l.Cluster+"-foreign"))
	if err != nil {
		return nil, err
	}
	name := lbmodel.LoadBalancerName(l.Cluster+"-foreign", "other", "svc")
	lb := &lbmodel.LoadBalancer{Name: name, Service: "other/svc", Listeners: []lbmodel.Listener{{Port: 9999, Protocol: lbmodel.TCP,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 9999),
			Members: []lbmodel.Member{{IP: l.Bed.BridgeIP.String(), Port: 9, Enabled: true}}}}}}
	if _, err := p.Ensure(ctx, lb); err != nil {
		return nil, errors.Join(errors.New("add a foreign load balancer"), err)
	}
	return func() bool {
		lbs, err := p.List(ctx)
		if err != nil {
			return false
		}
		for _, got := range lbs {
			if got.Name == name && len(got.Listeners) == 1 && len(got.Listeners[0].Pool.Members) == 1 {
				return true
			}
		}
		return false
	}, nil
}

// Close stops the edge and removes the bed.
func (l *LBBackend) Close() { _ = l.Bed.Close() }

// WaitUp waits until every server of backend on edge e is up (its health
// check passes) and there are n of them.
func (e *EdgeHost) WaitUp(ctx context.Context, backend string, n int) error {
	var last string
	for {
		sts, err := haproxy.ShowServersState(ctx, e.AdminSocket())
		up, all := 0, 0
		for _, s := range sts {
			if s.Backend == backend {
				all++
				if s.Up && s.Enabled() {
					up++
				}
			}
		}
		if err == nil && all == n && up == n {
			return nil
		}
		last = fmt.Sprintf("%d of %d servers up (want %d), err %v", up, all, n, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("backend %s: %s: %w", backend, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
