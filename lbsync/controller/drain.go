package controller

import (
	"time"

	"github.com/nodeportlocal/npl/providers"
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
// whichever is later. It is owned by the Service's sync (one worker).
type drainTracker map[drainKey]time.Time

// apply records the disabled members of lb, puts back those still within
// their drain period that the model no longer has, forgets the others, and
// returns when the next one expires (zero if none).
func (d drainTracker) apply(lb *providers.LoadBalancer, period time.Duration, now time.Time) (next time.Time) {
	if period <= 0 {
		clear(d)
		return time.Time{}
	}
	pools := poolsOf(lb)
	present := map[drainKey]bool{}
	names := map[string]bool{}
	for _, pool := range pools {
		names[pool.Name] = true
		for _, m := range pool.Members {
			k := drainKey{pool.Name, m.IP, m.Port}
			present[k] = true
			if m.Enabled {
				delete(d, k)
			} else if _, ok := d[k]; !ok {
				d[k] = now.Add(period)
			}
		}
	}
	for _, pool := range pools {
		added := false
		for k, until := range d {
			if k.pool != pool.Name || present[k] {
				continue
			}
			if !now.Before(until) {
				delete(d, k)
				continue
			}
			pool.Members = append(pool.Members, providers.Member{IP: k.ip, Port: k.port, Enabled: false})
			added = true
		}
		if added {
			pool.Members = providers.SortMembers(pool.Members)
		}
	}
	for k, until := range d {
		if !names[k.pool] {
			delete(d, k)
			continue
		}
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	return next
}

// poolsOf returns the pools of a load balancer: the listeners' (L4) and the
// shared ones (L7).
func poolsOf(lb *providers.LoadBalancer) []*providers.Pool {
	var out []*providers.Pool
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
func (c *Controller) applyDrains(key queueKey, lb *providers.LoadBalancer) {
	c.mu.Lock()
	drains := c.drains[key]
	if drains == nil {
		drains = drainTracker{}
		c.drains[key] = drains
	}
	c.mu.Unlock()
	if next := drains.apply(lb, c.settings.DrainPeriod, time.Now()); !next.IsZero() {
		c.queue.AddAfter(key, time.Until(next)+10*time.Millisecond)
	}
}
