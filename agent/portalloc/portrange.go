package portalloc

import (
	"fmt"
	"os"
	"strings"

	"github.com/nodeportlocal/npl/contract"
)

// Range is an inclusive range of ports [Start, End]: the range npl-agent
// allocates node ports from, which npl-lbsync checks annotation entries
// against (contract.PortRange).
type Range = contract.PortRange

// DefaultNodePortRange is the Kubernetes Service NodePort range
// (kube-apiserver --service-node-port-range) when the cluster does not change it.
var DefaultNodePortRange = Range{Start: 30000, End: 32767}

// localPortRangeFile holds the kernel's ephemeral port range for IPv4; IPv6
// uses the same setting.
const localPortRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// ParseRange parses "START-END" (inclusive) as contract.ParsePortRange.
func ParseRange(s string) (Range, error) { return contract.ParsePortRange(s) }

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
