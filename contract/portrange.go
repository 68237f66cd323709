package contract

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultPortRange is the range npl-agent allocates node ports from when
// --port-range is not given (Antrea's default too).
var DefaultPortRange = PortRange{Start: 61000, End: 62000}

// PortRange is an inclusive range of ports [Start, End]: npl-agent's
// --port-range, which npl-lbsync's nodePortRange repeats.
type PortRange struct {
	Start int
	End   int
}

// ParsePortRange parses "START-END" (inclusive). It rejects a malformed value, a
// port outside 1-65535 and a reversed range. A single port "N" is not accepted:
// a range of one port is written "N-N".
func ParsePortRange(s string) (PortRange, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return PortRange{}, fmt.Errorf("parse port range %q: want START-END", s)
	}
	start, err := parsePort(lo)
	if err != nil {
		return PortRange{}, fmt.Errorf("parse port range %q: start: %w", s, err)
	}
	end, err := parsePort(hi)
	if err != nil {
		return PortRange{}, fmt.Errorf("parse port range %q: end: %w", s, err)
	}
	r := PortRange{Start: start, End: end}
	if err := r.Validate(); err != nil {
		return PortRange{}, fmt.Errorf("parse port range %q: %w", s, err)
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
func (r PortRange) Validate() error {
	if r.Start < 1 || r.Start > 65535 || r.End < 1 || r.End > 65535 {
		return fmt.Errorf("range %s is out of 1-65535", r)
	}
	if r.Start > r.End {
		return fmt.Errorf("range %s is reversed", r)
	}
	return nil
}

// String formats r as ParsePortRange reads it.
func (r PortRange) String() string {
	return fmt.Sprintf("%d-%d", r.Start, r.End)
}

// Size is the number of ports in r.
func (r PortRange) Size() int {
	if r.End < r.Start {
		return 0
	}
	return r.End - r.Start + 1
}

// Contains reports whether port lies in r.
func (r PortRange) Contains(port int) bool {
	return port >= r.Start && port <= r.End
}

// Overlaps reports whether r and other share at least one port.
func (r PortRange) Overlaps(other PortRange) bool {
	return r.Start <= other.End && other.Start <= r.End
}
