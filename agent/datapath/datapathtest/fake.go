// Package datapathtest provides an in-memory datapath.Datapath for tests of
// the code that drives it.
package datapathtest

import (
	"bytes"
	"context"
	"sync"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/contract"
)

// Fake records what it is asked to program. Check reports drift when the
// rules of the last written state differ from those of the state checked,
// or after SetDrift(true). The zero value is ready to use.
type Fake struct {
	mu         sync.Mutex
	synced     []datapath.Desired
	checks     int
	drift      bool
	failSyncs  int
	failChecks int
	err        error
	flushed    []int
	cleanups   int
	calls      []string
}

var _ datapath.Datapath = (*Fake)(nil)

// SetDrift makes the next checks report drift until the next Sync.
func (f *Fake) SetDrift(drift bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drift = drift
}

// FailSyncs makes the next n Sync calls fail with err.
func (f *Fake) FailSyncs(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSyncs, f.err = n, err
}

// FailChecks makes the next n Check calls fail with err.
func (f *Fake) FailChecks(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failChecks, f.err = n, err
}

// Sync implements datapath.Datapath.
func (f *Fake) Sync(_ context.Context, d datapath.Desired) error {
	if err := d.Validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "Sync")
	if f.failSyncs > 0 {
		f.failSyncs--
		return f.err
	}
	f.synced = append(f.synced, d)
	f.drift = false
	return nil
}

// Check implements datapath.Datapath.
func (f *Fake) Check(_ context.Context, d datapath.Desired) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks++
	f.calls = append(f.calls, "Check")
	if f.failChecks > 0 {
		f.failChecks--
		return false, f.err
	}
	if f.drift || len(f.synced) == 0 {
		return true, nil
	}
	return !same(f.synced[len(f.synced)-1], d), nil
}

// same reports whether a and b program the same rules in both families.
func same(a, b datapath.Desired) bool {
	for _, family := range []contract.Family{contract.FamilyIPv4, contract.FamilyIPv6} {
		if !bytes.Equal(datapath.Render(family, a), datapath.Render(family, b)) {
			return false
		}
	}
	return true
}

// FlushUDP implements datapath.Datapath.
func (f *Fake) FlushUDP(_ context.Context, nodePort int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "FlushUDP")
	f.flushed = append(f.flushed, nodePort)
	return nil
}

// Cleanup implements datapath.Datapath.
func (f *Fake) Cleanup(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "Cleanup")
	f.cleanups++
	f.synced = nil
	return nil
}

// Syncs returns how many Sync calls succeeded.
func (f *Fake) Syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.synced)
}

// Checks returns how many Check calls were made.
func (f *Fake) Checks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checks
}

// Last returns the last state written; ok is false before the first Sync.
func (f *Fake) Last() (d datapath.Desired, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.synced) == 0 {
		return datapath.Desired{}, false
	}
	return f.synced[len(f.synced)-1], true
}

// FlushedUDP returns the node ports passed to FlushUDP, in call order.
func (f *Fake) FlushedUDP() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.flushed...)
}

// Cleanups returns how many times Cleanup ran.
func (f *Fake) Cleanups() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cleanups
}

// Calls returns the names of the methods called ("Sync", "Check",
// "FlushUDP", "Cleanup"), in order, failed calls included.
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}
