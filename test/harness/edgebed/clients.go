package edgebed

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// ClientRange holds the extra source addresses of the client namespace
// (ClientSources): clients apart, as the load balancer sees them, for
// persistence and hashing on the source. Its own /24 of the local
// cluster's range, routed back from the edges to the client namespace.
var ClientRange = netip.MustParsePrefix("198.18.201.0/24")

// ClientSources gives the client namespace n addresses of ClientRange
// (.1 to .n, at most 254) and routes their answers back to it from every
// edge of the bed, and returns them.
func (b *Bed) ClientSources(ctx context.Context, n int) ([]netip.Addr, error) {
	if n < 1 || n > 254 {
		return nil, fmt.Errorf("%d client sources: want 1-254", n)
	}
	var out []netip.Addr
	var lines []string
	a := ClientRange.Addr()
	for range n {
		a = a.Next()
		out = append(out, a)
		lines = append(lines, fmt.Sprintf("addr replace %s/32 dev eth0", a))
	}
	if err := ipBatch(ctx, b.ClientNetns, lines...); err != nil {
		return nil, err
	}
	for _, e := range b.Edges {
		if err := ipBatch(ctx, e.Netns, fmt.Sprintf("route replace %s via %s dev eth0", ClientRange, b.ClientIP)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ClientHTTPFrom is ClientHTTP whose connections come from src, one of
// ClientSources.
func (b *Bed) ClientHTTPFrom(src netip.Addr, timeout time.Duration) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := b.ClientDo(func() error {
			var err error
			d := net.Dialer{Timeout: timeout, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}
