package portalloc_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/agent/portalloc/portalloctest"
	"github.com/nodeportlocal/npl/contract"
)

const (
	v4  = contract.FamilyIPv4
	v6  = contract.FamilyIPv6
	tcp = contract.ProtocolTCP
	udp = contract.ProtocolUDP
)

func key(pod string, port int32, proto contract.Protocol, family contract.Family) portalloc.Key {
	return portalloc.Key{Pod: pod, PodPort: port, Protocol: proto, Family: family}
}

var (
	aTCP   = key("ns/a", 8080, tcp, v4)
	aUDP   = key("ns/a", 8080, udp, v4)
	aTCP6  = key("ns/a", 8080, tcp, v6)
	aUDP6  = key("ns/a", 8080, udp, v6)
	aOther = key("ns/a", 9090, tcp, v4)
	bTCP   = key("ns/b", 8080, tcp, v4)
	bUDP   = key("ns/b", 8080, udp, v4)
	cTCP   = key("ns/c", 8080, tcp, v4)
	dTCP   = key("ns/d", 8080, tcp, v4)
)

// step is one action on the allocator under test, with its expectation.
type step func(t *testing.T, a *portalloc.Allocator, r *portalloctest.Reserver)

func alloc(k portalloc.Key, want int) step {
	return func(t *testing.T, a *portalloc.Allocator, _ *portalloctest.Reserver) {
		t.Helper()
		got, err := a.Allocate(k)
		if err != nil {
			t.Fatalf("Allocate(%s): %v", k, err)
		}
		if got != want {
			t.Fatalf("Allocate(%s) = %d, want %d", k, got, want)
		}
	}
}

func allocFails(k portalloc.Key, want error) step {
	return func(t *testing.T, a *portalloc.Allocator, _ *portalloctest.Reserver) {
		t.Helper()
		got, err := a.Allocate(k)
		if !errors.Is(err, want) {
			t.Fatalf("Allocate(%s) = %d, %v; want an error wrapping %v", k, got, err, want)
		}
	}
}

func release(k portalloc.Key) step {
	return func(t *testing.T, a *portalloc.Allocator, _ *portalloctest.Reserver) {
		t.Helper()
		if err := a.Release(k); err != nil {
			t.Fatalf("Release(%s): %v", k, err)
		}
	}
}

func releasePod(pod string) step {
	return func(t *testing.T, a *portalloc.Allocator, _ *portalloctest.Reserver) {
		t.Helper()
		if err := a.ReleasePod(pod); err != nil {
			t.Fatalf("ReleasePod(%s): %v", pod, err)
		}
	}
}

func busy(family contract.Family, proto contract.Protocol, port int) step {
	return func(_ *testing.T, _ *portalloc.Allocator, r *portalloctest.Reserver) {
		r.SetBusy(family, proto, port, true)
	}
}

func restore(k portalloc.Key, port int) step {
	return func(t *testing.T, a *portalloc.Allocator, _ *portalloctest.Reserver) {
		t.Helper()
		if err := a.Restore(k, port); err != nil {
			t.Fatalf("Restore(%s, %d): %v", k, port, err)
		}
	}
}

// restoreFails expects Restore to fail with an error that wraps want (when
// set) and whose text contains text.
func restoreFails(k portalloc.Key, port int, want error, text string) step {
	return func(t *testing.T, a *portalloc.Allocator, _ *portalloctest.Reserver) {
		t.Helper()
		err := a.Restore(k, port)
		if err == nil {
			t.Fatalf("Restore(%s, %d) succeeded, want an error", k, port)
		}
		if want != nil && !errors.Is(err, want) {
			t.Fatalf("Restore(%s, %d) = %v, want an error wrapping %v", k, port, err, want)
		}
		if !strings.Contains(err.Error(), text) {
			t.Fatalf("Restore(%s, %d) = %v, want it to mention %q", k, port, err, text)
		}
	}
}

func lookup(k portalloc.Key, want int, wantOK bool) step {
	return func(t *testing.T, a *portalloc.Allocator, _ *portalloctest.Reserver) {
		t.Helper()
		got, ok := a.Lookup(k)
		if got != want || ok != wantOK {
			t.Fatalf("Lookup(%s) = %d, %v; want %d, %v", k, got, ok, want, wantOK)
		}
	}
}

