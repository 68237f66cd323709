package portalloc_test

import (
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/contract"
)

// bind opens a plain socket on the family's wildcard address, as a host
// process would.
func bind(family contract.Family, proto contract.Protocol, port int) (io.Closer, error) {
	network, host := "4", "0.0.0.0"
	if family == v6 {
		network, host = "6", "::"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if proto == tcp {
		return net.Listen("tcp"+network, addr)
	}
	return net.ListenPacket("udp"+network, addr)
}

func TestSocketReserver_secondBindOnReservedPortFails(t *testing.T) {
	requirePrivateNetNS(t)
	for _, tc := range []struct {
		family contract.Family
		proto  contract.Protocol
	}{{v4, tcp}, {v4, udp}, {v6, tcp}, {v6, udp}} {
		t.Run(string(tc.family)+"/"+string(tc.proto), func(t *testing.T) {
			const port = 61000
			var r portalloc.SocketReserver
			c, err := r.Reserve(tc.family, tc.proto, port)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			if other, err := bind(tc.family, tc.proto, port); !errors.Is(err, syscall.EADDRINUSE) {
				if other != nil {
					other.Close()
				}
				t.Fatalf("a host bind of a reserved port = %v, want EADDRINUSE", err)
			}
			if again, err := r.Reserve(tc.family, tc.proto, port); !errors.Is(err, syscall.EADDRINUSE) {
				if again != nil {
					again.Close()
				}
				t.Fatalf("a second Reserve = %v, want EADDRINUSE", err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			other, err := bind(tc.family, tc.proto, port)
			if err != nil {
				t.Fatalf("bind after the reservation was closed: %v", err)
			}
			other.Close()
		})
	}
}

func TestSocketReserver_familiesDoNotCollide(t *testing.T) {
	requirePrivateNetNS(t)
	var r portalloc.SocketReserver
	c4, err := r.Reserve(v4, tcp, 61001)
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	c6, err := r.Reserve(v6, tcp, 61001)
	if err != nil {
		t.Fatalf("IPv6 Reserve of a port reserved for IPv4: %v", err)
	}
	c6.Close()
}

func TestAllocator_skipsPortBoundByAnotherSocket(t *testing.T) {
	requirePrivateNetNS(t)
	for _, proto := range []contract.Protocol{tcp, udp} {
		t.Run(string(proto), func(t *testing.T) {
			hostSocket, err := bind(v4, proto, 61100)
			if err != nil {
				t.Fatal(err)
			}
			defer hostSocket.Close()
			a, err := portalloc.New(portalloc.Range{Start: 61100, End: 61101}, portalloc.SocketReserver{})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			k := key("ns/a", 8080, proto, v4)
			got, err := a.Allocate(k)
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			if got != 61101 {
				t.Fatalf("Allocate = %d, want 61101 (61100 is bound by another socket)", got)
			}
			if _, err := a.Allocate(key("ns/b", 8080, proto, v4)); !errors.Is(err, portalloc.ErrExhausted) {
				t.Fatalf("Allocate with the range full = %v, want ErrExhausted", err)
			}
			if err := a.Release(k); err != nil {
				t.Fatalf("Release: %v", err)
			}
			again, err := bind(v4, proto, 61101)
			if err != nil {
				t.Fatalf("bind of a released port: %v", err)
			}
			again.Close()
		})
	}
}

func TestSocketReserver_reservesInAnotherNetNS(t *testing.T) {
	requirePrivateNetNS(t)
	path := newNetNS(t)
	r := portalloc.SocketReserver{NetNSPath: path}
	c, err := r.Reserve(v4, tcp, 61200)
	if err != nil {
		t.Fatalf("Reserve in %s: %v", path, err)
	}
	defer c.Close()
	if again, err := r.Reserve(v4, tcp, 61200); !errors.Is(err, syscall.EADDRINUSE) {
		if again != nil {
			again.Close()
		}
		t.Fatalf("a second Reserve in the same namespace = %v, want EADDRINUSE", err)
	}
	here, err := bind(v4, tcp, 61200)
	if err != nil {
		t.Fatalf("bind in the test's own namespace: %v (the reservation leaked out of %s)", err, path)
	}
	here.Close()
}
