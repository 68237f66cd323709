package datapath_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/contract"
)

// counted is a datapath that reports the commands it ran.
type counted interface {
	datapath.Datapath
	Stats() datapath.Stats
}

// backends are the datapath implementations; tests that hold for every
// backend run once per entry.
var backends = []struct {
	name string
	new  func(t testing.TB, family contract.Family) counted
}{
	{"iptables", func(t testing.TB, family contract.Family) counted { return newIPTables(t, family, "") }},
	{"nftables", func(t testing.TB, family contract.Family) counted { return newNFTables(t, family) }},
}

// newNFTables returns the nftables datapath of family in the private network
// namespace, with no npl table left from an earlier test, and removes its
// table when the test ends.
func newNFTables(t testing.TB, family contract.Family) *datapath.NFTables {
	t.Helper()
	requirePrivateNetNS(t)
	nft, err := datapath.NewNFTables(family)
	if err != nil {
		t.Fatalf("NewNFTables(%s): %v", family, err)
	}
	ctx := context.Background()
	if err := nft.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup before the test: %v", err)
	}
	t.Cleanup(func() {
		if err := nft.Cleanup(ctx); err != nil {
			t.Errorf("Cleanup after the test: %v", err)
		}
	})
	return nft
}

func nftFamily(family contract.Family) string {
	if family == v6 {
		return "ip6"
	}
	return "ip"
}

