package datapath_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/agent/datapath/datapathtest"
)

// deadline bounds a wait that should end quickly, so a bug fails the test
// instead of hanging it. It asserts nothing about speed.
const deadline = 30 * time.Second

// fastOptions keep the unit tests quick; the values are not asserted.
var fastOptions = datapath.SyncerOptions{
	Window:        5 * time.Millisecond,
	CheckInterval: time.Hour,
	MinBackoff:    time.Millisecond,
	MaxBackoff:    2 * time.Millisecond,
}

func desired(n int) datapath.Desired {
	d := datapath.Desired{PortRange: [2]int{61000, 62000}}
	for i := range n {
		pod := netip.AddrFrom4([4]byte{198, 19, byte(i / 250), byte(i%250 + 2)})
		d.Mappings = append(d.Mappings, datapath.Mapping{
			NodePort: 61000 + i, Protocol: "tcp", PodIP: pod, PodPort: 8080, Pod: "ns/pod-" + pod.String(),
		})
		d.HairpinSources = append(d.HairpinSources, pod)
	}
	return d
}

func startSyncer(t *testing.T, dp datapath.Datapath, opts datapath.SyncerOptions) *datapath.Syncer {
	t.Helper()
	s := datapath.NewSyncer(dp, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

func wait(t *testing.T, s *datapath.Syncer, gen uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := s.Wait(ctx, gen); err != nil {
		t.Fatalf("Wait(%d): %v", gen, err)
	}
}

// eventually polls cond until it holds, failing the test after deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(deadline); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// fakeClock is a stopped clock for a Syncer: nothing timed happens until the
// test steps it.
func fakeClock() *testingclock.FakeClock { return testingclock.NewFakeClock(time.Unix(0, 0)) }

// armed waits until the Syncer's clock holds n timers: the periodic check's
// ticker, plus one when a window or retry is pending. It is how a test knows
// that Run has seen what it sent before it steps the clock.
func armed(t *testing.T, clk *testingclock.FakeClock, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d timers on the clock", n), func() bool { return clk.Waiters() == n })
}

func TestSyncer_coalescesABurstOfUpdates(t *testing.T) {
	fake := &datapathtest.Fake{}
	clk := fakeClock()
	opts := datapath.SyncerOptions{Window: 20 * time.Millisecond, CheckInterval: time.Hour, Clock: clk}
	s := startSyncer(t, fake, opts)
	var gen uint64
	for i := range 100 {
		gen = s.Update(desired(i + 1))
	}
	armed(t, clk, 2) // the ticker and the window the first update opened
	if n := fake.Syncs(); n != 0 {
		t.Fatalf("%d writes before the window ended, want 0", n)
	}
	clk.Step(opts.Window)
	wait(t, s, gen)
	if n := fake.Syncs(); n != 1 {
		t.Errorf("100 updates in one window gave %d writes, want 1", n)
	}
	last, _ := fake.Last()
	if diff := cmp.Diff(len(desired(100).Mappings), len(last.Mappings)); diff != "" {
		t.Errorf("the write does not hold the last update (-want +got):\n%s", diff)
	}
	if !s.Synced() {
		t.Error("Synced() = false after the last generation was written")
	}
}

func TestSyncer_writesAnUpdateAtOnceWithoutAWindow(t *testing.T) {
	fake := &datapathtest.Fake{}
	// The clock is never stepped: a write that waited for a timer would
	// never happen.
	s := startSyncer(t, fake, datapath.SyncerOptions{CheckInterval: time.Hour, Clock: fakeClock()})
	wait(t, s, s.Update(desired(1)))
	if n := fake.Syncs(); n != 1 {
		t.Errorf("one update gave %d writes, want 1", n)
	}
}

// TestSyncer_holdsARemovalForTheAdditionsThatFollow: an update that only
// removes mappings while the controller expects additions (a Pod replaced:
// the new one has no IP yet) waits up to RemovalHold, and the first update
// that adds ends the wait: the removal and the addition go in one write. A
// removal nobody waits on is written at once; an expected addition that
// does not come lets the removal go when the hold ends.
func TestSyncer_holdsARemovalForTheAdditionsThatFollow(t *testing.T) {
	fake := &datapathtest.Fake{}
	clk := fakeClock()
	opts := datapath.SyncerOptions{CheckInterval: time.Hour, RemovalHold: 50 * time.Millisecond, Clock: clk}
	s := startSyncer(t, fake, opts)
	wait(t, s, s.Update(desired(3)))

	removed := desired(2)
	removed.AdditionsPending = true
	s.Update(removed)
	armed(t, clk, 2) // the ticker and the hold
	if n := fake.Syncs(); n != 1 {
		t.Fatalf("a removal with additions pending was written at once (%d writes), want it held", n)
	}
	replaced := desired(2)
	replaced.Mappings = append(replaced.Mappings, datapath.Mapping{
		NodePort: 61900, Protocol: "tcp", PodIP: netip.MustParseAddr("198.19.9.9"), PodPort: 8080, Pod: "ns/new",
	})
	wait(t, s, s.Update(replaced)) // the clock is not stepped: the addition ends the hold
	if n := fake.Syncs(); n != 2 {
		t.Errorf("a removal and the addition after it gave %d writes, want 1 more", n-1)
	}
	if last, _ := fake.Last(); len(last.Mappings) != 3 {
		t.Errorf("the write holds %d mappings, want the replacement's 3", len(last.Mappings))
	}

	removed = desired(1)
	removed.AdditionsPending = true
	gen := s.Update(removed)
	armed(t, clk, 2)
	clk.Step(opts.RemovalHold)
	wait(t, s, gen)
	if n := fake.Syncs(); n != 3 {
		t.Errorf("a held removal whose additions did not come: %d writes after the hold, want 1", n-2)
	}

	wait(t, s, s.Update(desired(0))) // nothing pending: at once
	if n := fake.Syncs(); n != 4 {
		t.Errorf("a removal with no addition pending: %d writes, want 1 at once", n-3)
	}
}

// TestSyncer_aRemovalWaitsForAStartingPodToShow: a removal waits
// RemovalWait for a Pod that will add mappings to show (a Pod deleted, and
// its replacement created right after); an update saying so, which changes
// nothing else and is not written itself, extends the wait to RemovalHold
// from the removal, and the addition ends it with one write.
func TestSyncer_aRemovalWaitsForAStartingPodToShow(t *testing.T) {
	fake := &datapathtest.Fake{}
	clk := fakeClock()
	opts := datapath.SyncerOptions{CheckInterval: time.Hour, RemovalWait: 10 * time.Millisecond, RemovalHold: 50 * time.Millisecond, Clock: clk}
	s := startSyncer(t, fake, opts)
	wait(t, s, s.Update(desired(3)))

	s.Update(desired(2))
	armed(t, clk, 2) // the ticker and the wait
	clk.Step(opts.RemovalWait / 2)
	starting := desired(2)
	starting.AdditionsPending = true
	s.Update(starting)
	clk.Step(opts.RemovalWait / 2) // the short wait ends: the hold goes on
	armed(t, clk, 2)
	clk.Step(opts.RemovalHold / 2) // within the hold
	armed(t, clk, 2)
	if n := fake.Syncs(); n != 1 {
		t.Fatalf("a removal with a Pod starting was written before the hold ended (%d writes)", n)
	}
	replaced := desired(2)
	replaced.Mappings = append(replaced.Mappings, datapath.Mapping{
		NodePort: 61900, Protocol: "tcp", PodIP: netip.MustParseAddr("198.19.9.9"), PodPort: 8080, Pod: "ns/new",
	})
	wait(t, s, s.Update(replaced))
	if n := fake.Syncs(); n != 2 {
		t.Errorf("the removal and the addition gave %d writes, want 1", n-1)
	}

	unchanged := replaced
	unchanged.AdditionsPending = true
	wait(t, s, s.Update(unchanged))
	if n := fake.Syncs(); n != 2 {
		t.Errorf("an update that changes nothing was written (%d writes)", n-2)
	}
}

// blocking is a datapath whose writes wait until the test releases them.
type blocking struct {
	*datapathtest.Fake
	entered chan struct{}
	release chan struct{}
}

func (b blocking) Sync(ctx context.Context, d datapath.Desired) error {
	b.entered <- struct{}{}
	<-b.release
	return b.Fake.Sync(ctx, d)
}

func TestSyncer_coalescesTheUpdatesMadeDuringAWrite(t *testing.T) {
	dp := blocking{Fake: &datapathtest.Fake{}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := startSyncer(t, dp, datapath.SyncerOptions{CheckInterval: time.Hour, Clock: fakeClock()})
	first := s.Update(desired(1))
	<-dp.entered // the first update is being written
	var gen uint64
	for i := range 99 {
		gen = s.Update(desired(i + 2))
	}
	close(dp.release)
	wait(t, s, gen)
	if !s.Synced() || gen <= first {
		t.Fatalf("Synced() = %v after generation %d", s.Synced(), gen)
	}
	if n := dp.Syncs(); n != 2 {
		t.Errorf("1 update, then 99 during its write, gave %d writes, want 2", n)
	}
	last, _ := dp.Last()
	if len(last.Mappings) != 100 {
		t.Errorf("the second write holds %d mappings, want the last update's 100", len(last.Mappings))
	}
}

func TestSyncer_waitReturnsOnlyOnceTheStateIsWritten(t *testing.T) {
	fake := &datapathtest.Fake{}
	fake.FailSyncs(3, errors.New("xtables lock held"))
	s := startSyncer(t, fake, fastOptions)
	gen := s.Update(desired(2))
	wait(t, s, gen)
	last, ok := fake.Last()
	if !ok || len(last.Mappings) != 2 {
		t.Fatalf("Wait returned but the datapath holds %+v (written: %v)", last, ok)
	}
	st := s.Stats()
	if st.Failures != 3 || st.Syncs != 1 {
		t.Errorf("stats = %+v, want 3 failures retried then 1 sync", st)
	}
}

func TestSyncer_waitEndsWithItsContext(t *testing.T) {
	fake := &datapathtest.Fake{}
	s := datapath.NewSyncer(fake, fastOptions) // not running: nothing is ever written
	gen := s.Update(desired(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Wait(ctx, gen); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if s.Synced() {
		t.Error("Synced() = true before any write")
	}
}

func TestSyncer_repairsDriftOnTrigger(t *testing.T) {
	fake := &datapathtest.Fake{}
	s := startSyncer(t, fake, fastOptions)
	wait(t, s, s.Update(desired(3)))
	fake.SetDrift(true)
	s.Trigger()
	eventually(t, "a drift repair", func() bool { return s.Stats().DriftRepairs == 1 })
	if n := fake.Syncs(); n != 2 {
		t.Errorf("writes = %d, want 2 (the update and the repair)", n)
	}
}

func TestSyncer_checksPeriodically(t *testing.T) {
	fake := &datapathtest.Fake{}
	clk := fakeClock()
	opts := fastOptions
	opts.CheckInterval, opts.Clock = time.Minute, clk
	s := startSyncer(t, fake, opts)
	gen := s.Update(desired(1))
	armed(t, clk, 2)
	clk.Step(opts.Window)
	wait(t, s, gen)
	fake.SetDrift(true)
	clk.Step(opts.CheckInterval)
	eventually(t, "a drift repair on the periodic check", func() bool { return s.Stats().DriftRepairs == 1 })
	for i := range 2 {
		clk.Step(opts.CheckInterval)
		eventually(t, "the next periodic check", func() bool { return s.Stats().Checks == 2+i })
	}
	if st := s.Stats(); st.DriftRepairs != 1 || st.Syncs != 2 {
		t.Errorf("stats = %+v after the datapath stopped drifting, want 1 drift repair and 2 writes", st)
	}
}

func TestSyncer_retriesAFailedCheck(t *testing.T) {
	fake := &datapathtest.Fake{}
	s := startSyncer(t, fake, fastOptions)
	wait(t, s, s.Update(desired(1)))
	fake.FailChecks(2, errors.New("iptables-save: exit status 4"))
	fake.SetDrift(true)
	s.Trigger()
	eventually(t, "a drift repair after failed checks", func() bool { return s.Stats().DriftRepairs == 1 })
	if st := s.Stats(); st.Failures != 2 || st.Checks != 3 {
		t.Errorf("stats = %+v, want 2 failures and 3 checks", st)
	}
}

func TestSyncer_touchesNothingBeforeTheFirstUpdate(t *testing.T) {
	fake := &datapathtest.Fake{}
	opts := fastOptions
	opts.CheckInterval = time.Millisecond
	s := startSyncer(t, fake, opts)
	s.Trigger()
	wait(t, s, s.Update(desired(1)))
	// Checks may follow the first write, but nothing may precede it: the agent
	// restores its state before its first update.
	if calls := fake.Calls(); len(calls) == 0 || calls[0] != "Sync" {
		t.Errorf("datapath calls = %v, want the first to be the Sync of the first update", calls)
	}
}

func TestMulti_fansOutToEachFamily(t *testing.T) {
	v4, v6 := &datapathtest.Fake{}, &datapathtest.Fake{}
	dp := datapath.Multi(v4, v6)
	ctx := context.Background()
	if err := dp.Sync(ctx, desired(1)); err != nil {
		t.Fatal(err)
	}
	if err := dp.FlushUDP(ctx, 61000); err != nil {
		t.Fatal(err)
	}
	v6.SetDrift(true)
	drift, err := dp.Check(ctx, desired(1))
	if err != nil || !drift {
		t.Errorf("Check = %v, %v; want drift when one family drifted", drift, err)
	}
	v4.FailSyncs(1, errors.New("boom"))
	if err := dp.Sync(ctx, desired(1)); err == nil {
		t.Error("Sync succeeded although one family failed")
	}
	got := []int{v4.Syncs(), v6.Syncs(), len(v4.FlushedUDP()), len(v6.FlushedUDP())}
	if diff := cmp.Diff([]int{1, 2, 1, 1}, got); diff != "" {
		t.Errorf("calls [v4 syncs, v6 syncs, v4 flushes, v6 flushes] (-want +got):\n%s", diff)
	}
}
