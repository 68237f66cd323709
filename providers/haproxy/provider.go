// Package haproxy is the HAProxy provider: it states each load balancer to
// every configured npl-edge (the command beside HAProxy on an edge host)
// over mutual TLS, and counts a change applied only when every edge has
// it. HAProxy serves TCP listeners and, for L7 load balancers (Ingress,
// Gateway), HTTP and HTTPS listeners with their rules (HTTP/2 and h2c pools
// included) and a Gateway's TCP and TLS listeners; UDP listeners (HAProxy
// 2.6 has no UDP load balancing) are served by npl-edge's nftables table,
// and reported as warnings, one naming each edge that cannot serve them
// (npl-edge --udp=off, or no nftables there), while the others are served.
// List gives each load balancer once, and shows where the edges disagree
// (see List).
// VIPs come from vipPool, as the edges do not allocate them.
package haproxy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/vippool"
)

type provider struct {
	cfg    *Config
	client *http.Client

	// mu guards reserved: the VIP chosen for a load balancer that no edge
	// serves yet, so that concurrent Ensures never choose the same one;
	// and applied: the VIP each load balancer was last applied with on
	// every edge, so that the next Ensure of it (a member change) states
	// that VIP at once, one call per edge, instead of reading the edges
	// first. A failed call forgets it: the next Ensure reads the edges.
	mu       sync.Mutex
	reserved map[string]netip.Addr
	applied  map[string]netip.Addr
}

var (
	_ providers.Provider      = (*provider)(nil)
	_ providers.PolicyCapable = (*provider)(nil)
)

// PolicyCapabilities are npl-edge's (api.PolicyCapabilities): what HAProxy
// and the edge's UDP table express of a pool's policy.
func (p *provider) PolicyCapabilities() lbmodel.PolicyCapabilities { return api.PolicyCapabilities() }

func newProvider(cfg *Config, client *http.Client) *provider {
	return &provider{cfg: cfg, client: client, reserved: map[string]netip.Addr{}, applied: map[string]netip.Addr{}}
}

// EdgeError is the failure of one edge; the message names it.
type EdgeError struct {
	Edge string
	Err  error
}

func (e *EdgeError) Error() string { return "edge " + e.Edge + ": " + e.Err.Error() }
func (e *EdgeError) Unwrap() error { return e.Err }

// Ensure states lb to every edge. The VIP is lb.RequestedVIP, else the one
// an edge already serves it on (remembered after a successful Ensure), else
// the one an edge serves its LegacyName on for the same owner, else the
// first free address of vipPool. A load balancer an edge serves under the
// LegacyName for lb's owner is renamed: the request says it replaces it,
// and each edge swaps them in one reload.
func (p *provider) Ensure(ctx context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
	vip, replaces, err := p.vipFor(ctx, lb)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure %s: %w", lb.Name, err)
	}
	req := api.LoadBalancerRequest{LoadBalancer: api.FromModel(lb), Replaces: replaces}
	req.VIPs = []string{vip.String()}
	if lb.IsL7() {
		// The model never serialises key material: the certificates of
		// an HTTPS listener travel beside it, to the edges only.
		for _, c := range lb.HTTP.TLS {
			req.Certificates = append(req.Certificates, api.Certificate{Secret: c.Secret, CertPEM: string(c.CertPEM), KeyPEM: string(c.KeyPEM)})
		}
	}
	data, err := json.Marshal(req)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure %s: %w", lb.Name, err)
	}
	results := make([]api.EnsureResult, len(p.cfg.Edges))
	err = p.eachEdge(func(i int, edge string) error {
		return p.call(ctx, edge, http.MethodPut, api.LoadBalancerPath(p.cfg.common.ClusterName, lb.Name), data, &results[i])
	})
	p.mu.Lock()
	if err != nil {
		delete(p.applied, lb.Name)
		var he *httpError
		if errors.As(err, &he) && he.status == http.StatusConflict {
			// An edge serves the chosen VIP and a port of it for
			// another load balancer: the next Ensure chooses again.
			delete(p.reserved, lb.Name)
		}
	} else {
		delete(p.reserved, lb.Name)
		p.applied[lb.Name] = vip
	}
	p.mu.Unlock()
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure %s: %w", lb.Name, err)
	}
	status := providers.Status{VIPs: []string{vip.String()}, Warnings: unsupportedWarnings(p.cfg.Edges, results)}
	changed := slices.ContainsFunc(results, func(r api.EnsureResult) bool { return r.Changed })
	if replaces != "" {
		klog.FromContext(ctx).Info("HAProxy load balancer taken over from its old name", "loadBalancer", lb.Name, "replaces", replaces, "vip", vip)
	} else if changed {
		klog.FromContext(ctx).V(2).Info("HAProxy load balancer applied", "loadBalancer", lb.Name, "vip", vip, "edges", len(p.cfg.Edges))
	}
	return status, nil
}

