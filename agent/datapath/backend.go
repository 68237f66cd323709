package datapath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/nodeportlocal/npl/contract"
)

// Backend names a datapath implementation (the agent's --datapath).
type Backend string

// Backends. Auto is resolved by Choose.
const (
	BackendAuto     Backend = "auto"
	BackendIPTables Backend = "iptables"
	BackendNFTables Backend = "nftables"
)

// Backends are the concrete backends, in the order cleanup visits them.
var Backends = []Backend{BackendIPTables, BackendNFTables}

// ParseBackend checks a --datapath value.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(s); b {
	case BackendAuto, BackendIPTables, BackendNFTables:
		return b, nil
	}
	return "", fmt.Errorf("%q is not %s, %s or %s", s, BackendAuto, BackendIPTables, BackendNFTables)
}

// Instance is one family's datapath on one backend, with the counts the agent
// exports as metrics.
type Instance interface {
	Datapath
	Backend() Backend
	Family() contract.Family
	Stats() Stats
}

var (
	_ Instance = (*IPTables)(nil)
	_ Instance = (*NFTables)(nil)
)

// Backend returns BackendIPTables.
func (t *IPTables) Backend() Backend { return BackendIPTables }

// Backend returns BackendNFTables.
func (t *NFTables) Backend() Backend { return BackendNFTables }

// Open returns the datapath of family on a concrete backend. iptables runs in
// the mode of the iptables command on PATH.
func Open(backend Backend, family contract.Family) (Instance, error) {
	switch backend {
	case BackendIPTables:
		return NewIPTables(family, Options{})
	case BackendNFTables:
		return NewNFTables(family)
	}
	return nil, fmt.Errorf("open datapath: backend %q is not %s or %s", backend, BackendIPTables, BackendNFTables)
}

// KubeProxyTable is the table kube-proxy's nftables mode owns in each family.
const KubeProxyTable = "kube-proxy"

// Choose resolves BackendAuto by this rule, and returns why it chose:
//
//  1. nftables when kube-proxy runs in nftables mode on the node (its table
//     exists in either family): the node is moving off iptables, and one
//     map lookup per packet is what kube-proxy gives its own NodePorts;
//  2. nftables when iptables does not work here (not installed, or its
//     --version fails) and nft does;
//  3. iptables otherwise: it works beside kube-proxy's iptables mode, the
//     CNI and every peer, as it always has.
//
// A concrete backend is returned as it is.
func Choose(ctx context.Context, requested Backend) (Backend, string) {
	backend, reason, _ := choose(ctx, requested)
	return backend, reason
}

// choose is Choose, and returns the nftables tables it listed (nil when it
// listed none), so that OpenFamilies need not list them again.
func choose(ctx context.Context, requested Backend) (Backend, string, map[string]bool) {
	if requested != BackendAuto {
		return requested, "requested by --datapath", nil
	}
	tables, _ := nftTables(ctx)
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		if tables[string(fam)+" "+KubeProxyTable] {
			return BackendNFTables, "kube-proxy runs in nftables mode (table " + string(fam) + " " + KubeProxyTable + " exists)", tables
		}
	}
	ipt, iptErr := NewIPTables(contract.FamilyIPv4, Options{})
	if iptErr == nil {
		iptErr = ipt.Probe()
	}
	if iptErr == nil {
		return BackendIPTables, "iptables works and kube-proxy does not run in nftables mode", tables
	}
	if _, err := NewNFTables(contract.FamilyIPv4); err == nil {
		return BackendNFTables, "iptables does not work here: " + iptErr.Error(), tables
	}
	return BackendIPTables, "neither iptables nor nftables works here; iptables reports: " + iptErr.Error(), tables
}

