package datapath

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// SyncerOptions tune a Syncer. Zero values take the defaults.
type SyncerOptions struct {
	// Window is how long the first update of a burst waits for more before
	// the latest state is written. Zero, the default, writes an update at
	// once; the updates that arrive while a write runs are written together
	// by the next one, as soon as it ends, so a burst still costs few
	// writes without delaying its first Pod.
	Window time.Duration
	// RemovalWait and RemovalHold let a removal and the additions that
	// follow it (a Pod replaced) go in one write. An update that only
	// removes mappings waits RemovalWait for a Pod that will add some to
	// show (an update saying Desired.AdditionsPending), and then up to
	// RemovalHold in all; the first update that adds or changes a mapping
	// ends the wait. The removed mappings keep their rules meanwhile. Zero,
	// the default, writes a removal at once.
	RemovalWait, RemovalHold time.Duration
	// CheckInterval is the period of the drift check. Default 60s.
	CheckInterval time.Duration
	// MinBackoff and MaxBackoff bound the retry delay after a failure, which
	// grows by half each time. Defaults 1s and 5s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Clock times the window, the retries and the periodic check. Default
	// the real clock; tests pass a fake one and step it, so what a burst of
	// updates gives does not depend on how the scheduler runs them.
	Clock clock.WithTicker
}

func (o SyncerOptions) withDefaults() SyncerOptions {
	if o.CheckInterval <= 0 {
		o.CheckInterval = time.Minute
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// SyncerStats counts what a Syncer did.
type SyncerStats struct {
	Syncs        int // successful writes, repairs included
	Checks       int // drift checks run
	DriftRepairs int // writes made because a check found drift
	Failures     int // failed writes or checks (each retried)
}

// Syncer writes the latest desired state to a Datapath, one write at a
// time. An update is written at once when no write runs; the updates that
// arrive during a write are coalesced into the next one (and, with a
// Window, those that arrive within it after the first); a periodic check
// rewrites the chains when they drifted (a rule or jump deleted, a chain
// flushed); failures are retried with backoff (Antrea #2554: xtables lock
// contention must not kill the agent).
//
// Each Update returns a generation; Wait(ctx, gen) returns once that state,
// or a later one, is programmed, so the caller publishes a node port only
// after its rule exists.
type Syncer struct {
	dp   Datapath
	opts SyncerOptions

	updated chan struct{}
	trigger chan struct{}

	mu      sync.Mutex
	desired Desired
	gen     uint64 // generation of desired
	written uint64 // generation last programmed
	// last is the state last programmed by an update; nil before the first.
	last    *Desired
	advance chan struct{} // closed when written advances
	stats   SyncerStats
}

// NewSyncer returns a Syncer for dp. Call Run to start it.
func NewSyncer(dp Datapath, opts SyncerOptions) *Syncer {
	return &Syncer{
		dp:      dp,
		opts:    opts.withDefaults(),
		updated: make(chan struct{}, 1),
		trigger: make(chan struct{}, 1),
		advance: make(chan struct{}),
	}
}

// Update records d as the desired state and returns its generation. The
// Syncer keeps its own copy of d's slices.
func (s *Syncer) Update(d Desired) uint64 {
	d.Mappings = slices.Clone(d.Mappings)
	d.HairpinSources = slices.Clone(d.HairpinSources)
	s.mu.Lock()
	s.desired = d
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	notify(s.updated)
	return gen
}

// Trigger asks for a drift check now.
func (s *Syncer) Trigger() { notify(s.trigger) }

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Wait blocks until generation gen (or a later one) is programmed, or ctx ends.
func (s *Syncer) Wait(ctx context.Context, gen uint64) error {
	for {
		s.mu.Lock()
		written, advance := s.written, s.advance
		s.mu.Unlock()
		if written >= gen {
			return nil
		}
		select {
		case <-advance:
		case <-ctx.Done():
			return fmt.Errorf("wait for datapath generation %d (programmed: %d): %w", gen, written, ctx.Err())
		}
	}
}

// Synced reports whether the latest update is programmed; false before the
// first update.
func (s *Syncer) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen > 0 && s.written == s.gen
}

// Stats returns the counters so far.
func (s *Syncer) Stats() SyncerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Run writes updates and checks for drift until ctx ends. Nothing is written
// or checked before the first Update, so the agent can restore its state
// first.
func (s *Syncer) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("datapath-syncer")
	ctx = klog.NewContext(ctx, logger)
	ticker := s.opts.Clock.NewTicker(s.opts.CheckInterval)
	defer ticker.Stop()
	var window, retry <-chan time.Time
	var hold clock.Timer // a removal held for additions
	var held time.Time   // since when
	// holdFor arms the hold of the latest update when it only removes, and
	// reports whether it did: until RemovalWait after the removal (since),
	// or RemovalHold when additions are pending.
	holdFor := func(since time.Time) bool {
		removal, pending := s.removalOnly()
		if !removal || s.opts.RemovalHold <= 0 {
			return false
		}
		now := s.opts.Clock.Now()
		held = since
		limit := s.opts.RemovalWait
		if pending {
			limit = s.opts.RemovalHold
		}
		left := held.Add(limit).Sub(now)
		if left <= 0 {
			return false
		}
		hold = s.opts.Clock.NewTimer(left)
		return true
	}
	endHold := func() {
		if hold != nil {
			hold.Stop()
			hold = nil
		}
	}
	defer endHold()
	var backoff time.Duration
	for {
		check := true
		select {
		case <-ctx.Done():
			return
		case <-s.updated:
			if retry != nil {
				continue // the retry writes the latest state
			}
			if s.opts.Window > 0 {
				if window == nil {
					window = s.opts.Clock.After(s.opts.Window)
				}
				continue
			}
			if hold != nil {
				if removal, _ := s.removalOnly(); removal {
					continue // the hold's end looks again
				}
			} else if holdFor(s.opts.Clock.Now()) {
				continue
			}
			check = false
		case <-timerC(hold):
			// A Pod that adds mappings may have shown meanwhile.
			hold = nil
			if holdFor(held) {
				continue
			}
			check = false
		case <-window:
			window, check = nil, false
		case <-retry:
			retry = nil
		case <-ticker.C():
			if window != nil || retry != nil || hold != nil {
				continue // a write or retry is due anyway
			}
		case <-s.trigger:
			retry = nil
		}
		endHold() // what follows writes the latest state
		if err := s.reconcile(ctx, check); err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = nextBackoff(backoff, s.opts.MinBackoff, s.opts.MaxBackoff)
			logger.Error(err, "Datapath sync failed; retrying", "retryIn", backoff)
			retry, window = s.opts.Clock.After(backoff), nil
			continue
		}
		backoff = 0
	}
}

