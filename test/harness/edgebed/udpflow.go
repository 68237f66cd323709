package edgebed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"
)

// UDPFlow is one UDP flow from the client namespace to a VIP: a socket of
// its own, so its own source port.
type UDPFlow struct{ conn net.Conn }

// nextSourcePort gives each flow of the process its own source port, below
// the ephemeral range: a flow from a port an earlier flow used would be
// that flow again while conntrack remembers it (30 s to 2 min), member and
// all.
var nextSourcePort atomic.Int32

// DialUDP opens a new flow from the client namespace to addr, from a source
// port no flow of the process used before.
func (b *Bed) DialUDP(ctx context.Context, addr string) (*UDPFlow, error) {
	nextSourcePort.CompareAndSwap(0, 12000)
	port := nextSourcePort.Add(1)
	if port >= 32768 {
		return nil, errors.New("out of source ports below the ephemeral range")
	}
	var conn net.Conn
	err := b.ClientDo(func() (err error) {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.UDPAddr{Port: int(port)}}
		conn, err = d.DialContext(ctx, "udp", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &UDPFlow{conn}, nil
}

// Ask sends a datagram and returns who answered: the part of the answer
// before ": " (a stand-in Pod's or startUDPEcho's name).
func (f *UDPFlow) Ask(payload string) (string, error) {
	_ = f.conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := f.conn.Write([]byte(payload)); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := f.conn.Read(buf)
	if err != nil {
		return "", err
	}
	name, _, ok := strings.Cut(string(buf[:n]), ": ")
	if !ok {
		return "", fmt.Errorf("answer %q is not from an echo", buf[:n])
	}
	return name, nil
}

// Close ends the flow's socket.
func (f *UDPFlow) Close() { _ = f.conn.Close() }

// LocalPort is the flow's source port.
func (f *UDPFlow) LocalPort() int { return f.conn.LocalAddr().(*net.UDPAddr).Port }

// UDPMemberOf returns the member ("ip:port") edge e's nftables table sent
// flow f to, from the edge's conntrack entry of the flow.
func (e *EdgeHost) UDPMemberOf(ctx context.Context, f *UDPFlow) (string, error) {
	remote := f.conn.RemoteAddr().(*net.UDPAddr)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", e.Netns, "conntrack", "-L", "-p", "udp",
		"--orig-port-src", fmt.Sprint(f.LocalPort()), "--orig-dst", remote.IP.String(), "--orig-port-dst", fmt.Sprint(remote.Port))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("conntrack -L in the edge: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	// udp 17 29 src=C dst=VIP sport=P dport=53 src=MEMBER dst=EDGE sport=MPORT dport=P ...
	var srcs, sports []string
	for _, f := range strings.Fields(out.String()) {
		if v, ok := strings.CutPrefix(f, "src="); ok {
			srcs = append(srcs, v)
		}
		if v, ok := strings.CutPrefix(f, "sport="); ok {
			sports = append(sports, v)
		}
	}
	if len(srcs) != 2 || len(sports) != 2 {
		return "", fmt.Errorf("no single conntrack entry for the flow from port %d: %q", f.LocalPort(), out.String())
	}
	return net.JoinHostPort(srcs[1], sports[1]), nil
}