// OpenFamilies resolves requested (see Choose), logs the choice and why, and
// opens the chosen backend's datapath of each family. Then it removes what
// the other backend left on the node, so that a change of backend (an
// upgrade, or auto deciding otherwise) leaves one set of rules; a failure
// there is logged, not fatal: our nftables chains run before the iptables nat
// chains, so a stale iptables rule cannot take a connection from them.
//
// A restart keeps to the fewest commands: it reads what the chosen backend
// holds on the node first (the nat table of each family, which the first
// Sync then uses instead of reading it again; or the listing of the
// nftables tables, which also probes nft). When the backend's own rules
// are there in every family, the other backend has not run since it last
// did (the other's start removes them), so its leftovers are not looked
// for at the start but a minute later (leftoverRecheck), off the restart:
// that finds what a failed removal left.
func OpenFamilies(ctx context.Context, requested Backend, families []contract.Family) ([]Instance, error) {
	logger := klog.FromContext(ctx)
	backend, reason, tables := choose(ctx, requested)
	if backend == BackendNFTables && tables == nil {
		// Probes nft, unless the choice did; a failure is Open's to report.
		tables, _ = nftTables(ctx)
	}
	var out []Instance
	for _, fam := range families {
		dp, err := Open(backend, fam)
		if err != nil {
			return nil, fmt.Errorf("datapath %s (%s): %w", backend, reason, err)
		}
		out = append(out, dp)
	}
	logger.Info("Datapath", "backend", backend, "reason", reason, "families", families)
	ranLast := true
	for _, dp := range out {
		ranLast = wroteHere(ctx, dp, tables) && ranLast
	}
	// Leftovers the choice's listing shows are removed now all the same.
	if listed := backend == BackendIPTables && hasNPLTable(tables); ranLast && !listed {
		logger.V(2).Info("The backend's rules are in place; looking for another backend's later", "in", leftoverRecheck)
		time.AfterFunc(leftoverRecheck, func() {
			if ctx.Err() == nil {
				removeOthers(ctx, backend, nil)
			}
		})
		return out, nil
	}
	removeOthers(ctx, backend, tables)
	return out, nil
}

// leftoverRecheck is when OpenFamilies looks for another backend's rules
// after a start that did not.
var leftoverRecheck = time.Minute

// wroteHere reports whether dp's backend has its rules of dp's family on the
// node: the nat table holds its chains (read for the next Sync), or tables
// (the nftables listing) its table.
func wroteHere(ctx context.Context, dp Instance, tables map[string]bool) bool {
	switch dp := dp.(type) {
	case *IPTables:
		found, err := dp.readForSync(ctx)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Could not read the nat table", "family", dp.family, "err", err)
		}
		return found
	case *NFTables:
		return tables[nftFamily(dp.family)+" "+TableName]
	}
	return false
}

// hasNPLTable reports whether the nftables listing holds an npl table.
func hasNPLTable(tables map[string]bool) bool {
	return tables[nftFamily(contract.FamilyIPv4)+" "+TableName] || tables[nftFamily(contract.FamilyIPv6)+" "+TableName]
}

// removeOthers removes the rules of every backend but backend, in both
// families. tables is the nftables listing, when made already.
func removeOthers(ctx context.Context, backend Backend, tables map[string]bool) {
	logger := klog.FromContext(ctx)
	for _, other := range Backends {
		if other == backend {
			continue
		}
		if other == BackendNFTables && tables == nil {
			var err error
			if tables, err = nftTables(ctx); err != nil {
				logger.V(2).Info("No datapath of another backend to remove", "backend", other, "err", err)
				continue
			}
		}
		for _, fam := range []contract.Family{contract.FamilyIPv4, contract.FamilyIPv6} {
			if other == BackendNFTables && !tables[nftFamily(fam)+" "+TableName] {
				continue
			}
			dp, err := Open(other, fam)
			if err != nil {
				logger.V(2).Info("No datapath of another backend to remove", "backend", other, "family", fam, "err", err)
				continue
			}
			if err := dp.Cleanup(ctx); err != nil {
				logger.Error(err, "Could not remove the rules of another backend", "backend", other, "family", fam)
			}
		}
	}
}

// nftFamily is the nftables family of an IP family: "ip" or "ip6".
func nftFamily(fam contract.Family) string {
	if fam == contract.FamilyIPv6 {
		return string(knftables.IPv6Family)
	}
	return string(knftables.IPv4Family)
}

// CleanupAll removes the rules of every backend in both families (npl-agent
// cleanup, on uninstall). A backend that cannot run here cannot have written
// anything, so it is skipped; it is an error only when no backend runs at all.
func CleanupAll(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var errs, openErrs []error
	opened := 0
	for _, backend := range Backends {
		for _, fam := range []contract.Family{contract.FamilyIPv4, contract.FamilyIPv6} {
			dp, err := Open(backend, fam)
			if err != nil {
				logger.V(1).Info("No datapath to clean up", "backend", backend, "family", fam, "err", err)
				openErrs = append(openErrs, err)
				continue
			}
			opened++
			if err := dp.Cleanup(ctx); err != nil {
				errs = append(errs, fmt.Errorf("clean up %s %s datapath: %w", fam, backend, err))
			}
		}
	}
	if opened == 0 {
		errs = append(errs, openErrs...)
	}
	return errors.Join(errs...)
}
