// Package datapath programs the NodePortLocal DNAT rules of a node.
//
// The agent owns two chains of the nat table whole: NPL-NODE-PORT-LOCAL, jumped
// to from PREROUTING and OUTPUT for traffic to a local address, holds one DNAT
// rule per mapping; NPL-POSTROUTING, jumped to from POSTROUTING, holds the
// masquerade rules that same-node hairpin needs. Render computes the whole
// content of both chains. IPTables writes each change with one
// `iptables-restore --noflush`: only the rules that differ from its last
// write (deleted, then appended) while the chains are known intact, and both
// chains whole (declaring a chain replaces exactly its content) on the first
// write, after a Check found drift, after a failed write, or when the
// difference does not apply. Syncer coalesces bursts of changes and repairs
// drift.
package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/internal/conntrack"
)

// Chain names in the nat table. The agent owns their whole content.
const (
	ChainNodePortLocal = "NPL-NODE-PORT-LOCAL"
	ChainPostrouting   = "NPL-POSTROUTING"
)

// Mapping sends traffic to a local address on NodePort to PodIP:PodPort.
type Mapping struct {
	NodePort int
	Protocol contract.Protocol // tcp or udp
	PodIP    netip.Addr
	PodPort  int
	Pod      string // namespace/name, written into the rule's comment
}

// Desired is the complete content the agent wants in its chains. One Desired
// may hold both IP families: each family's datapath keeps its own addresses.
type Desired struct {
	Mappings []Mapping
	// HairpinSources are the IPs of the node's local Pods. Traffic from them
	// that NPL DNATed is masqueraded, so a Pod that reaches itself or a
	// neighbour through nodeIP:nodePort gets the replies back through the node.
	HairpinSources []netip.Addr
	// PortRange is the node-port range [start, end]; the masquerade rules match
	// only connections whose original destination port lies in it. With a zero
	// range no masquerade rule is written.
	PortRange [2]int
	// AdditionsPending says mappings are likely to be added soon: a Pod of
	// the node that a Service selects has no IP yet (a Pod replaced). It
	// is no content, only when to write: the Syncer may hold a removal
	// for them (SyncerOptions.RemovalHold).
	AdditionsPending bool
}

// Datapath programs a Desired state into the node.
type Datapath interface {
	// Sync writes the chains to match d exactly, and makes sure the jumps to
	// them exist (an implementation may trust jumps it has seen since the
	// last Check that found drift). It always writes.
	Sync(ctx context.Context, d Desired) error
	// Check reports whether the node differs from d: a rule deleted or changed,
	// a chain flushed or missing, a jump missing.
	Check(ctx context.Context, d Desired) (drift bool, err error)
	// FlushUDP deletes the conntrack entries of UDP flows to nodePort, so a
	// remapped or deleted UDP port does not keep sending to the old Pod.
	FlushUDP(ctx context.Context, nodePort int) error
	// Cleanup removes the jumps and both chains. It is idempotent.
	Cleanup(ctx context.Context) error
}

// Validate reports the first mapping, hairpin source or port range that no
// datapath could program.
func (d Desired) Validate() error {
	for _, m := range d.Mappings {
		if err := m.validate(); err != nil {
			return err
		}
	}
	for _, a := range d.HairpinSources {
		if !a.IsValid() || a.Zone() != "" {
			return fmt.Errorf("hairpin source %q is not a plain IP address", a)
		}
	}
	if d.PortRange != [2]int{} {
		lo, hi := d.PortRange[0], d.PortRange[1]
		if lo < 1 || hi > 65535 || lo > hi {
			return fmt.Errorf("port range %d-%d is not a range within 1-65535", lo, hi)
		}
	}
	return nil
}

func (m Mapping) validate() error {
	switch {
	case m.Protocol != contract.ProtocolTCP && m.Protocol != contract.ProtocolUDP:
		return fmt.Errorf("mapping of %s: protocol %q is not %s or %s", m.Pod, m.Protocol, contract.ProtocolTCP, contract.ProtocolUDP)
	case m.NodePort < 1 || m.NodePort > 65535:
		return fmt.Errorf("mapping of %s: node port %d is out of 1-65535", m.Pod, m.NodePort)
	case m.PodPort < 1 || m.PodPort > 65535:
		return fmt.Errorf("mapping of %s: Pod port %d is out of 1-65535", m.Pod, m.PodPort)
	case !m.PodIP.IsValid() || m.PodIP.Zone() != "":
		return fmt.Errorf("mapping of %s: Pod IP %q is not a plain IP address", m.Pod, m.PodIP)
	}
	return nil
}

// Multi combines one Datapath per IP family into one that calls each of them.
// Each family's datapath picks its own addresses out of a mixed Desired.
func Multi(dps ...Datapath) Datapath {
	return multi(dps)
}

type multi []Datapath

func (m multi) Sync(ctx context.Context, d Desired) error {
	var errs []error
	for _, dp := range m {
		errs = append(errs, dp.Sync(ctx, d))
	}
	return errors.Join(errs...)
}

func (m multi) Check(ctx context.Context, d Desired) (bool, error) {
	drift := false
	var errs []error
	for _, dp := range m {
		dr, err := dp.Check(ctx, d)
		drift = drift || dr
		errs = append(errs, err)
	}
	return drift, errors.Join(errs...)
}

func (m multi) FlushUDP(ctx context.Context, nodePort int) error {
	var errs []error
	for _, dp := range m {
		errs = append(errs, dp.FlushUDP(ctx, nodePort))
	}
	return errors.Join(errs...)
}

func (m multi) Cleanup(ctx context.Context) error {
	var errs []error
	for _, dp := range m {
		errs = append(errs, dp.Cleanup(ctx))
	}
	return errors.Join(errs...)
}

// Stats counts the commands a datapath ran.
type Stats struct {
	Writes int // writes: iptables-restore runs or nft transactions
	Bytes  int // input of those writes, in bytes
	Execs  int // every command run: iptables, iptables-restore, iptables-save, nft, conntrack
}

// processExecs counts every command the package ran in this process.
var processExecs atomic.Int64

// Execs returns the commands the datapath package ran in this process: every
// family's and backend's, the probes that chose the backend and the removal
// of the other backend's rules included.
func Execs() int { return int(processExecs.Load()) }

// execCount counts the commands of one datapath, each also in Execs.
type execCount struct{ atomic.Int64 }

func (c *execCount) add(n int64) {
	c.Add(n)
	processExecs.Add(n)
}

// flushUDPConntrack deletes the conntrack entries of family's UDP flows whose
// original destination port is nodePort, counting the exec in execs. Both
// backends need it: conntrack keeps a UDP flow's NAT binding after its
// mapping moved.
func flushUDPConntrack(ctx context.Context, family contract.Family, nodePort int, execs *execCount) error {
	execs.add(1)
	if err := conntrack.DeleteUDP(ctx, conntrack.UDPFlows{IPv6: family == contract.FamilyIPv6, DstPort: nodePort}); err != nil {
		return fmt.Errorf("flush UDP conntrack entries of node port %d: %w", nodePort, err)
	}
	return nil
}
