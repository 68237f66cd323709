package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
)

// drainKey names one member of one pool.
type drainKey struct {
	pool string
	ip   string
	port int32
}

// drainTracker keeps a disabled (draining) member in its pool for the drain
// period after it was first seen disabled, even when its Pod is already
// gone: a member is removed after drainSeconds or when the Pod is gone,
// whichever is later. A member that a port move took out of the model
// (builder.MovedMembers) drains the same way, from the sync that no longer
// has it. The applier keeps one per key; only that key's sync (one
// worker at a time) uses it, so it has no lock of its own.
type drainTracker struct {
	// until is when each draining member's period ends.
	until map[drainKey]time.Time
	// last holds the members of the model last applied, to tell which ones
	// a move took out: a slice, a third of a map's size, as it is kept for
	// every member of every load balancer.
	last []drainKey
}

func newDrainTracker() *drainTracker {
	return &drainTracker{until: map[drainKey]time.Time{}}
}

// apply records the disabled members of lb and those of the last model
// that moved (moved reports whether a member's address moved within a
// drain period) and are gone from this one, puts back those still within
// their drain period that the model no longer has, forgets the others,
// and returns when the next one expires (zero if none). A pool drains for
// its policy's DrainSeconds when set (a LoadBalancerPolicy), else for
// period; a pool whose drain is 0 keeps nothing.
func (d *drainTracker) apply(lb *lbmodel.LoadBalancer, period time.Duration, now time.Time, moved func(lbmodel.Member, time.Duration) bool) (next time.Time) {
	pools := poolsOf(lb)
	present := map[drainKey]bool{}
	periods := make(map[string]time.Duration, len(pools))
	members := 0
	for _, pool := range pools {
		members += len(pool.Members)
	}
	last := make([]drainKey, 0, members)
	for _, pool := range pools {
		p := poolDrain(pool, period)
		periods[pool.Name] = p
		for _, m := range pool.Members {
			k := drainKey{pool.Name, m.IP, m.Port}
			present[k] = true
			last = append(last, k)
			if m.Enabled || p <= 0 {
				delete(d.until, k)
			} else if _, ok := d.until[k]; !ok {
				d.until[k] = now.Add(p)
			}
		}
	}
	for _, k := range d.last {
		p := periods[k.pool]
		if _, ok := d.until[k]; !ok && p > 0 && !present[k] && moved(lbmodel.Member{IP: k.ip, Port: k.port}, p) {
			d.until[k] = now.Add(p)
		}
	}
	d.last = last
	for _, pool := range pools {
		added := false
		for k, until := range d.until {
			if k.pool != pool.Name || present[k] {
				continue
			}
			if !now.Before(until) {
				delete(d.until, k)
				continue
			}
			pool.Members = append(pool.Members, lbmodel.Member{IP: k.ip, Port: k.port, Enabled: false})
			added = true
		}
		if added {
			pool.Members = lbmodel.SortMembers(pool.Members)
		}
	}
	for k, until := range d.until {
		if periods[k.pool] <= 0 { // the pool is gone, or drains no more
			delete(d.until, k)
			continue
		}
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	return next
}

// poolDrain is how long the draining members of pool stay: its policy's
// DrainSeconds when set, else period.
func poolDrain(pool *lbmodel.Pool, period time.Duration) time.Duration {
	if pool.Policy != nil && pool.Policy.DrainSeconds != nil {
		return time.Duration(*pool.Policy.DrainSeconds) * time.Second
	}
	return period
}

// poolsOf returns the pools of a load balancer: the listeners' (L4) and the
// shared ones (L7).
func poolsOf(lb *lbmodel.LoadBalancer) []*lbmodel.Pool {
	var out []*lbmodel.Pool
	for i := range lb.Listeners {
		if lb.Listeners[i].Pool.Name != "" {
			out = append(out, &lb.Listeners[i].Pool)
		}
	}
	for i := range lb.Pools {
		out = append(out, &lb.Pools[i])
	}
	return out
}

// applyDrains keeps the draining members of one queue key's load balancer
// (drainTracker.apply) and syncs the key again when the next is due.
func (a *applier) applyDrains(key queueKey, lb *lbmodel.LoadBalancer) {
	now := time.Now()
	a.mu.Lock()
	drains := a.drains[key]
	if drains == nil {
		drains = newDrainTracker()
		a.drains[key] = drains
	}
	a.mu.Unlock()
	// The moves are kept for the longest drain of any pool.
	for _, pool := range poolsOf(lb) {
		if d := poolDrain(pool, 0); d > time.Duration(a.longestDrain.Load()) {
			a.longestDrain.Store(int64(d))
		}
	}
	// Asked only of the members a sync no longer has: rare.
	moved := func(m lbmodel.Member, period time.Duration) bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		at, ok := a.moved[memberAddr{m.IP, m.Port}]
		return ok && now.Sub(at) < period
	}
	next := drains.apply(lb, a.settings.DrainPeriod, now, moved)
	if !next.IsZero() {
		a.queue.AddAfter(key, time.Until(next)+10*time.Millisecond)
	}
}

// memberAddr is a member's address, whatever its pool.
type memberAddr struct {
	ip   string
	port int32
}

// recordMovesOf remembers the members that the change from the cached Pod
// to cur moved (builder.MovedMembers), for the longest drain period (the
// global one, or a pool's policy's), and forgets older moves when it
// records new ones. The informer's transform calls it before its cache holds
// cur, so that no sync sees the new annotation without the move.
func (a *applier) recordMovesOf(cur *corev1.Pod) {
	keep := max(a.settings.DrainPeriod, time.Duration(a.longestDrain.Load()))
	if keep <= 0 || a.store.Pods == nil {
		return
	}
	obj, ok, err := a.store.Pods.GetByKey(cur.Namespace + "/" + cur.Name)
	old, isPod := obj.(*corev1.Pod)
	if err != nil || !ok || !isPod {
		return
	}
	ms := builder.MovedMembers(old, cur)
	if len(ms) == 0 {
		// Nearly every Pod event: the applier's lock is not taken.
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for addr, at := range a.moved {
		if now.Sub(at) >= keep {
			delete(a.moved, addr)
		}
	}
	for _, m := range ms {
		a.moved[memberAddr{m.IP, m.Port}] = now
	}
}
