// Package conntrack deletes connection-tracking entries with the conntrack
// tool (Debian's package conntrack): the one place that knows how to find
// it, what to tell a user who lacks it, and how its exit status reads.
package conntrack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
)

// UDPFlows selects UDP conntrack entries of one address family by their
// original destination and, optionally, their reply source (the member a
// DNAT picked). Zero fields select everything.
type UDPFlows struct {
	// IPv6 selects the IPv6 table; IPv4 otherwise.
	IPv6 bool
	// Dst and DstPort are the original destination (a VIP, a node port).
	Dst     netip.Addr
	DstPort int
	// ReplySrc is the reply source: the address and port the flow was
	// translated to.
	ReplySrc netip.AddrPort
}

// args are conntrack's arguments for f.
func (f UDPFlows) args() []string {
	fam := "ipv4"
	if f.IPv6 {
		fam = "ipv6"
	}
	args := []string{"-f", fam, "-p", "udp"}
	if f.Dst.IsValid() {
		args = append(args, "--orig-dst", f.Dst.String())
	}
	if f.DstPort != 0 {
		args = append(args, "--orig-port-dst", strconv.Itoa(f.DstPort))
	}
	if f.ReplySrc.IsValid() {
		args = append(args, "--reply-src", f.ReplySrc.Addr().String(), "--reply-port-src", strconv.Itoa(int(f.ReplySrc.Port())))
	}
	return args
}

// DeleteUDP deletes the entries f selects, so that the next datagram of
// those flows is a new flow that the current rules translate. No entry
// matching is not an error (conntrack exits 1 then).
func DeleteUDP(ctx context.Context, f UDPFlows) error {
	bin, err := exec.LookPath("conntrack")
	if err != nil {
		return fmt.Errorf("conntrack not found (apt-get install conntrack): %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"-D"}, f.args()...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return nil // nothing matched
	}
	if err != nil {
		return fmt.Errorf("conntrack -D %s: %w: %s", strings.Join(f.args(), " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