// Delete removes the load balancer from every edge. A name holds one load
// balancer on an edge, of either kind; L4 and L7 names never meet (the L7
// suffix is upper case).
func (p *provider) Delete(ctx context.Context, name string, _ lbmodel.Kind) error {
	if !lbmodel.OwnedBy(p.cfg.common.ClusterName, name) {
		return fmt.Errorf("delete %s: not owned by cluster %s", name, p.cfg.common.ClusterName)
	}
	p.mu.Lock()
	delete(p.applied, name)
	p.mu.Unlock()
	err := p.eachEdge(func(_ int, edge string) error {
		var res api.DeleteResult
		return p.call(ctx, edge, http.MethodDelete, api.LoadBalancerPath(p.cfg.common.ClusterName, name), nil, &res)
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	p.mu.Lock()
	delete(p.reserved, name)
	p.mu.Unlock()
	return nil
}

// unsupportedWarnings are the warnings of Ensure: one per edge that does
// not serve some listeners, naming the edge, the listeners and the edge's
// reason, in the order of the edges. Each edge answers for itself: one
// with --udp=off beside one that serves UDP is said so.
func unsupportedWarnings(edges []string, results []api.EnsureResult) []string {
	var out []string
	for i, r := range results {
		if len(r.Unsupported) > 0 {
			reason := r.Reason
			if reason == "" {
				reason = api.ReasonNoUDP
			}
			out = append(out, fmt.Sprintf("edge %s does not serve listener(s) %s: %s", edges[i], strings.Join(r.Unsupported, ", "), reason))
		}
	}
	return out
}

// List returns what HAProxy serves on the edges: every load balancer of
// the cluster found on any edge, once. One that every edge serves alike
// is returned as they serve it. One the edges serve differently (an edge
// lags, or lacks it) is returned as the first edge that has it serves it,
// except its pools whose members differ between the edges (mergeEdges):
// there each member not every edge serves alike is listed twice, enabled
// and disabled, a pool no model can equal (a model lists a member once),
// so that nplctl pools shows drift whichever edge is right, and no edge's
// lag is hidden behind another's copy. Garbage collection reads names and
// kinds only. An edge that does not answer fails the call, so that
// nothing is collected on a partial view.
func (p *provider) List(ctx context.Context) ([]lbmodel.LoadBalancer, error) {
	lists := make([]api.List, len(p.cfg.Edges))
	err := p.eachEdge(func(i int, edge string) error {
		return p.call(ctx, edge, http.MethodGet, api.LoadBalancersPath(p.cfg.common.ClusterName), nil, &lists[i])
	})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	// copies[name][i] is edge i's copy of the load balancer name, or nil.
	copies := map[string][]*lbmodel.LoadBalancer{}
	for i, l := range lists {
		for _, w := range l.LoadBalancers {
			lb := w.Model()
			if !lbmodel.OwnedBy(p.cfg.common.ClusterName, lb.Name) {
				continue
			}
			if copies[lb.Name] == nil {
				copies[lb.Name] = make([]*lbmodel.LoadBalancer, len(lists))
			}
			copies[lb.Name][i] = lb
		}
	}
	out := make([]lbmodel.LoadBalancer, 0, len(copies))
	for name, cs := range copies {
		lb, differ := mergeEdges(cs)
		if len(differ) > 0 {
			edges := make([]string, 0, len(differ))
			for _, i := range differ {
				edges = append(edges, p.cfg.Edges[i])
			}
			klog.FromContext(ctx).V(2).Info("The edges serve a load balancer differently", "loadBalancer", name, "edges", edges)
		}
		out = append(out, lb)
	}
	slices.SortFunc(out, func(a, b lbmodel.LoadBalancer) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// mergeEdges returns one load balancer for the copies of it the edges
// serve (copies[i] is edge i's, nil where it has none; at least one is
// set), and the edges whose copy differs from the first one's. Alike
// copies give that copy. Otherwise the first copy is returned with the
// listeners (by protocol and port) and L7 pools (by name) the others add,
// and each pool's members are those every edge serves alike, plus every
// member some edge serves otherwise or not at all, both enabled and
// disabled.
func mergeEdges(copies []*lbmodel.LoadBalancer) (lbmodel.LoadBalancer, []int) {
	first := slices.IndexFunc(copies, func(lb *lbmodel.LoadBalancer) bool { return lb != nil })
	out := copies[first].Clone()
	var differ []int
	for i, c := range copies {
		if i != first && (c == nil || !lbmodel.SameModel(copies[first], c)) {
			differ = append(differ, i)
		}
	}
	if len(differ) == 0 {
		return *out, nil
	}
	for _, c := range copies {
		if c == nil {
			continue
		}
		for _, l := range c.Listeners {
			if !slices.ContainsFunc(out.Listeners, func(o lbmodel.Listener) bool { return o.Protocol == l.Protocol && o.Port == l.Port }) {
				l.Pool.Members = slices.Clone(l.Pool.Members)
				out.Listeners = append(out.Listeners, l)
			}
		}
		for _, pool := range c.Pools {
			if !slices.ContainsFunc(out.Pools, func(o lbmodel.Pool) bool { return o.Name == pool.Name }) {
				pool.Members = slices.Clone(pool.Members)
				out.Pools = append(out.Pools, pool)
			}
		}
	}
	lbmodel.SortListeners(out.Listeners)
	lbmodel.SortPools(out.Pools)
	merge := func(pool *lbmodel.Pool) {
		if pool.Name == "" {
			return
		}
		served := make([][]lbmodel.Member, len(copies)) // each edge's members of the pool
		for i, c := range copies {
			served[i] = poolMembers(c, pool.Name)
		}
		var members []lbmodel.Member
		seen := map[netip.AddrPort]bool{}
		for _, ms := range served {
			for _, m := range ms {
				key := netip.AddrPortFrom(parseAddr(m.IP), uint16(m.Port))
				if seen[key] {
					continue
				}
				seen[key] = true
				alike := !slices.ContainsFunc(served, func(other []lbmodel.Member) bool { return !slices.Contains(other, m) })
				if alike {
					members = append(members, m)
					continue
				}
				on, off := m, m
				on.Enabled, off.Enabled = true, false
				members = append(members, off, on)
			}
		}
		slices.SortStableFunc(members, lbmodel.CompareMembers)
		pool.Members = members
	}
	for i := range out.Listeners {
		merge(&out.Listeners[i].Pool)
	}
	for i := range out.Pools {
		merge(&out.Pools[i])
	}
	return *out, differ
}

// poolMembers returns the members of the pool named name in lb (nil when
// lb is nil or has no such pool).
func poolMembers(lb *lbmodel.LoadBalancer, name string) []lbmodel.Member {
	if lb == nil {
		return nil
	}
	for _, l := range lb.Listeners {
		if l.Pool.Name == name {
			return l.Pool.Members
		}
	}
	for _, p := range lb.Pools {
		if p.Name == name {
			return p.Members
		}
	}
	return nil
}

// parseAddr parses a member's IP (the edges answer valid ones; anything
// else is the zero Addr).
func parseAddr(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}

// vipFor chooses the VIP of lb: the requested one, else the one it was
// last applied with by this provider, else the one an edge serves it on,
// else the one an edge serves it on under its old name (lbmodel.LegacyName)
// for the same owner, else a free one. replaces is that old name when an
// edge serves it for lb's owner (until lb was applied once).
func (p *provider) vipFor(ctx context.Context, lb *lbmodel.LoadBalancer) (vip netip.Addr, replaces string, err error) {
	p.mu.Lock()
	vip, ok := p.applied[lb.Name]
	p.mu.Unlock()
	if ok {
		if lb.RequestedVIP != "" {
			vip, err = netip.ParseAddr(lb.RequestedVIP)
		}
		return vip, "", err
	}
	// The VIP it already has, from the edges that serve it: one small
	// read per edge, rather than the whole list. An edge that does not
	// answer does not stop the others from getting the change (Ensure then
	// fails naming it); but a new VIP is chosen only when every edge
	// answered, lest it be one the silent edge serves.
	served, readErr := p.served(ctx, lb.Name)
	var old []*lbmodel.LoadBalancer
	if legacy := lbmodel.LegacyName(p.cfg.common.ClusterName, lb); legacy != "" {
		var oldErr error
		old, oldErr = p.served(ctx, legacy)
		readErr = errors.Join(readErr, oldErr)
		// The old names were ambiguous: only lb's owner takes it over.
		old = slices.DeleteFunc(old, func(o *lbmodel.LoadBalancer) bool { return !lbmodel.SameOwner(o, lb) })
		if len(old) > 0 {
			replaces = legacy
		}
	}
	if lb.RequestedVIP != "" {
		a, err := netip.ParseAddr(lb.RequestedVIP)
		return a, replaces, err
	}
	for _, s := range append(served, old...) {
		for _, v := range s.VIPs {
			if a, err := netip.ParseAddr(v); err == nil {
				return a, replaces, nil
			}
		}
	}
	if readErr != nil {
		return netip.Addr{}, "", readErr
	}
	vip, err = p.freeVIP(ctx, lb)
	return vip, replaces, err
}

// served returns the copies of the load balancer name that the edges
// serve (none from an edge that does not), and the errors of the edges
// that did not answer.
func (p *provider) served(ctx context.Context, name string) ([]*lbmodel.LoadBalancer, error) {
	copies := make([]*api.LoadBalancer, len(p.cfg.Edges))
	err := p.eachEdge(func(i int, edge string) error {
		var s api.LoadBalancer
		err := p.call(ctx, edge, http.MethodGet, api.LoadBalancerPath(p.cfg.common.ClusterName, name), nil, &s)
		var he *httpError
		if errors.As(err, &he) && he.status == http.StatusNotFound {
			return nil
		}
		if err == nil {
			copies[i] = &s
		}
		return err
	})
	var out []*lbmodel.LoadBalancer
	for _, c := range copies {
		if c != nil {
			out = append(out, c.Model())
		}
	}
	return out, err
}

// freeVIP chooses a VIP no load balancer of the edges holds, nor one this
// provider chose or applied since: the one the edges serve lb on if they
// do by now, else the first free address of vipPool.
func (p *provider) freeVIP(ctx context.Context, lb *lbmodel.LoadBalancer) (netip.Addr, error) {
	lbs, err := p.List(ctx)
	if err != nil {
		return netip.Addr{}, err
	}
	inUse := map[netip.Addr]bool{}
	for _, other := range lbs {
		for _, v := range other.VIPs {
			a, err := netip.ParseAddr(v)
			if err != nil {
				continue
			}
			if other.Name == lb.Name {
				return a, nil
			}
			inUse[a] = true
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.reserved[lb.Name]; ok {
		return a, nil
	}
	// The VIPs chosen or applied since the list was read are in use too:
	// another Ensure may have reserved one and applied it meanwhile.
	for _, held := range []map[string]netip.Addr{p.reserved, p.applied} {
		for name, a := range held {
			if name != lb.Name {
				inUse[a] = true
			}
		}
	}
	a, err := vippool.First(p.cfg.common.VIPPool, func(a netip.Addr) bool { return inUse[a] })
	if err != nil {
		return netip.Addr{}, err
	}
	p.reserved[lb.Name] = a
	return a, nil
}

// eachEdge runs fn for every edge in parallel and joins the errors, each
// naming its edge.
func (p *provider) eachEdge(fn func(i int, edge string) error) error {
	errs := make([]error, len(p.cfg.Edges))
	var wg sync.WaitGroup
	for i, edge := range p.cfg.Edges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(i, edge); err != nil {
				errs[i] = &EdgeError{Edge: edge, Err: err}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// call makes one API call and decodes the answer into out; an error answer
// becomes an error with the edge's message.
func (p *provider) call(ctx context.Context, edge, method, path string, body []byte, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, edge+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e api.Error
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return &httpError{status: resp.StatusCode, msg: e.Error}
		}
		return &httpError{status: resp.StatusCode, msg: method + " " + path}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// httpError is an error answer of an edge: its message and status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.msg, e.status) }