// nftElements lists a map or set of the npl table with the nft command, as
// sorted "key : value" strings, read from nft's JSON independently of the
// code under test.
func nftElements(t testing.TB, family contract.Family, kind, name string) []string {
	t.Helper()
	out := run(t, "nft", "--json", "list", kind, nftFamily(family), datapath.TableName, name)
	var doc struct {
		Nftables []map[string]struct {
			Elem []json.RawMessage `json:"elem"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("parse nft --json output: %v\n%s", err, out)
	}
	var got []string
	for _, obj := range doc.Nftables {
		for _, e := range obj[kind].Elem {
			got = append(got, flatten(t, e))
		}
	}
	slices.Sort(got)
	return got
}

// flatten writes an nft JSON element as "a . b : c . d", dropping comments.
func flatten(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var walk func(v any) string
	walk = func(v any) string {
		switch x := v.(type) {
		case []any: // [key, value] of a map
			return walk(x[0]) + " : " + walk(x[1])
		case map[string]any:
			if e, ok := x["elem"].(map[string]any); ok {
				return walk(e["val"])
			}
			if c, ok := x["concat"].([]any); ok {
				var parts []string
				for _, p := range c {
					parts = append(parts, walk(p))
				}
				return strings.Join(parts, " . ")
			}
		case float64:
			return fmt.Sprint(int(x))
		case string:
			return x
		}
		t.Fatalf("unexpected nft JSON element %s", raw)
		return ""
	}
	return walk(v)
}

// wantElements is what the map and the set must hold for d.
func wantElements(family contract.Family, d datapath.Desired) (mapping, sources []string) {
	for _, m := range d.Mappings {
		if contract.FamilyOf(m.PodIP) == family {
			mapping = append(mapping, fmt.Sprintf("%s . %d : %s . %d", m.Protocol, m.NodePort, m.PodIP, m.PodPort))
		}
	}
	for _, a := range d.HairpinSources {
		if contract.FamilyOf(a) == family {
			sources = append(sources, a.String())
		}
	}
	slices.Sort(mapping)
	slices.Sort(sources)
	return mapping, sources
}

func assertTable(t *testing.T, family contract.Family, d datapath.Desired) {
	t.Helper()
	wantMap, wantSet := wantElements(family, d)
	if diff := cmp.Diff(wantMap, nftElements(t, family, "map", "node-ports")); diff != "" {
		t.Errorf("map node-ports (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSet, nftElements(t, family, "set", "hairpin-sources")); diff != "" {
		t.Errorf("set hairpin-sources (-want +got):\n%s", diff)
	}
}

func assertNoNFTDrift(t *testing.T, dp datapath.Datapath, d datapath.Desired) {
	t.Helper()
	drift, err := dp.Check(context.Background(), d)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if drift {
		t.Fatal("Check found drift right after Sync")
	}
}

func TestNFTables_syncWritesTheTableAndItsElements(t *testing.T) {
	for _, family := range []contract.Family{v4, v6} {
		t.Run(string(family), func(t *testing.T) {
			nft := newNFTables(t, family)
			ctx := context.Background()
			d := desiredFor(family, 3)
			before := nft.Stats()
			if err := nft.Sync(ctx, d); err != nil {
				t.Fatal(err)
			}
			if got := nft.Stats().Writes - before.Writes; got != 1 {
				t.Errorf("a first Sync made %d transactions, want 1", got)
			}
			assertTable(t, family, d)
			assertNoNFTDrift(t, nft, d)
			table := run(t, "nft", "list", "table", nftFamily(family), datapath.TableName)
			for _, want := range []string{
				"type nat hook prerouting priority dstnat - 1", "type nat hook output priority -101",
				"type nat hook postrouting priority srcnat - 1", "fib daddr type local jump node-ports",
				"to meta l4proto . th dport map @node-ports", "saddr @hairpin-sources ct status dnat",
			} {
				if !strings.Contains(table, want) {
					t.Errorf("the table lacks %q:\n%s", want, table)
				}
			}
		})
	}
}

// TestNFTables_syncWritesOnlyTheDifferenceUntilDrift: after a whole write, a
// Sync is one transaction of element deletes and adds (an element added by
// hand survives it, which a whole write would drop); once Check has seen the
// stray element, the next Sync writes the table whole.
func TestNFTables_syncWritesOnlyTheDifferenceUntilDrift(t *testing.T) {
	nft := newNFTables(t, v4)
	ctx := context.Background()
	if err := nft.Sync(ctx, desired(5)); err != nil {
		t.Fatal(err)
	}
	run(t, "nft", "add", "element", "ip", datapath.TableName, "node-ports", "{ tcp . 64999 : 203.0.113.9 . 80 }")
	next := desired(6)
	next.Mappings = next.Mappings[1:]
	next.Mappings[0].PodPort++ // a changed target: deleted and added again
	writes := nft.Stats().Writes
	if err := nft.Sync(ctx, next); err != nil {
		t.Fatal(err)
	}
	if got := nft.Stats().Writes - writes; got != 1 {
		t.Errorf("transactions for a difference = %d, want 1", got)
	}
	wantMap, _ := wantElements(v4, next)
	got := nftElements(t, v4, "map", "node-ports")
	if !slices.Contains(got, "tcp . 64999 : 203.0.113.9 . 80") {
		t.Fatalf("the hand-added element is gone: the Sync wrote the table whole\n%s", strings.Join(got, "\n"))
	}
	if diff := cmp.Diff(wantMap, slices.DeleteFunc(got, func(s string) bool { return strings.Contains(s, "64999") })); diff != "" {
		t.Errorf("elements after the difference (-want +got):\n%s", diff)
	}
	if drift, err := nft.Check(ctx, next); err != nil || !drift {
		t.Fatalf("Check = %v, %v; want drift (the hand-added element)", drift, err)
	}
	if err := nft.Sync(ctx, next); err != nil {
		t.Fatal(err)
	}
	assertTable(t, v4, next)
	assertNoNFTDrift(t, nft, next)
}

// nftBreakages are hand edits the drift check must find and Sync repair.
var nftBreakages = []struct {
	name string
	cmds [][]string
}{
	{"element deleted", [][]string{{"delete", "element", "ip", "npl", "node-ports", "{ tcp . 61001 }"}}},
	{"element retargeted", [][]string{
		{"delete", "element", "ip", "npl", "node-ports", "{ tcp . 61001 }"},
		{"add", "element", "ip", "npl", "node-ports", "{ tcp . 61001 : 203.0.113.9 . 80 }"},
	}},
	{"map flushed", [][]string{{"flush", "map", "ip", "npl", "node-ports"}}},
	{"hairpin source deleted", [][]string{{"delete", "element", "ip", "npl", "hairpin-sources", "{ 198.19.0.3 }"}}},
	{"jump chain flushed", [][]string{{"flush", "chain", "ip", "npl", "prerouting"}}},
	{"base chain deleted", [][]string{{"flush", "chain", "ip", "npl", "output"}, {"delete", "chain", "ip", "npl", "output"}}},
	{"rule added", [][]string{{"add", "rule", "ip", "npl", "node-ports", "counter"}}},
	{"table deleted", [][]string{{"delete", "table", "ip", "npl"}}},
}

func TestNFTables_checkFindsDriftAndSyncRepairsIt(t *testing.T) {
	for _, b := range nftBreakages {
		t.Run(b.name, func(t *testing.T) {
			nft := newNFTables(t, v4)
			ctx := context.Background()
			d := desired(3)
			if err := nft.Sync(ctx, d); err != nil {
				t.Fatal(err)
			}
			assertNoNFTDrift(t, nft, d)
			for _, c := range b.cmds {
				run(t, "nft", c...)
			}
			drift, err := nft.Check(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if !drift {
				t.Fatalf("Check found no drift after %s", b.name)
			}
			if err := nft.Sync(ctx, d); err != nil {
				t.Fatal(err)
			}
			assertNoNFTDrift(t, nft, d)
			assertTable(t, v4, d)
		})
	}
}

func TestNFTables_cleanupRemovesTheTable(t *testing.T) {
	for _, family := range []contract.Family{v4, v6} {
		t.Run(string(family), func(t *testing.T) {
			nft := newNFTables(t, family)
			ctx := context.Background()
			if err := nft.Sync(ctx, desiredFor(family, 3)); err != nil {
				t.Fatal(err)
			}
			if err := nft.Cleanup(ctx); err != nil {
				t.Fatalf("Cleanup: %v", err)
			}
			if tables := run(t, "nft", "list", "tables"); strings.Contains(tables, nftFamily(family)+" "+datapath.TableName+"\n") {
				t.Errorf("the npl table is still there after Cleanup:\n%s", tables)
			}
			writes := nft.Stats().Writes
			if err := nft.Cleanup(ctx); err != nil {
				t.Fatalf("second Cleanup: %v", err)
			}
			if got := nft.Stats().Writes; got != writes {
				t.Errorf("a Cleanup with nothing to remove wrote %d times", got-writes)
			}
		})
	}
}

func TestNFTables_rejectsUnknownFamily(t *testing.T) {
	if _, err := datapath.NewNFTables("IPv5"); err == nil || !strings.Contains(err.Error(), "IPv5") {
		t.Errorf("NewNFTables(IPv5) = %v, want an error naming the family", err)
	}
}

func TestChoose_autoFollowsKubeProxysMode(t *testing.T) {
	requirePrivateNetNS(t)
	ctx := context.Background()
	if got, reason := datapath.Choose(ctx, datapath.BackendAuto); got != datapath.BackendIPTables {
		t.Errorf("auto without kube-proxy's nftables table = %s (%s), want iptables", got, reason)
	}
	run(t, "nft", "add", "table", "ip6", datapath.KubeProxyTable)
	t.Cleanup(func() { _, _ = exec.Command("nft", "delete", "table", "ip6", datapath.KubeProxyTable).CombinedOutput() })
	got, reason := datapath.Choose(ctx, datapath.BackendAuto)
	if got != datapath.BackendNFTables || !strings.Contains(reason, "kube-proxy") {
		t.Errorf("auto with kube-proxy's nftables table = %s (%s), want nftables, naming kube-proxy", got, reason)
	}
	if got, _ := datapath.Choose(ctx, datapath.BackendIPTables); got != datapath.BackendIPTables {
		t.Errorf("a requested backend is kept; got %s", got)
	}
}

func TestParseBackend(t *testing.T) {
	for _, s := range []string{"auto", "iptables", "nftables"} {
		if b, err := datapath.ParseBackend(s); err != nil || string(b) != s {
			t.Errorf("ParseBackend(%q) = %q, %v", s, b, err)
		}
	}
	if _, err := datapath.ParseBackend("ebpf"); err == nil || !strings.Contains(err.Error(), `"ebpf"`) {
		t.Errorf("ParseBackend(ebpf) = %v, want an error naming the value", err)
	}
}

// TestOpenFamilies_removesTheOtherBackend: switching backends leaves only
// the chosen one's rules on the node.
func TestOpenFamilies_removesTheOtherBackend(t *testing.T) {
	ctx := context.Background()
	ipt := newIPTables(t, v4, "")
	if err := ipt.Sync(ctx, desired(2)); err != nil {
		t.Fatal(err)
	}
	newNFTables(t, v4) // removes the table when the test ends
	dps, err := datapath.OpenFamilies(ctx, datapath.BackendNFTables, []contract.Family{v4})
	if err != nil {
		t.Fatal(err)
	}
	if len(dps) != 1 || dps[0].Backend() != datapath.BackendNFTables || dps[0].Family() != v4 {
		t.Fatalf("OpenFamilies = %v, want one IPv4 nftables datapath", dps)
	}
	if save := run(t, "iptables-save", "-t", "nat"); strings.Contains(save, "NPL-") {
		t.Errorf("iptables still has npl's chains after switching to nftables:\n%s", save)
	}
	if err := dps[0].Sync(ctx, desired(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := datapath.OpenFamilies(ctx, datapath.BackendIPTables, []contract.Family{v4}); err != nil {
		t.Fatal(err)
	}
	if tables := run(t, "nft", "list", "tables"); strings.Contains(tables, "ip "+datapath.TableName+"\n") {
		t.Errorf("the npl table is still there after switching to iptables:\n%s", tables)
	}
}

// TestNewNFTables_probesNftOncePerProcess: making knftables' interface
// runs nft twice (--version, --check); every later datapath of the family
// reuses it.
func TestNewNFTables_probesNftOncePerProcess(t *testing.T) {
	requirePrivateNetNS(t)
	execs := 0
	for range 3 {
		nft, err := datapath.NewNFTables(v4)
		if err != nil {
			t.Fatal(err)
		}
		execs += nft.Stats().Execs
	}
	if execs > 2 {
		t.Errorf("3 nftables datapaths of one family ran %d commands, want at most 2", execs)
	}
}

// TestOpenFamilies_looksForTheOtherBackendWithOneCommand: with no npl table
// in nftables and no chain of its own, opening the iptables backend costs
// one `nft list tables` and its read of the nat table, which the first
// Sync uses: that Sync only writes (and no command for iptables, whose mode
// its link tells).
func TestOpenFamilies_looksForTheOtherBackendWithOneCommand(t *testing.T) {
	newIPTables(t, v4, "") // no chain left from another test
	ctx := t.Context()
	before := datapath.Execs()
	dps, err := datapath.OpenFamilies(ctx, datapath.BackendIPTables, []contract.Family{v4})
	if err != nil {
		t.Fatal(err)
	}
	if got := datapath.Execs() - before; got > 2 {
		t.Errorf("OpenFamilies(iptables) ran %d commands, want at most 2", got)
	}
	before = datapath.Execs()
	if err := dps[0].Sync(ctx, desired(2)); err != nil {
		t.Fatal(err)
	}
	if got := datapath.Execs() - before; got != 1 {
		t.Errorf("the first Sync ran %d commands, want 1 (the write)", got)
	}
}

// TestOpenFamilies_restartRunsTwoCommands: an agent restarted on a node
// that holds its backend's rules (in every family it runs) reads them once
// and writes once at most: the read shows the backend ran last, so the
// other backend's leftovers are not looked for then.
func TestOpenFamilies_restartRunsTwoCommands(t *testing.T) {
	families := []contract.Family{v4, v6}
	d := datapath.Desired{Mappings: slices.Concat(desiredFor(v4, 3).Mappings, desiredFor(v6, 3).Mappings)}
	for _, tc := range []struct {
		backend datapath.Backend
		flush   func(t *testing.T, family contract.Family)
	}{
		{datapath.BackendIPTables, func(t *testing.T, family contract.Family) {
			run(t, command(family, datapath.ModeNFT, ""), "-w", "5", "-t", "nat", "-F", datapath.ChainNodePortLocal)
		}},
		{datapath.BackendNFTables, func(t *testing.T, family contract.Family) {
			run(t, "nft", "flush", "map", nftFamily(family), datapath.TableName, "node-ports")
		}},
	} {
		t.Run(string(tc.backend), func(t *testing.T) {
			for _, fam := range families {
				var dp counted
				if tc.backend == datapath.BackendIPTables {
					dp = newIPTables(t, fam, "")
				} else {
					dp = newNFTables(t, fam)
				}
				if err := dp.Sync(t.Context(), d); err != nil {
					t.Fatal(err)
				}
			}
			for _, flushed := range []bool{false, true} {
				if flushed {
					for _, fam := range families {
						tc.flush(t, fam)
					}
				}
				before := datapath.Execs()
				dps, err := datapath.OpenFamilies(t.Context(), tc.backend, families)
				if err != nil {
					t.Fatal(err)
				}
				for _, dp := range dps {
					if err := dp.Sync(t.Context(), d); err != nil {
						t.Fatal(err)
					}
				}
				// Per family: one read and, after a flush, one write. The
				// nftables backend reads the tables of both families with
				// one listing, and writes its table whole on a start.
				want := 2 * len(families)
				if tc.backend == datapath.BackendNFTables {
					want = 1 + len(families)
				} else if !flushed {
					want = len(families)
				}
				if got := datapath.Execs() - before; got != want {
					t.Errorf("flushed %v: a restart ran %d commands, want %d", flushed, got, want)
				}
				for _, dp := range dps {
					if drift, err := dp.Check(t.Context(), d); err != nil || drift {
						t.Errorf("flushed %v: %s %s datapath drifted after the restart's Sync (%v)", flushed, dp.Backend(), dp.Family(), err)
					}
				}
			}
		})
	}
}

// TestOpenFamilies_looksForAFailedRemovalLater: a start whose backend's
// rules are in place does not look for the other backend's at once, but
// leftoverRecheck later: rules a failed removal left (the other backend's
// start could not remove ours) go then.
func TestOpenFamilies_looksForAFailedRemovalLater(t *testing.T) {
	defer datapath.SetLeftoverRecheck(300 * time.Millisecond)()
	ctx := t.Context()
	nft := newNFTables(t, v4)
	if err := nft.Sync(ctx, desired(2)); err != nil {
		t.Fatal(err)
	}
	if err := newIPTables(t, v4, "").Sync(ctx, desired(2)); err != nil { // a removal that failed
		t.Fatal(err)
	}
	if _, err := datapath.OpenFamilies(ctx, datapath.BackendNFTables, []contract.Family{v4}); err != nil {
		t.Fatal(err)
	}
	if save := run(t, "iptables-save", "-t", "nat"); !strings.Contains(save, datapath.ChainNodePortLocal) {
		t.Fatalf("the start looked for the other backend's rules at once:\n%s", save)
	}
	eventually(t, "the other backend's rules removed by the recheck", func() bool {
		return !strings.Contains(run(t, "iptables-save", "-t", "nat"), "NPL-")
	})
}