// timerC is the channel of t, or nil (never ready) without one.
func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// removalOnly reports whether the latest update only removes mappings or
// hairpin sources from the state last written, and whether it says
// additions are pending.
func (s *Syncer) removalOnly() (removal, pending bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, last := s.desired, s.last
	if last == nil || d.PortRange != last.PortRange || len(d.Mappings) > len(last.Mappings) ||
		len(d.HairpinSources) > len(last.HairpinSources) ||
		len(d.Mappings)+len(d.HairpinSources) == len(last.Mappings)+len(last.HairpinSources) {
		return false, false
	}
	return removesOnly(d, *last) && isSubset(d.HairpinSources, last.HairpinSources), d.AdditionsPending
}

// removesOnly reports whether every mapping of d is one of last's.
func removesOnly(d, last Desired) bool {
	mappings := make(map[Mapping]bool, len(last.Mappings))
	for _, m := range last.Mappings {
		mappings[m] = true
	}
	for _, m := range d.Mappings {
		if !mappings[m] {
			return false
		}
	}
	return true
}

// unchanged reports whether d holds what the state last written holds.
func (s *Syncer) unchanged(d Desired) bool {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if last == nil || d.PortRange != last.PortRange || len(d.Mappings) != len(last.Mappings) ||
		len(d.HairpinSources) != len(last.HairpinSources) {
		return false
	}
	return removesOnly(d, *last) && isSubset(d.HairpinSources, last.HairpinSources)
}

// isSubset reports whether every address of a is in b.
func isSubset(a, b []netip.Addr) bool {
	in := make(map[netip.Addr]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	for _, x := range a {
		if !in[x] {
			return false
		}
	}
	return true
}

// nextBackoff grows the retry delay by half, from min up to max.
func nextBackoff(cur, lo, hi time.Duration) time.Duration {
	if cur < lo {
		return lo
	}
	return min(cur*3/2, hi)
}

// reconcile writes a pending update; without one, and when check is set, it
// checks for drift and rewrites the chains if needed.
func (s *Syncer) reconcile(ctx context.Context, check bool) error {
	s.mu.Lock()
	d, gen, written := s.desired, s.gen, s.written
	s.mu.Unlock()
	logger := klog.FromContext(ctx)
	if gen == 0 {
		return nil
	}
	if gen != written && s.unchanged(d) {
		// Nothing to write: an update that only says additions are
		// pending, or changes undone before they were written.
		s.mu.Lock()
		s.written = gen
		close(s.advance)
		s.advance = make(chan struct{})
		s.mu.Unlock()
		return nil
	}
	if gen != written {
		start := s.opts.Clock.Now()
		if err := s.dp.Sync(ctx, d); err != nil {
			s.count(func(st *SyncerStats) { st.Failures++ })
			return err
		}
		s.mu.Lock()
		s.stats.Syncs++
		s.written, s.last = gen, &d
		close(s.advance)
		s.advance = make(chan struct{})
		s.mu.Unlock()
		logger.V(2).Info("Programmed datapath", "generation", gen, "updates", gen-written, "mappings", len(d.Mappings),
			"took", s.opts.Clock.Since(start))
		return nil
	}
	if !check {
		return nil
	}
	drift, err := s.dp.Check(ctx, d)
	s.count(func(st *SyncerStats) { st.Checks++ })
	if err != nil {
		s.count(func(st *SyncerStats) { st.Failures++ })
		return err
	}
	if !drift {
		return nil
	}
	logger.Info("Datapath drifted from the desired state; rewriting it", "generation", gen)
	if err := s.dp.Sync(ctx, d); err != nil {
		s.count(func(st *SyncerStats) { st.Failures++ })
		return err
	}
	s.count(func(st *SyncerStats) { st.Syncs++; st.DriftRepairs++ })
	return nil
}

func (s *Syncer) count(f func(*SyncerStats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}
