package datapath

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

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

// nftTables lists the nftables tables of every family, as "ip npl" or "ip6
// kube-proxy", with one `nft list tables`. It fails when nft is missing or
// does not run here.
func nftTables(ctx context.Context) (map[string]bool, error) {
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("list nftables tables: %w", err)
	}
	processExecs.Add(1)
	out, err := exec.CommandContext(ctx, path, "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	return parseTables(string(out)), nil
}

// parseTables reads the output of `nft list tables`.
func parseTables(out string) map[string]bool {
	tables := map[string]bool{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables[f[1]+" "+f[2]] = true
		}
	}
	return tables
}

// OpenFamilies resolves requested (see Choose), logs the choice and why, and
// opens the chosen backend's datapath of each family. Then it removes what
// the other backends left on the node, so that a change of backend (an
// upgrade, or auto deciding otherwise) leaves one set of rules; a failure
// there is logged, not fatal: our nftables chains run before the iptables nat
// chains, so a stale iptables rule cannot take a connection from them.
// Leftovers of the nftables backend are looked for with one listing of the
// tables, and only a family whose npl table exists is opened.
func OpenFamilies(ctx context.Context, requested Backend, families []contract.Family) ([]Instance, error) {
	logger := klog.FromContext(ctx)
	backend, reason, tables := choose(ctx, requested)
	var out []Instance
	for _, fam := range families {
		dp, err := Open(backend, fam)
		if err != nil {
			return nil, fmt.Errorf("datapath %s (%s): %w", backend, reason, err)
		}
		out = append(out, dp)
	}
	logger.Info("Datapath", "backend", backend, "reason", reason, "families", families)
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
	return out, nil
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
