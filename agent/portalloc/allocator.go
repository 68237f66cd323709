// Package portalloc allocates node ports for NodePortLocal mappings and
// reserves each allocated port with a socket the agent holds, so no host
// process can take a port that a DNAT rule points at.
//
// The allocator owns one rule: on one node, a node port number is held by at
// most one mapping per IP family, whatever the protocol. TCP and UDP share one
// table and one round-robin cursor per family, so the capacity is the size of
// the range per family, and TCP and UDP of one Pod port (DNS) get two
// distinct numbers. Consumers of the annotation such as AKO and F5 CIS match
// entries by podPort and nodePort and ignore the protocol; a shared number
// would put the same ip:port into their pools twice (issue 13). This is also
// what Antrea hands out. IPv4 and IPv6 are independent.
//
// A mapping reserves a socket of its own protocol only. A number is skipped
// when that protocol is busy on the host; a host process using the number
// with the other protocol does not keep a mapping off it.
//
// Mappings are keyed by Pod name, never by Pod IP, so a dead Pod's cleanup
// cannot remove the mapping of a live Pod that reuses its IP (Antrea #6527).
package portalloc

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"syscall"

	"github.com/nodeportlocal/npl/contract"
)

var (
	// ErrExhausted is wrapped by Allocate when every port of a table is in
	// use or busy on the host.
	ErrExhausted = errors.New("no free node port")
	// ErrTaken is wrapped by Restore when another key of the same IP family
	// holds the port, whatever its protocol.
	ErrTaken = errors.New("node port taken by another mapping")
)

// Key names one mapping: a Pod port, its protocol and IP family.
type Key struct {
	Pod      string // namespace/name
	PodPort  int32
	Protocol contract.Protocol
	Family   contract.Family
}

// String formats k for logs and errors.
func (k Key) String() string {
	return fmt.Sprintf("%s:%d/%s/%s", k.Pod, k.PodPort, k.Protocol, k.Family)
}

func (k Key) validate() error {
	switch {
	case k.Pod == "":
		return fmt.Errorf("key %s: empty Pod name", k)
	case k.PodPort < 1 || k.PodPort > 65535:
		return fmt.Errorf("key %s: Pod port %d is out of 1-65535", k, k.PodPort)
	case k.Protocol != contract.ProtocolTCP && k.Protocol != contract.ProtocolUDP:
		return fmt.Errorf("key %s: protocol %q is not %s or %s", k, k.Protocol, contract.ProtocolTCP, contract.ProtocolUDP)
	case k.Family != contract.FamilyIPv4 && k.Family != contract.FamilyIPv6:
		return fmt.Errorf("key %s: IP family %q is not %s or %s", k, k.Family, contract.FamilyIPv4, contract.FamilyIPv6)
	}
	return nil
}

// table is the port table of one IP family, shared by TCP and UDP.
type table struct {
	used map[int]Key
	// next is where the round-robin search starts: one past the port allocated
	// last, so a port just released is not handed out again at once.
	next int
}

type mapping struct {
	port   int
	closer io.Closer
}

// Allocator hands out node ports from one Range. It is safe for concurrent use.
type Allocator struct {
	rng      Range
	reserver Reserver

	mu     sync.Mutex
	tables map[contract.Family]*table
	keys   map[Key]mapping
}

// New returns an allocator for the ports of r, reserving them with reserver.
func New(r Range, reserver Reserver) (*Allocator, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("new port allocator: %w", err)
	}
	if reserver == nil {
		return nil, errors.New("new port allocator: nil reserver")
	}
	return &Allocator{
		rng:      r,
		reserver: reserver,
		tables:   make(map[contract.Family]*table),
		keys:     make(map[Key]mapping),
	}, nil
}

// Range returns the port range the allocator serves.
func (a *Allocator) Range() Range { return a.rng }

func (a *Allocator) table(family contract.Family) *table {
	t := a.tables[family]
	if t == nil {
		t = &table{used: make(map[int]Key), next: a.rng.Start}
		a.tables[family] = t
	}
	return t
}