func TestAllocator(t *testing.T) {
	small := portalloc.Range{Start: 61000, End: 61002}
	wide := portalloc.Range{Start: 61000, End: 61009}
	tests := []struct {
		name  string
		rng   portalloc.Range
		steps []step
		// wantHeld lists the reservations open at the end, as the fake names them.
		wantHeld []string
	}{{
		name:     "allocates sequentially from the start",
		rng:      wide,
		steps:    []step{alloc(aTCP, 61000), alloc(bTCP, 61001), alloc(cTCP, 61002)},
		wantHeld: []string{"IPv4/tcp/61000", "IPv4/tcp/61001", "IPv4/tcp/61002"},
	}, {
		name:     "does not reuse a released port at once",
		rng:      wide,
		steps:    []step{alloc(aTCP, 61000), alloc(bTCP, 61001), release(aTCP), alloc(cTCP, 61002)},
		wantHeld: []string{"IPv4/tcp/61001", "IPv4/tcp/61002"},
	}, {
		name: "wraps around to the start of the range",
		rng:  small,
		steps: []step{alloc(aTCP, 61000), alloc(bTCP, 61001), alloc(cTCP, 61002),
			release(aTCP), alloc(dTCP, 61000)},
		wantHeld: []string{"IPv4/tcp/61000", "IPv4/tcp/61001", "IPv4/tcp/61002"},
	}, {
		// Issue 13: AKO and F5 CIS match entries by podPort and ignore the
		// protocol, so TCP and UDP of one Pod port must not share a number.
		name:     "tcp and udp of one Pod port get distinct numbers",
		rng:      wide,
		steps:    []step{alloc(aTCP, 61000), alloc(aUDP, 61001), alloc(bTCP, 61002), alloc(bUDP, 61003)},
		wantHeld: []string{"IPv4/tcp/61000", "IPv4/tcp/61002", "IPv4/udp/61001", "IPv4/udp/61003"},
	}, {
		name:     "one round-robin cursor per family is shared by tcp and udp",
		rng:      wide,
		steps:    []step{alloc(aUDP, 61000), alloc(bTCP, 61001), release(aUDP), alloc(cTCP, 61002), alloc(aUDP, 61003)},
		wantHeld: []string{"IPv4/tcp/61001", "IPv4/tcp/61002", "IPv4/udp/61003"},
	}, {
		name: "a number a udp mapping released goes to a tcp mapping after the wrap",
		rng:  small,
		steps: []step{alloc(aTCP, 61000), alloc(aUDP, 61001), alloc(bTCP, 61002),
			release(aUDP), alloc(cTCP, 61001)},
		wantHeld: []string{"IPv4/tcp/61000", "IPv4/tcp/61001", "IPv4/tcp/61002"},
	}, {
		name:     "IP families are independent",
		rng:      wide,
		steps:    []step{alloc(aTCP, 61000), alloc(aTCP6, 61000), alloc(aUDP, 61001), alloc(aUDP6, 61001)},
		wantHeld: []string{"IPv4/tcp/61000", "IPv4/udp/61001", "IPv6/tcp/61000", "IPv6/udp/61001"},
	}, {
		name:     "skips a port busy on the host",
		rng:      wide,
		steps:    []step{busy(v4, tcp, 61000), busy(v4, tcp, 61001), alloc(aTCP, 61002), alloc(aUDP, 61003)},
		wantHeld: []string{"IPv4/tcp/61002", "IPv4/udp/61003"},
	}, {
		// Only the protocol the mapping reserves matters: a host process on
		// TCP 61000 does not keep a UDP mapping off 61000, and the number is
		// then held by that one mapping.
		name: "a port busy on the host only for the other protocol is usable",
		rng:  wide,
		steps: []step{busy(v4, tcp, 61000), busy(v4, udp, 61001), alloc(aUDP, 61000), alloc(aTCP, 61001),
			alloc(bUDP, 61002), lookup(aUDP, 61000, true)},
		wantHeld: []string{"IPv4/tcp/61001", "IPv4/udp/61000", "IPv4/udp/61002"},
	}, {
		name: "capacity is the range per family, whatever the protocol",
		rng:  small,
		steps: []step{alloc(aTCP, 61000), alloc(aUDP, 61001), alloc(bTCP, 61002),
			allocFails(bUDP, portalloc.ErrExhausted), lookup(bUDP, 0, false), alloc(aUDP6, 61000),
			release(aTCP), alloc(bUDP, 61000)},
		wantHeld: []string{"IPv4/tcp/61002", "IPv4/udp/61000", "IPv4/udp/61001", "IPv6/udp/61000"},
	}, {
		name: "exhaustion is an error, and a release makes room again",
		rng:  small,
		steps: []step{alloc(aTCP, 61000), alloc(bTCP, 61001), alloc(cTCP, 61002),
			allocFails(dTCP, portalloc.ErrExhausted), lookup(dTCP, 0, false),
			release(bTCP), alloc(dTCP, 61001)},
		wantHeld: []string{"IPv4/tcp/61000", "IPv4/tcp/61001", "IPv4/tcp/61002"},
	}, {
		name: "ports busy on the host count towards exhaustion",
		rng:  small,
		steps: []step{busy(v4, tcp, 61000), busy(v4, tcp, 61001), busy(v4, tcp, 61002),
			allocFails(aTCP, portalloc.ErrExhausted), alloc(aUDP, 61000)},
		wantHeld: []string{"IPv4/udp/61000"},
	}, {
		name: "allocate is idempotent for a key",
		rng:  wide,
		steps: []step{alloc(aTCP, 61000), alloc(aTCP, 61000), alloc(bTCP, 61001), alloc(aTCP, 61000),
			lookup(aTCP, 61000, true)},
		wantHeld: []string{"IPv4/tcp/61000", "IPv4/tcp/61001"},
	}, {
		name:     "restore takes the given port and allocation skips it",
		rng:      wide,
		steps:    []step{restore(aTCP, 61000), restore(aTCP, 61000), alloc(bTCP, 61001), lookup(aTCP, 61000, true)},
		wantHeld: []string{"IPv4/tcp/61000", "IPv4/tcp/61001"},
	}, {
		name: "restore rejects out-of-range, taken, busy and conflicting ports",
		rng:  wide,
		steps: []step{
			restoreFails(aTCP, 60999, nil, "out of range 61000-61009"),
			restoreFails(aTCP, 61010, nil, "out of range 61000-61009"),
			restore(aTCP, 61005),
			restoreFails(bTCP, 61005, portalloc.ErrTaken, "ns/a:8080"),
			busy(v4, tcp, 61006),
			restoreFails(bTCP, 61006, syscall.EADDRINUSE, "61006"),
			restoreFails(aTCP, 61007, nil, "already holds port 61005"),
			restoreFails(aUDP, 61005, portalloc.ErrTaken, "ns/a:8080/tcp/IPv4"),
			restoreFails(bUDP, 61005, portalloc.ErrTaken, "ns/a:8080/tcp/IPv4"),
			restore(aTCP6, 61005),
			restore(aUDP, 61008),
		},
		wantHeld: []string{"IPv4/tcp/61005", "IPv4/udp/61008", "IPv6/tcp/61005"},
	}, {
		name: "release pod frees all its keys and only them",
		rng:  wide,
		steps: []step{alloc(aTCP, 61000), alloc(aUDP, 61001), alloc(aOther, 61002), alloc(aTCP6, 61000),
			alloc(bTCP, 61003), releasePod("ns/a"), lookup(aTCP, 0, false), lookup(bTCP, 61003, true)},
		wantHeld: []string{"IPv4/tcp/61003"},
	}, {
		name:     "releasing a key without a port is a no-op",
		rng:      wide,
		steps:    []step{release(aTCP), alloc(aTCP, 61000), release(aTCP), release(aTCP)},
		wantHeld: nil,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := portalloctest.NewReserver()
			a, err := portalloc.New(tt.rng, r)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.steps {
				s(t, a, r)
			}
			if diff := cmp.Diff(tt.wantHeld, r.Held()); diff != "" {
				t.Errorf("open reservations (-want +got):\n%s", diff)
			}
			if err := a.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if held := r.Held(); len(held) != 0 {
				t.Errorf("reservations still open after Close: %v", held)
			}
		})
	}
}

