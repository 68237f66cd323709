// Package mock is an in-memory load balancer that implements
// providers.Provider: the demo's default provider and the tests' workhorse.
// It allocates VIPs from the configured pool, writes only when the desired
// model differs from what it holds, counts every call, can persist its state
// to a file so that it survives a restart of npl-lbsync as a real load
// balancer would, and can be told to fail or slow down, from Go or over HTTP.
// It keeps L7 load balancers (pools, host and path rules, default pool; a
// Gateway's TCP, UDP and TLS listeners with their SNI routes, h2c pools)
// as it keeps L4 ones; of their certificates it keeps what a real load
// balancer reports, the Secret, hosts and fingerprint, never the PEM data.
package mock

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/internal/atomicfile"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/vippool"
)

// ErrInjected is the error of a call failed by FailNext or failCalls, and of
// SetFault with a nil error.
var ErrInjected = errors.New("mock: injected failure")

// Mock is the in-memory load balancer. It is safe for concurrent use.
type Mock struct {
	cluster    string
	vipPool    []netip.Prefix
	stateFile  string
	allowFault bool
	now        func() time.Time

	mu sync.Mutex
	// lbs holds every load balancer, normalised (sorted), VIPs set. Those of
	// another cluster (from a shared state file) are kept but not touched.
	lbs        map[string]*lbmodel.LoadBalancer
	vipOwner   map[netip.Addr]string
	counters   Counters
	latency    time.Duration
	failNext   int
	faultErr   error
	faultUntil time.Time
	// stateStamp identifies the state file content last loaded or saved,
	// so that a change made by another process sharing it (a second
	// replica, as two replicas share one real load balancer) is reloaded.
	stateStamp fileStamp
}

type fileStamp struct {
	modTime time.Time
	size    int64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{modTime: fi.ModTime(), size: fi.Size()}
}

// refresh reloads the state file when another process changed it. Called
// with m.mu held.
func (m *Mock) refresh() error {
	if m.stateFile == "" {
		return nil
	}
	// A vanished file is not an empty load balancer: keep what we have.
	if st := stampOf(m.stateFile); st == (fileStamp{}) || st == m.stateStamp {
		return nil
	}
	lbs, owners := m.lbs, m.vipOwner
	m.lbs, m.vipOwner = map[string]*lbmodel.LoadBalancer{}, map[netip.Addr]string{}
	if err := m.load(); err != nil {
		m.lbs, m.vipOwner = lbs, owners
		return err
	}
	return nil
}

// State is a snapshot of the mock: every load balancer sorted by name, with
// sorted listeners and members, and the call counters.
type State struct {
	LoadBalancers []lbmodel.LoadBalancer `json:"loadBalancers"`
	Counters      Counters               `json:"counters"`
}

// Counters count the calls made since the mock was opened; they are not
// persisted. Calls failed by an injected fault count as calls and failures.
type Counters struct {
	Ensure int64 `json:"ensure"`
	Delete int64 `json:"delete"`
	List   int64 `json:"list"`
	// Writes counts the Ensures that changed something and the Deletes that
	// removed something.
	Writes int64 `json:"writes"`
	// Failures counts the calls failed by an injected fault.
	Failures int64 `json:"failures"`
	// PerLoadBalancer holds the counts of each load balancer name.
	PerLoadBalancer map[string]LoadBalancerCounters `json:"perLoadBalancer"`
}

// LoadBalancerCounters count the calls made for one load balancer.
type LoadBalancerCounters struct {
	Ensure int64 `json:"ensure"`
	Delete int64 `json:"delete"`
	Writes int64 `json:"writes"`
}

// New opens a mock. With cfg.StateFile set, the state saved there is loaded
// (a missing file is an empty state) and every change is saved to it.
func New(cfg Config) (*Mock, error) {
	if cfg.Common.ClusterName == "" {
		return nil, errors.New("open mock: no cluster name")
	}
	m := &Mock{
		cluster:    cfg.Common.ClusterName,
		vipPool:    slices.Clone(cfg.Common.VIPPool),
		stateFile:  cfg.StateFile,
		allowFault: cfg.AllowFaultInjection,
		now:        time.Now,
		lbs:        map[string]*lbmodel.LoadBalancer{},
		vipOwner:   map[netip.Addr]string{},
		counters:   Counters{PerLoadBalancer: map[string]LoadBalancerCounters{}},
		latency:    cfg.Latency,
		failNext:   cfg.FailCalls,
	}
	if m.stateFile != "" {
		if err := m.load(); err != nil {
			return nil, fmt.Errorf("open mock: %w", err)
		}
	}
	return m, nil
}

