package providers

import "sync"

// Holds are the names of objects that applies in flight are about to
// refer to, for a provider whose objects are shared between load
// balancers (the monitors and persistence profiles of traffic policies):
// the sweep that deletes those no longer used does not delete one between
// its write and the write of what uses it. The zero value is ready.
type Holds struct {
	mu   sync.Mutex
	held map[string]int
}

// Hold marks names as in use until release is called.
func (h *Holds) Hold(names map[string]bool) (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[string]int{}
	}
	for n := range names {
		h.held[n]++
	}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for n := range names {
			if h.held[n]--; h.held[n] <= 0 {
				delete(h.held, n)
			}
		}
	}
}

// UnlessHeld runs del unless name is held, and no hold starts while it
// runs.
func (h *Holds) UnlessHeld(name string, del func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[name] > 0 {
		return nil
	}
	return del()
}