func TestAllocator_returnsBindErrorsOtherThanAddressInUse(t *testing.T) {
	r := portalloctest.NewReserver()
	r.Err = syscall.EMFILE
	a, err := portalloc.New(portalloc.Range{Start: 61000, End: 61009}, r)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Allocate(aTCP)
	if !errors.Is(err, syscall.EMFILE) || errors.Is(err, portalloc.ErrExhausted) {
		t.Fatalf("Allocate = %v, want the EMFILE error itself, not exhaustion", err)
	}
}

func TestAllocator_rejectsInvalidKeys(t *testing.T) {
	tests := []struct {
		name string
		key  portalloc.Key
		want string
	}{
		{"empty pod", key("", 80, tcp, v4), "empty Pod name"},
		{"port zero", key("ns/a", 0, tcp, v4), "out of 1-65535"},
		{"uppercase protocol", key("ns/a", 80, "TCP", v4), `protocol "TCP"`},
		{"sctp", key("ns/a", 80, "sctp", v4), `protocol "sctp"`},
		{"empty family", key("ns/a", 80, tcp, ""), `IP family ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := portalloc.New(portalloc.Range{Start: 61000, End: 61009}, portalloctest.NewReserver())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Allocate(tt.key); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Allocate(%+v) = %v, want an error mentioning %q", tt.key, err, tt.want)
			}
			if err := a.Restore(tt.key, 61000); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Restore(%+v) = %v, want an error mentioning %q", tt.key, err, tt.want)
			}
		})
	}
}

func TestAllocator_countsAndKeys(t *testing.T) {
	r := portalloctest.NewReserver()
	a, err := portalloc.New(portalloc.Range{Start: 61000, End: 61009}, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []portalloc.Key{aOther, aTCP, bTCP, aUDP, aTCP6} {
		if _, err := a.Allocate(k); err != nil {
			t.Fatal(err)
		}
	}
	// One number per mapping and family: the four IPv4 mappings hold four
	// numbers, and a new TCP or UDP mapping may take any of the other six.
	got := map[string]int{
		"inUse v4": a.InUse(v4), "free v4 tcp": a.Free(v4, tcp), "free v4 udp": a.Free(v4, udp),
		"inUse v6": a.InUse(v6), "free v6 tcp": a.Free(v6, tcp), "free v6 udp": a.Free(v6, udp),
	}
	want := map[string]int{
		"inUse v4": 4, "free v4 tcp": 6, "free v4 udp": 6,
		"inUse v6": 1, "free v6 tcp": 9, "free v6 udp": 9,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]portalloc.Key{aTCP, aOther, aUDP, aTCP6}, a.Keys("ns/a")); diff != "" {
		t.Errorf("Keys(ns/a) (-want +got):\n%s", diff)
	}
	if keys := a.Keys("ns/nobody"); len(keys) != 0 {
		t.Errorf("Keys(ns/nobody) = %v, want none", keys)
	}
	wantAll := map[portalloc.Key]int{aOther: 61000, aTCP: 61001, bTCP: 61002, aUDP: 61003, aTCP6: 61000}
	if diff := cmp.Diff(wantAll, a.All()); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
}

func TestNew_rejectsInvalidRange(t *testing.T) {
	for _, r := range []portalloc.Range{{Start: 62000, End: 61000}, {Start: 0, End: 10}, {Start: 61000, End: 65536}} {
		if _, err := portalloc.New(r, portalloctest.NewReserver()); err == nil {
			t.Errorf("New(%v) succeeded, want an error", r)
		}
	}
}

// TestHold: a port outside the range is held by a socket until its closer
// closes, enters no table, and fails when a host process uses it; a port
// of the range is refused (Restore or Allocate take those).
func TestHold(t *testing.T) {
	r := portalloctest.NewReserver()
	a, err := portalloc.New(portalloc.Range{Start: 61000, End: 61001}, r)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Hold(aTCP, 60000)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Held(); !cmp.Equal(got, []string{"IPv4/tcp/60000"}) {
		t.Errorf("held %v, want the one socket of 60000", got)
	}
	if _, ok := a.Lookup(aTCP); ok || a.InUse(v4) != 0 {
		t.Errorf("a held port entered the table (lookup %v, in use %d)", ok, a.InUse(v4))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := r.Held(); len(got) != 0 {
		t.Errorf("held %v after Close, want none", got)
	}
	r.SetBusy(v4, tcp, 60001, true)
	if _, err := a.Hold(aTCP, 60001); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Hold of a port a host process uses: %v, want EADDRINUSE", err)
	}
	if _, err := a.Hold(aTCP, 61000); err == nil || !strings.Contains(err.Error(), "in the range") {
		t.Errorf("Hold of a port in the range: %v, want refused", err)
	}
}
