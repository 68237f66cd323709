// Package portalloctest provides a fake portalloc.Reserver for tests that
// must not bind real sockets.
package portalloctest

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"syscall"

	"github.com/nodeportlocal/npl/contract"
)

// Reserver is an in-memory portalloc.Reserver. Ports marked busy fail with
// EADDRINUSE, as when a host process holds them; a port reserved twice
// without a Close in between also fails, as a second bind would.
type Reserver struct {
	mu   sync.Mutex
	busy map[string]bool
	held map[string]bool
	// Err, when set, is returned by every Reserve call (e.g. EMFILE).
	Err error
}

// NewReserver returns a fake reserver with no busy port.
func NewReserver() *Reserver {
	return &Reserver{busy: make(map[string]bool), held: make(map[string]bool)}
}

func id(family contract.Family, proto contract.Protocol, port int) string {
	return fmt.Sprintf("%s/%s/%d", family, proto, port)
}

// SetBusy marks port as used (or no longer used) by a host process.
func (r *Reserver) SetBusy(family contract.Family, proto contract.Protocol, port int, busy bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if busy {
		r.busy[id(family, proto, port)] = true
	} else {
		delete(r.busy, id(family, proto, port))
	}
}

// Reserve implements portalloc.Reserver.
func (r *Reserver) Reserve(family contract.Family, proto contract.Protocol, port int) (io.Closer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Err != nil {
		return nil, r.Err
	}
	k := id(family, proto, port)
	if r.busy[k] || r.held[k] {
		return nil, fmt.Errorf("bind %s: %w", k, syscall.EADDRINUSE)
	}
	r.held[k] = true
	return &closer{r: r, id: k}, nil
}

// Held returns the reservations currently open, as "family/proto/port", sorted.
func (r *Reserver) Held() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.held {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type closer struct {
	r      *Reserver
	id     string
	closed bool
}

func (c *closer) Close() error {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.closed {
		return errors.New("reservation " + c.id + " closed twice")
	}
	c.closed = true
	delete(c.r.held, c.id)
	return nil
}