// Ensure makes the load balancer lb.Name match lb, a model that passed
// lbmodel.Normalize (the registry opens the mock behind
// providers.Validated). It writes nothing when the stored load balancer
// already equals lb. The VIP is lb.RequestedVIP when set (an error if
// another load balancer holds it), else the one it already has, else the
// first free address of the VIP pool.
func (m *Mock) Ensure(ctx context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
	name := lb.Name
	var status providers.Status
	err := m.call(ctx, kindEnsure, name, func() error {
		desired, err := m.normalise(lb)
		if err != nil {
			return err
		}
		prev, exists := m.lbs[name]
		if exists && sameModel(prev, desired) {
			status.VIPs = slices.Clone(prev.VIPs)
			return nil
		}
		// The load balancer of its owner under the name of npl-lbsync 0.x
		// is renamed, VIP and all; one of another owner stays.
		legacy := lbmodel.LegacyName(m.cluster, desired)
		old := m.lbs[legacy]
		if exists || old == nil || !lbmodel.SameOwner(old, desired) {
			old = nil
		}
		from := prev
		if old != nil {
			from = old
			m.remove(legacy)
		}
		vip, err := m.pickVIP(desired.RequestedVIP, from)
		if err != nil {
			if old != nil {
				m.put(old)
			}
			return err
		}
		desired.VIPs = []string{vip.String()}
		m.put(desired)
		if err := m.save(); err != nil {
			m.restore(name, prev)
			if old != nil {
				m.put(old)
			}
			return err
		}
		if old != nil {
			klog.FromContext(ctx).Info("Mock load balancer taken over from its old name", "loadBalancer", name, "replaces", legacy)
		}
		m.countWrite(name)
		status.VIPs = slices.Clone(desired.VIPs)
		klog.FromContext(ctx).V(2).Info("Mock load balancer written", "loadBalancer", name, "vip", vip,
			"listeners", len(desired.Listeners))
		return nil
	})
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure %s: %w", name, err)
	}
	return status, nil
}