// Allocate returns the node port of key, allocating and reserving one when key
// has none yet. The search starts one past the port allocated last in key's
// family, by either protocol, and wraps around the range; it skips ports any
// mapping of the family holds and ports a host process uses with key's
// protocol (the bind fails with EADDRINUSE). When no port is left the error
// wraps ErrExhausted.
func (a *Allocator) Allocate(key Key) (int, error) {
	if err := key.validate(); err != nil {
		return 0, fmt.Errorf("allocate node port: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if m, ok := a.keys[key]; ok {
		return m.port, nil
	}
	t := a.table(key.Family)
	busy := 0
	port := t.next
	for range a.rng.Size() {
		if _, used := t.used[port]; !used {
			c, err := a.reserver.Reserve(key.Family, key.Protocol, port)
			if err == nil {
				a.take(t, key, port, c)
				t.next = a.wrap(port + 1)
				return port, nil
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				return 0, fmt.Errorf("allocate node port for %s: %w", key, err)
			}
			busy++
		}
		port = a.wrap(port + 1)
	}
	return 0, fmt.Errorf("allocate node port for %s in %s: %w (%d held by %s mappings, %d busy on the host for %s)",
		key, a.rng, ErrExhausted, len(t.used), key.Family, busy, key.Protocol)
}

// Restore takes port for key, as found in an annotation when the agent
// starts, so mappings keep their ports across restarts. It fails when port is
// out of range, held by another key of the family whatever its protocol
// (ErrTaken), or its bind fails. Restoring
// the port key already holds is a no-op; restoring another port for a key that
// holds one is an error (release it first).
func (a *Allocator) Restore(key Key, port int) error {
	if err := key.validate(); err != nil {
		return fmt.Errorf("restore node port %d: %w", port, err)
	}
	if !a.rng.Contains(port) {
		return fmt.Errorf("restore node port %d for %s: out of range %s", port, key, a.rng)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if m, ok := a.keys[key]; ok {
		if m.port == port {
			return nil
		}
		return fmt.Errorf("restore node port %d for %s: key already holds port %d", port, key, m.port)
	}
	t := a.table(key.Family)
	if other, used := t.used[port]; used {
		return fmt.Errorf("restore node port %d for %s: %w (%s)", port, key, ErrTaken, other)
	}
	c, err := a.reserver.Reserve(key.Family, key.Protocol, port)
	if err != nil {
		return fmt.Errorf("restore node port %d for %s: %w", port, key, err)
	}
	a.take(t, key, port, c)
	return nil
}

func (a *Allocator) take(t *table, key Key, port int, c io.Closer) {
	t.used[port] = key
	a.keys[key] = mapping{port: port, closer: c}
}

func (a *Allocator) wrap(port int) int {
	if port > a.rng.End {
		return a.rng.Start
	}
	return port
}

// Hold reserves port, outside the range, for key: the socket of a rule the
// agent keeps there for a while (a mapping retired by a change of the range,
// whose rule still forwards to its Pod), so that no host process takes the
// port while the rule points it at a Pod. The port enters no table; the
// caller closes the socket when the rule goes. The error wraps EADDRINUSE
// when a host process uses the port with key's protocol.
func (a *Allocator) Hold(key Key, port int) (io.Closer, error) {
	if err := key.validate(); err != nil {
		return nil, fmt.Errorf("hold node port %d: %w", port, err)
	}
	if a.rng.Contains(port) {
		return nil, fmt.Errorf("hold node port %d for %s: in the range %s (restore or allocate it)", port, key, a.rng)
	}
	c, err := a.reserver.Reserve(key.Family, key.Protocol, port)
	if err != nil {
		return nil, fmt.Errorf("hold node port %d for %s: %w", port, key, err)
	}
	return c, nil
}

// Release closes the socket that reserves key's port and frees the port.
// Releasing a key that holds no port is a no-op. The port is freed even when
// closing the socket fails: the kernel releases the descriptor either way.
func (a *Allocator) Release(key Key) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.release(key)
}

func (a *Allocator) release(key Key) error {
	m, ok := a.keys[key]
	if !ok {
		return nil
	}
	delete(a.keys, key)
	delete(a.table(key.Family).used, m.port)
	if err := m.closer.Close(); err != nil {
		return fmt.Errorf("release node port %d of %s: %w", m.port, key, err)
	}
	return nil
}

// ReleasePod releases every key of pod (namespace/name).
func (a *Allocator) ReleasePod(pod string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, k := range a.keysOf(pod) {
		errs = append(errs, a.release(k))
	}
	return errors.Join(errs...)
}

// Lookup returns the node port key holds.
func (a *Allocator) Lookup(key Key) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m, ok := a.keys[key]
	return m.port, ok
}

// Keys returns the keys of pod (namespace/name) that hold a port, sorted.
func (a *Allocator) Keys(pod string) []Key {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keysOf(pod)
}

func (a *Allocator) keysOf(pod string) []Key {
	var keys []Key
	for k := range a.keys {
		if k.Pod == pod {
			keys = append(keys, k)
		}
	}
	sortKeys(keys)
	return keys
}

// All returns every key that holds a port with its port, for resyncs and
// debugging.
func (a *Allocator) All() map[Key]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	all := make(map[Key]int, len(a.keys))
	for k, m := range a.keys {
		all[k] = m.port
	}
	return all
}

// InUse returns how many ports the mappings of family hold, TCP and UDP
// together.
func (a *Allocator) InUse(family contract.Family) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.tables[family]; t != nil {
		return len(t.used)
	}
	return 0
}

// Free returns how many ports of the range a new mapping of (family, proto)
// may still get: the ports no mapping of family holds. It is the same for
// both protocols, since they share the family's numbers; proto is kept so the
// npl_agent_free_ports metric keeps its protocol label. Some of the ports may
// still be busy on the host.
func (a *Allocator) Free(family contract.Family, _ contract.Protocol) int {
	return a.rng.Size() - a.InUse(family)
}

// Close releases every port.
func (a *Allocator) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for k := range a.keys {
		errs = append(errs, a.release(k))
	}
	return errors.Join(errs...)
}

func sortKeys(keys []Key) {
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		if a.Family != b.Family {
			return a.Family < b.Family
		}
		if a.Protocol != b.Protocol {
			return a.Protocol < b.Protocol
		}
		return a.PodPort < b.PodPort
	})
}
