package portalloc

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/internal/netns"
)

// Reserver holds a node port so that no host process can take it while a
// mapping uses it. Reserve returns an error wrapping syscall.EADDRINUSE when a
// host process already uses the port; the allocator then tries the next one.
type Reserver interface {
	Reserve(family contract.Family, proto contract.Protocol, port int) (io.Closer, error)
}

// SocketReserver reserves a port with a bound socket on the family's wildcard
// address, as kube-proxy and Antrea do: a TCP socket that listens and never
// accepts, or a bound UDP socket. The DNAT rules run before the socket is
// consulted, so traffic to the port reaches the Pod, not the socket.
//
// The socket lives in the network namespace of the calling thread, or in the
// namespace at NetNSPath when it is set (e.g. "/proc/1234/ns/net"); a socket
// keeps the namespace it was created in.
type SocketReserver struct {
	NetNSPath string
}

// Reserve binds the socket that holds port.
func (s SocketReserver) Reserve(family contract.Family, proto contract.Protocol, port int) (io.Closer, error) {
	var network, host string
	switch family {
	case contract.FamilyIPv4:
		network, host = "4", "0.0.0.0"
	case contract.FamilyIPv6:
		// Go sets IPV6_V6ONLY for "tcp6"/"udp6", so the IPv4 table stays independent.
		network, host = "6", "::"
	default:
		return nil, fmt.Errorf("reserve port %d: unknown IP family %q", port, family)
	}
	if proto != contract.ProtocolTCP && proto != contract.ProtocolUDP {
		return nil, fmt.Errorf("reserve port %d: unknown protocol %q", port, proto)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	var c io.Closer
	err := netns.Do(s.NetNSPath, func() error {
		var lc net.ListenConfig
		var err error
		if proto == contract.ProtocolTCP {
			c, err = lc.Listen(context.Background(), "tcp"+network, addr)
		} else {
			c, err = lc.ListenPacket(context.Background(), "udp"+network, addr)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reserve %s/%s port %d: %w", proto, family, port, err)
	}
	return c, nil
}