// Delete removes the load balancer name of the given kind and releases its
// VIP. Deleting one that does not exist is not an error and counts no
// write; as on a real load balancer, where the objects of each kind differ,
// one of the other kind does not exist.
func (m *Mock) Delete(ctx context.Context, name string, kind lbmodel.Kind) error {
	err := m.call(ctx, kindDelete, name, func() error {
		if !lbmodel.OwnedBy(m.cluster, name) {
			return fmt.Errorf("not owned by cluster %s", m.cluster)
		}
		prev, exists := m.lbs[name]
		if !exists || prev.IsL7() != (kind == lbmodel.L7) {
			return nil
		}
		m.remove(name)
		if err := m.save(); err != nil {
			m.restore(name, prev)
			return err
		}
		m.countWrite(name)
		klog.FromContext(ctx).V(2).Info("Mock load balancer deleted", "loadBalancer", name)
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// List returns the load balancers of this cluster sorted by name.
func (m *Mock) List(ctx context.Context) ([]lbmodel.LoadBalancer, error) {
	var out []lbmodel.LoadBalancer
	err := m.call(ctx, kindList, "", func() error {
		out = m.snapshot(func(name string) bool { return lbmodel.OwnedBy(m.cluster, name) })
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list load balancers: %w", err)
	}
	return out, nil
}

// State returns a snapshot of every load balancer and of the counters.
func (m *Mock) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return State{LoadBalancers: m.snapshot(nil), Counters: m.countersCopy()}
}

// Counters returns a copy of the call counters.
func (m *Mock) Counters() Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.countersCopy()
}

// SetFault makes every call fail with err (ErrInjected when nil) until the
// time until; a zero or past time clears it.
func (m *Mock) SetFault(err error, until time.Time) {
	if err == nil {
		err = ErrInjected
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faultErr, m.faultUntil = err, until
}

// FailNext makes the next n calls fail with ErrInjected; n <= 0 clears it.
func (m *Mock) FailNext(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failNext = max(n, 0)
}

// ClearFaults cancels SetFault and FailNext.
func (m *Mock) ClearFaults() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failNext, m.faultErr, m.faultUntil = 0, nil, time.Time{}
}

// SetLatency sets the delay added to every call.
func (m *Mock) SetLatency(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.latency = max(d, 0)
}

type callKind int

const (
	kindEnsure callKind = iota
	kindDelete
	kindList
)

// call waits the latency, then, under the lock, counts the call, applies an
// injected fault and otherwise runs op. op must leave the state unchanged
// when it fails.
func (m *Mock) call(ctx context.Context, kind callKind, name string, op func() error) error {
	m.mu.Lock()
	latency := m.latency
	m.mu.Unlock()
	waitErr := wait(ctx, latency)

	m.mu.Lock()
	defer m.mu.Unlock()
	m.countCall(kind, name)
	if waitErr != nil {
		return waitErr
	}
	if err := m.fault(); err != nil {
		m.counters.Failures++
		return err
	}
	if err := m.refresh(); err != nil {
		return err
	}
	return op()
}

func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Mock) fault() error {
	if m.failNext > 0 {
		m.failNext--
		return ErrInjected
	}
	if m.faultErr != nil && m.now().Before(m.faultUntil) {
		return m.faultErr
	}
	return nil
}

func (m *Mock) countCall(kind callKind, name string) {
	per := m.counters.PerLoadBalancer[name]
	switch kind {
	case kindEnsure:
		m.counters.Ensure++
		per.Ensure++
	case kindDelete:
		m.counters.Delete++
		per.Delete++
	case kindList:
		m.counters.List++
		return
	}
	if name != "" {
		m.counters.PerLoadBalancer[name] = per
	}
}

func (m *Mock) countWrite(name string) {
	m.counters.Writes++
	per := m.counters.PerLoadBalancer[name]
	per.Writes++
	m.counters.PerLoadBalancer[name] = per
}

func (m *Mock) countersCopy() Counters {
	c := m.counters
	c.PerLoadBalancer = make(map[string]LoadBalancerCounters, len(m.counters.PerLoadBalancer))
	for k, v := range m.counters.PerLoadBalancer {
		c.PerLoadBalancer[k] = v
	}
	return c
}

// snapshot returns deep copies of the load balancers keep accepts (all when
// nil), sorted by name.
func (m *Mock) snapshot(keep func(name string) bool) []lbmodel.LoadBalancer {
	out := make([]lbmodel.LoadBalancer, 0, len(m.lbs))
	for name, lb := range m.lbs {
		if keep == nil || keep(name) {
			out = append(out, *lb.Clone())
		}
	}
	slices.SortFunc(out, func(a, b lbmodel.LoadBalancer) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// normalise returns what the mock stores of lb: a copy without VIPs and,
// as a real load balancer reports them, certificates without PEM data.
func (m *Mock) normalise(lb *lbmodel.LoadBalancer) (*lbmodel.LoadBalancer, error) {
	if !lbmodel.OwnedBy(m.cluster, lb.Name) {
		return nil, fmt.Errorf("not owned by cluster %s", m.cluster)
	}
	if err := m.CheckModel(lb); err != nil {
		return nil, err
	}
	out := lb.Clone()
	out.VIPs = nil
	if out.HTTP != nil {
		for i, c := range out.HTTP.TLS {
			out.HTTP.TLS[i] = c.WithoutKeys()
		}
	}
	return out, nil
}

// pickVIP returns the VIP for a load balancer whose stored version is prev
// (nil when new): the requested one if free, else prev's, else the first
// free address of the pool.
func (m *Mock) pickVIP(requested string, prev *lbmodel.LoadBalancer) (netip.Addr, error) {
	name := ""
	if prev != nil {
		name = prev.Name
	}
	if requested != "" {
		addr, err := netip.ParseAddr(requested)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("requested VIP: %w", err)
		}
		if owner, used := m.vipOwner[addr]; used && owner != name {
			return netip.Addr{}, fmt.Errorf("requested VIP %s is in use by %s", addr, owner)
		}
		return addr, nil
	}
	if prev != nil && len(prev.VIPs) > 0 {
		if addr, err := netip.ParseAddr(prev.VIPs[0]); err == nil {
			return addr, nil
		}
	}
	return vippool.First(m.vipPool, func(a netip.Addr) bool {
		_, used := m.vipOwner[a]
		return used
	})
}

// put stores lb (VIPs set), releasing the VIP its previous version held.
func (m *Mock) put(lb *lbmodel.LoadBalancer) {
	m.releaseVIPs(lb.Name)
	m.lbs[lb.Name] = lb
	for _, v := range lb.VIPs {
		if addr, err := netip.ParseAddr(v); err == nil {
			m.vipOwner[addr] = lb.Name
		}
	}
}

func (m *Mock) remove(name string) {
	m.releaseVIPs(name)
	delete(m.lbs, name)
}

// restore puts back prev (nil: nothing) after a failed save.
func (m *Mock) restore(name string, prev *lbmodel.LoadBalancer) {
	if prev == nil {
		m.remove(name)
		return
	}
	m.put(prev)
}

func (m *Mock) releaseVIPs(name string) {
	if old, ok := m.lbs[name]; ok {
		for _, v := range old.VIPs {
			if addr, err := netip.ParseAddr(v); err == nil && m.vipOwner[addr] == name {
				delete(m.vipOwner, addr)
			}
		}
	}
}

// sameModel reports whether the stored a already matches the desired b;
// VIPs are the mock's to choose and are not compared.
func sameModel(a, b *lbmodel.LoadBalancer) bool {
	x, y := *a, *b
	x.VIPs, y.VIPs = nil, nil
	return lbmodel.SameModel(&x, &y)
}

// persisted is the content of the state file.
type persisted struct {
	Version       int                    `json:"version"`
	LoadBalancers []lbmodel.LoadBalancer `json:"loadBalancers"`
}

const stateVersion = 1

// save writes the whole state to the state file atomically: a temporary file
// in the same directory, fsync, rename, fsync of the directory.
func (m *Mock) save() error {
	if m.stateFile == "" {
		return nil
	}
	data, err := json.MarshalIndent(persisted{Version: stateVersion, LoadBalancers: m.snapshot(nil)}, "", "  ")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := atomicfile.Write(m.stateFile, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	m.stateStamp = stampOf(m.stateFile)
	return nil
}

// load reads the state file; a missing file is an empty state.
func (m *Mock) load() error {
	m.stateStamp = stampOf(m.stateFile)
	data, err := os.ReadFile(m.stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	var p persisted
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("load state %s: %w", m.stateFile, err)
	}
	if p.Version != stateVersion {
		return fmt.Errorf("load state %s: version %d, want %d", m.stateFile, p.Version, stateVersion)
	}
	for i := range p.LoadBalancers {
		lb := &p.LoadBalancers[i]
		if lb.Name == "" {
			return fmt.Errorf("load state %s: load balancer %d has no name", m.stateFile, i)
		}
		if _, dup := m.lbs[lb.Name]; dup {
			return fmt.Errorf("load state %s: load balancer %s given twice", m.stateFile, lb.Name)
		}
		for _, v := range lb.VIPs {
			addr, err := netip.ParseAddr(v)
			if err != nil {
				return fmt.Errorf("load state %s: load balancer %s: VIP %q: %w", m.stateFile, lb.Name, v, err)
			}
			if owner, used := m.vipOwner[addr]; used {
				return fmt.Errorf("load state %s: VIP %s held by both %s and %s", m.stateFile, addr, owner, lb.Name)
			}
		}
		m.put(lb)
	}
	return nil
}

// PolicyCapabilities: the mock records every policy field, so that tests
// and nplctl read what npl-lbsync asked for.
func (m *Mock) PolicyCapabilities() lbmodel.PolicyCapabilities {
	all := lbmodel.PolicySupport{
		Persistence:            []lbmodel.PersistenceType{lbmodel.PersistSourceIP, lbmodel.PersistCookie, lbmodel.PersistHeader},
		PersistenceIdleTimeout: true,
		HealthChecks:           []lbmodel.HealthCheckType{lbmodel.CheckTCP, lbmodel.CheckHTTP},
		HealthCheckHost:        true,
		Algorithms:             []lbmodel.AlgorithmType{lbmodel.RoundRobin, lbmodel.LeastConnections, lbmodel.ConsistentHash},
		HashKeys:               []lbmodel.HashKey{lbmodel.HashSourceIP, lbmodel.HashHeader, lbmodel.HashCookie},
		SlowStart:              true, MaxConnections: true, Timeouts: true, Retry: true, RetryBackoff: true,
		BackendTLS: true, BackendTLSURI: true, BackendTLSManySANs: true, BackendTLSOtherSAN: true,
	}
	return lbmodel.PolicyCapabilities{Provider: Name, TCP: all, UDP: all, HTTP: all}
}

var _ providers.ModelChecker = (*Mock)(nil)

// CheckModel refuses a listener that verifies client certificates and a
// rule that answers cross-origin requests: the mock serves no TLS and
// answers no request, so it would claim a check and answers no one makes
// (the haproxy provider serves both).
func (m *Mock) CheckModel(lb *lbmodel.LoadBalancer) error {
	return errors.Join(lbmodel.ClientValidationUnsupported(lb), lbmodel.CORSUnsupported(lb))
}
