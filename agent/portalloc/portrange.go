package portalloc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Range is an inclusive range of ports [Start, End].
type Range struct {
	Start int
	End   int
}

// DefaultNodePortRange is the Kubernetes Service NodePort range
// (kube-apiserver --service-node-port-range) when the cluster does not change it.
var DefaultNodePortRange = Range{Start: 30000, End: 32767}

// localPortRangeFile holds the kernel's ephemeral port range for IPv4; IPv6
// uses the same setting.
const localPortRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// ParseRange parses "START-END" (inclusive). It rejects a malformed value, a
// port outside 1-65535 and a reversed range. A single port "N" is not accepted:
// a range of one port is written "N-N".
func ParseRange(s string) (Range, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return Range{}, fmt.Errorf("parse port range %q: want START-END", s)
	}
	start, err := parsePort(lo)
	if err != nil {
		return Range{}, fmt.Errorf("parse port range %q: start: %w", s, err)
	}
	end, err := parsePort(hi)
	if err != nil {
		return Range{}, fmt.Errorf("parse port range %q: end: %w", s, err)
	}
	r := Range{Start: start, End: end}
	if err := r.Validate(); err != nil {
		return Range{}, fmt.Errorf("parse port range %q: %w", s, err)
	}
	return r, nil
}

func parsePort(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number", s)
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %d is out of 1-65535", n)
	}
	return n, nil
}

// Validate reports whether r is a usable range: both ends in 1-65535 and
// Start <= End.
func (r Range) Validate() error {
	if r.Start < 1 || r.Start > 65535 || r.End < 1 || r.End > 65535 {
		return fmt.Errorf("range %s is out of 1-65535", r)
	}
	if r.Start > r.End {
		return fmt.Errorf("range %s is reversed", r)
	}
	return nil
}

// String formats r as ParseRange reads it.
func (r Range) String() string {
	return fmt.Sprintf("%d-%d", r.Start, r.End)
}

// Size is the number of ports in r.
func (r Range) Size() int {
	if r.End < r.Start {
		return 0
	}
	return r.End - r.Start + 1
}

// Contains reports whether port lies in r.
func (r Range) Contains(port int) bool {
	return port >= r.Start && port <= r.End
}

// Overlaps reports whether r and other share at least one port.
func (r Range) Overlaps(other Range) bool {
	return r.Start <= other.End && other.Start <= r.End
}

// LocalPortRange returns the kernel's ephemeral port range
// (net.ipv4.ip_local_port_range) of the caller's network namespace.
func LocalPortRange() (Range, error) {
	return readLocalPortRange(localPortRangeFile)
}

func readLocalPortRange(path string) (Range, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Range{}, fmt.Errorf("read ephemeral port range: %w", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return Range{}, fmt.Errorf("read ephemeral port range from %s: unexpected content %q", path, string(b))
	}
	r, err := ParseRange(fields[0] + "-" + fields[1])
	if err != nil {
		return Range{}, fmt.Errorf("read ephemeral port range from %s: %w", path, err)
	}
	return r, nil
}

// CheckRange rejects a node-port range that overlaps the kernel's ephemeral
// port range (outgoing connections would take its ports, Antrea #2381) or the
// cluster's Service NodePort range (kube-proxy would claim the same ports).
func CheckRange(r Range, nodePortRange Range) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Overlaps(nodePortRange) {
		return fmt.Errorf("port range %s overlaps the Service NodePort range %s", r, nodePortRange)
	}
	local, err := LocalPortRange()
	if err != nil {
		return err
	}
	if r.Overlaps(local) {
		return fmt.Errorf("port range %s overlaps the ephemeral port range %s (net.ipv4.ip_local_port_range)", r, local)
	}
	return nil
}
