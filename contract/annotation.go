// Package contract owns the facts that npl-agent, npl-lbsync, nplctl and the
// tests share, so that none of them keeps a copy: the NodePortLocal
// annotation contract with Antrea, AKO and F5 CIS (the keys, the JSON shape
// of the Pod annotation, its parsing and formatting), the resolution of a
// Service port's targetPort on a Pod, the rule by which a Service selects a
// Pod, and the npl.io keys npl leaves on objects. It is a leaf: it imports
// only the Kubernetes API types.
package contract

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

const (
	// ServiceEnabledKey opts a Service in. Only the exact value "true" counts.
	ServiceEnabledKey = "nodeportlocal.antrea.io/enabled"
	// PodKey is the Pod annotation that lists the node-port mappings.
	PodKey = "nodeportlocal.antrea.io"
)

// Protocol is the protocol of an entry, lowercase as Antrea writes it.
type Protocol string

// The protocols NodePortLocal maps.
const (
	ProtocolTCP Protocol = "tcp"
	ProtocolUDP Protocol = "udp"
)

// ProtocolOf returns the entry protocol of a Kubernetes protocol (empty is
// TCP, as Kubernetes defaults it), and false for one NodePortLocal does not
// map (SCTP).
func ProtocolOf(p corev1.Protocol) (Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return ProtocolTCP, true
	case corev1.ProtocolUDP:
		return ProtocolUDP, true
	}
	return "", false
}

// Kubernetes returns the Kubernetes protocol of p.
func (p Protocol) Kubernetes() corev1.Protocol {
	if p == ProtocolUDP {
		return corev1.ProtocolUDP
	}
	return corev1.ProtocolTCP
}

// Family is the ipFamily of an entry.
type Family string

// The IP families.
const (
	FamilyIPv4 Family = "IPv4"
	FamilyIPv6 Family = "IPv6"
)

// FamilyOf returns the family of an address; an IPv4-mapped IPv6 address
// is IPv4.
func FamilyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return FamilyIPv4
	}
	return FamilyIPv6
}

// Entry is one mapping of a Pod port to a node port. The JSON field names and
// their order are those Antrea writes, so consumers that compare bytes agree.
type Entry struct {
	PodPort  int      `json:"podPort"`
	NodeIP   string   `json:"nodeIP"`
	NodePort int      `json:"nodePort"`
	Protocol Protocol `json:"protocol"`
	IPFamily Family   `json:"ipFamily"`
}

// ServiceEnabled reports whether a Service's annotations opt it in.
func ServiceEnabled(annotations map[string]string) bool {
	return annotations[ServiceEnabledKey] == "true"
}

// Parse decodes a Pod annotation value. It accepts what Antrea writes, also
// entries without ipFamily (IPv4) or with an uppercase protocol, and returns
// an error naming the first entry that is not a usable mapping. The entries
// come back normalised (lowercase protocol, ipFamily set) and sorted.
func Parse(value string) ([]Entry, error) {
	var entries []Entry
	dec := json.NewDecoder(strings.NewReader(value))
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("parse %s annotation: %w", PodKey, err)
	}
	// Only JSON whitespace may follow (Decoder.More would let "[]]" through).
	if rest := strings.Trim(value[dec.InputOffset():], " \t\r\n"); rest != "" {
		return nil, fmt.Errorf("parse %s annotation: trailing data after the JSON array", PodKey)
	}
	for i := range entries {
		if err := normalise(&entries[i]); err != nil {
			return nil, fmt.Errorf("parse %s annotation: entry %d: %w", PodKey, i, err)
		}
	}
	Sort(entries)
	return entries, nil
}

func normalise(e *Entry) error {
	e.Protocol = Protocol(strings.ToLower(string(e.Protocol)))
	if e.Protocol != ProtocolTCP && e.Protocol != ProtocolUDP {
		return fmt.Errorf("protocol %q is not tcp or udp", e.Protocol)
	}
	if e.PodPort < 1 || e.PodPort > 65535 {
		return fmt.Errorf("podPort %d is out of 1-65535", e.PodPort)
	}
	if e.NodePort < 1 || e.NodePort > 65535 {
		return fmt.Errorf("nodePort %d is out of 1-65535", e.NodePort)
	}
	addr, err := netip.ParseAddr(e.NodeIP)
	if err != nil {
		return fmt.Errorf("nodeIP %q: %w", e.NodeIP, err)
	}
	if addr.Zone() != "" {
		// A load balancer cannot reach a scoped address ("fe80::1%eth0").
		return fmt.Errorf("nodeIP %q has a zone", e.NodeIP)
	}
	family := FamilyIPv4
	if addr.Is6() && !addr.Is4In6() {
		family = FamilyIPv6
	}
	switch e.IPFamily {
	case "":
		e.IPFamily = family
	case FamilyIPv4, FamilyIPv6:
		if e.IPFamily != family {
			return fmt.Errorf("nodeIP %s is not of ipFamily %s", e.NodeIP, e.IPFamily)
		}
	default:
		return fmt.Errorf("ipFamily %q is not IPv4 or IPv6", e.IPFamily)
	}
	return nil
}

// Format encodes entries as the annotation value, sorted so equal sets give
// equal bytes. An empty list formats as "" (the caller deletes the key).
func Format(entries []Entry) (string, error) {
	if len(entries) == 0 {
		return "", nil
	}
	sorted := append([]Entry(nil), entries...)
	Sort(sorted)
	b, err := json.Marshal(sorted)
	if err != nil {
		return "", fmt.Errorf("format %s annotation: %w", PodKey, err)
	}
	return string(b), nil
}

// Sort orders entries by family, protocol, podPort, then nodeIP and nodePort.
func Sort(entries []Entry) {
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if a.IPFamily != b.IPFamily {
			return a.IPFamily < b.IPFamily
		}
		if a.Protocol != b.Protocol {
			return a.Protocol < b.Protocol
		}
		if a.PodPort != b.PodPort {
			return a.PodPort < b.PodPort
		}
		if a.NodeIP != b.NodeIP {
			return a.NodeIP < b.NodeIP
		}
		return a.NodePort < b.NodePort
	})
}

// Equal reports whether two entry lists hold the same mappings in any order.
func Equal(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	x := append([]Entry(nil), a...)
	y := append([]Entry(nil), b...)
	Sort(x)
	Sort(y)
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
