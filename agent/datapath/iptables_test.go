package datapath_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/contract"
)

const (
	v4 = contract.FamilyIPv4
	v6 = contract.FamilyIPv6
)

var modes = []string{datapath.ModeNFT, datapath.ModeLegacy}

// jumpArgs are the jump rules Sync must install, as iptables arguments.
var jumpArgs = map[string][]string{
	"PREROUTING":  {"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "npl node ports", "-j", "NPL-NODE-PORT-LOCAL"},
	"OUTPUT":      {"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "npl node ports", "-j", "NPL-NODE-PORT-LOCAL"},
	"POSTROUTING": {"-m", "comment", "--comment", "npl hairpin", "-j", "NPL-POSTROUTING"},
}

var jumpLines = []string{
	`-A PREROUTING -m addrtype --dst-type LOCAL -m comment --comment "npl node ports" -j NPL-NODE-PORT-LOCAL`,
	`-A OUTPUT -m addrtype --dst-type LOCAL -m comment --comment "npl node ports" -j NPL-NODE-PORT-LOCAL`,
	`-A POSTROUTING -m comment --comment "npl hairpin" -j NPL-POSTROUTING`,
}

// newIPTables returns a datapath for family and mode in the private network
// namespace, with no NPL chain left from an earlier test, and removes its
// chains when the test ends.
func newIPTables(t testing.TB, family contract.Family, mode string) *datapath.IPTables {
	t.Helper()
	requirePrivateNetNS(t)
	ipt, err := datapath.NewIPTables(family, datapath.Options{Mode: mode})
	if err != nil {
		t.Fatalf("NewIPTables(%s, %q): %v", family, mode, err)
	}
	ctx := context.Background()
	if err := ipt.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup before the test: %v", err)
	}
	t.Cleanup(func() {
		if err := ipt.Cleanup(ctx); err != nil {
			t.Errorf("Cleanup after the test: %v", err)
		}
	})
	return ipt
}

// command returns the iptables binary of family and mode, e.g. ip6tables-nft.
func command(family contract.Family, mode, suffix string) string {
	base := "iptables"
	if family == v6 {
		base = "ip6tables"
	}
	return base + "-" + mode + suffix
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nplLines returns the rules of iptables-save that belong to NPL: the jumps
// and the rules of our chains, in iptables-save order.
func nplLines(t testing.TB, family contract.Family, mode string) []string {
	t.Helper()
	var out []string
	for l := range strings.Lines(run(t, command(family, mode, "-save"), "-t", "nat")) {
		if strings.HasPrefix(l, "-A ") && strings.Contains(l, "NPL-") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// renderedRules returns the -A lines of Render.
func renderedRules(family contract.Family, d datapath.Desired) []string {
	var out []string
	for l := range strings.Lines(string(datapath.Render(family, d))) {
		if strings.HasPrefix(l, "-A ") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

func desiredFor(family contract.Family, n int) datapath.Desired {
	if family == v4 {
		return desired(n)
	}
	d := datapath.Desired{PortRange: [2]int{61000, 62000}}
	for i := range n {
		pod := netip.MustParseAddr(fmt.Sprintf("2001:2::%x", i+2))
		d.Mappings = append(d.Mappings, datapath.Mapping{
			NodePort: 61000 + i, Protocol: "udp", PodIP: pod, PodPort: 53, Pod: "ns/dns-" + fmt.Sprint(i),
		})
		d.HairpinSources = append(d.HairpinSources, pod)
	}
	return d
}

func assertNoDrift(t *testing.T, ipt *datapath.IPTables, d datapath.Desired) {
	t.Helper()
	drift, err := ipt.Check(context.Background(), d)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if drift {
		t.Fatal("Check found drift right after Sync")
	}
}

func TestNewIPTables_rejectsUnknownFamilyAndMode(t *testing.T) {
	if _, err := datapath.NewIPTables("IPv5", datapath.Options{}); err == nil || !strings.Contains(err.Error(), "IPv5") {
		t.Errorf("NewIPTables(IPv5) = %v, want an error naming the family", err)
	}
	if _, err := datapath.NewIPTables(v4, datapath.Options{Mode: "bpf"}); err == nil || !strings.Contains(err.Error(), `"bpf"`) {
		t.Errorf("NewIPTables(mode bpf) = %v, want an error naming the mode", err)
	}
}

func TestNewIPTables_detectsTheModeOfIptables(t *testing.T) {
	requirePrivateNetNS(t)
	out := run(t, "iptables", "--version")
	want := datapath.ModeLegacy
	if strings.Contains(out, "nf_tables") {
		want = datapath.ModeNFT
	}
	ipt, err := datapath.NewIPTables(v4, datapath.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ipt.Mode() != want {
		t.Errorf("Mode() = %q, want %q (iptables --version says %q)", ipt.Mode(), want, strings.TrimSpace(out))
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(ipt.Version()) || !strings.Contains(out, "v"+ipt.Version()) {
		t.Errorf("Version() = %q, want the version in %q", ipt.Version(), strings.TrimSpace(out))
	}
}

func TestIPTables_syncWritesChainsAndJumps(t *testing.T) {
	for _, family := range []contract.Family{v4, v6} {
		for _, mode := range modes {
			t.Run(string(family)+"/"+mode, func(t *testing.T) {
				ipt := newIPTables(t, family, mode)
				d := desiredFor(family, 3)
				before := ipt.Stats()
				for range 2 { // the second Sync must not add jumps again
					if err := ipt.Sync(context.Background(), d); err != nil {
						t.Fatalf("Sync: %v", err)
					}
				}
				want := append(slices.Clone(jumpLines), renderedRules(family, d)...)
				if diff := cmp.Diff(want, nplLines(t, family, mode)); diff != "" {
					t.Errorf("iptables-save (-want +got):\n%s", diff)
				}
				if got := ipt.Stats().Writes - before.Writes; got != 2 {
					t.Errorf("restores for 2 Syncs = %d, want 2", got)
				}
				assertNoDrift(t, ipt, d)
			})
		}
	}
}

// TestIPTables_syncReadsTheJumpsUntilSeenAndAfterDrift: the first Sync
// reads the nat table once and writes the chains and the missing jumps in
// one restore (no per-jump check); later Syncs only write; the Sync after a
// Check that found drift reads again and reinserts the missing jump.
func TestIPTables_syncReadsTheJumpsUntilSeenAndAfterDrift(t *testing.T) {
	ipt := newIPTables(t, v4, "")
	ctx := context.Background()
	d := desired(2)
	execs := func(f func()) int {
		before := ipt.Stats().Execs
		f()
		return ipt.Stats().Execs - before
	}
	sync := func() {
		if err := ipt.Sync(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	got := []int{execs(sync), execs(sync)}
	run(t, "iptables", append([]string{"-w", "5", "-t", "nat", "-D", "PREROUTING"}, jumpArgs["PREROUTING"]...)...)
	got = append(got, execs(func() {
		if drift, err := ipt.Check(ctx, d); err != nil || !drift {
			t.Fatalf("Check = %v, %v; want drift", drift, err)
		}
	}), execs(sync), execs(sync))
	// First Sync: save, then one restore with the chains and the 3 jumps.
	// Then the restore alone. After the Check that finds drift (one save),
	// the next Sync reads again and reinserts the missing jump in its restore.
	if diff := cmp.Diff([]int{2, 1, 1, 2, 1}, got); diff != "" {
		t.Errorf("execs of Sync, Sync, Check, Sync, Sync (-want +got):\n%s", diff)
	}
	assertNoDrift(t, ipt, d)
	want := append(slices.Clone(jumpLines), renderedRules(v4, d)...)
	if diff := cmp.Diff(want, nplLines(t, v4, ipt.Mode())); diff != "" {
		t.Errorf("iptables-save (-want +got):\n%s", diff)
	}
}

// TestIPTables_syncOfARestartedAgentWritesNothingWhenTheRulesAreKept: a new
// datapath (an agent restarted) whose first Sync finds the chains and jumps
// as d wants them reads once and writes nothing; with a chain flushed
// meanwhile, it reads once and writes once.
func TestIPTables_syncOfARestartedAgentWritesNothingWhenTheRulesAreKept(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			d := desired(5)
			if err := newIPTables(t, v4, mode).Sync(ctx, d); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name              string
				breakArgs         []string
				wantExecs, writes int
			}{
				{"rules kept", nil, 1, 0},
				{"chain flushed", []string{"-F", "NPL-NODE-PORT-LOCAL"}, 2, 1},
			} {
				if tc.breakArgs != nil {
					run(t, command(v4, mode, ""), append([]string{"-w", "5", "-t", "nat"}, tc.breakArgs...)...)
				}
				restarted, err := datapath.NewIPTables(v4, datapath.Options{Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				if err := restarted.Sync(ctx, d); err != nil {
					t.Fatal(err)
				}
				if got := restarted.Stats(); got.Execs != tc.wantExecs || got.Writes != tc.writes {
					t.Errorf("%s: first Sync of a restarted agent ran %d commands and %d writes, want %d and %d",
						tc.name, got.Execs, got.Writes, tc.wantExecs, tc.writes)
				}
				assertNoDrift(t, restarted, d)
				want := append(slices.Clone(jumpLines), renderedRules(v4, d)...)
				if diff := cmp.Diff(want, nplLines(t, v4, mode)); diff != "" {
					t.Errorf("%s: iptables-save (-want +got):\n%s", tc.name, diff)
				}
			}
		})
	}
}

// TestNewIPTables_probesTheVersionOncePerProcess: the mode of an iptables
// that links to xtables' multi-call binary is read from the link, and
// `iptables --version` runs at most once whatever the datapaths asking.
func TestNewIPTables_probesTheVersionOncePerProcess(t *testing.T) {
	requirePrivateNetNS(t)
	var versions []string
	execs := 0
	for range 3 {
		ipt, err := datapath.NewIPTables(v4, datapath.Options{})
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, ipt.Version())
		execs += ipt.Stats().Execs
	}
	if got := execs; got > 1 {
		t.Errorf("3 datapaths and their versions ran %d commands, want at most 1", got)
	}
	if versions[0] == "" || versions[1] != versions[0] || versions[2] != versions[0] {
		t.Errorf("versions = %q, want one version thrice", versions)
	}
}

func TestIPTables_syncRemovesStaleRules(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ipt := newIPTables(t, v4, mode)
			ctx := context.Background()
			if err := ipt.Sync(ctx, desired(5)); err != nil {
				t.Fatal(err)
			}
			fewer := desired(5)
			fewer.Mappings = fewer.Mappings[3:]
			fewer.HairpinSources = fewer.HairpinSources[4:]
			if err := ipt.Sync(ctx, fewer); err != nil {
				t.Fatal(err)
			}
			want := append(slices.Clone(jumpLines), renderedRules(v4, fewer)...)
			if diff := cmp.Diff(want, nplLines(t, v4, mode)); diff != "" {
				t.Errorf("iptables-save after a Sync with fewer mappings (-want +got):\n%s", diff)
			}
			if len(want) != len(jumpLines)+3 {
				t.Fatalf("test setup: want %d rules, got %d", len(jumpLines)+3, len(want))
			}
		})
	}
}

// breakages change the node behind the agent's back, as an operator or
// another component might.
var breakages = []struct {
	name string
	args []string
}{
	{"a mapping rule deleted", []string{"-D", "NPL-NODE-PORT-LOCAL",
		"-p", "tcp", "-m", "tcp", "--dport", "61001", "-m", "comment", "--comment", "ns/pod-198.19.0.3:8080",
		"-j", "DNAT", "--to-destination", "198.19.0.3:8080"}},
	{"the PREROUTING jump deleted", append([]string{"-D", "PREROUTING"}, jumpArgs["PREROUTING"]...)},
	{"the OUTPUT jump deleted", append([]string{"-D", "OUTPUT"}, jumpArgs["OUTPUT"]...)},
	{"the POSTROUTING jump deleted", append([]string{"-D", "POSTROUTING"}, jumpArgs["POSTROUTING"]...)},
	{"the mapping chain flushed", []string{"-F", "NPL-NODE-PORT-LOCAL"}},
	{"the masquerade chain flushed", []string{"-F", "NPL-POSTROUTING"}},
	{"a foreign rule inserted", []string{"-I", "NPL-NODE-PORT-LOCAL", "-j", "RETURN"}},
	{"the whole nat table flushed", []string{"-F"}},
}

func TestIPTables_checkFindsDriftAndSyncRepairsIt(t *testing.T) {
	for _, mode := range modes {
		for _, b := range breakages {
			t.Run(mode+"/"+b.name, func(t *testing.T) {
				ipt := newIPTables(t, v4, mode)
				ctx := context.Background()
				d := desired(3)
				if err := ipt.Sync(ctx, d); err != nil {
					t.Fatal(err)
				}
				assertNoDrift(t, ipt, d)
				run(t, command(v4, mode, ""), append([]string{"-w", "5", "-t", "nat"}, b.args...)...)
				drift, err := ipt.Check(ctx, d)
				if err != nil {
					t.Fatal(err)
				}
				if !drift {
					t.Fatalf("Check found no drift after %s", b.name)
				}
				if err := ipt.Sync(ctx, d); err != nil {
					t.Fatal(err)
				}
				assertNoDrift(t, ipt, d)
				want := append(slices.Clone(jumpLines), renderedRules(v4, d)...)
				if diff := cmp.Diff(want, nplLines(t, v4, mode)); diff != "" {
					t.Errorf("iptables-save after the repair (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestIPTables_cleanupRemovesChainsAndJumps(t *testing.T) {
	for _, family := range []contract.Family{v4, v6} {
		for _, mode := range modes {
			t.Run(string(family)+"/"+mode, func(t *testing.T) {
				ipt := newIPTables(t, family, mode)
				ctx := context.Background()
				if err := ipt.Sync(ctx, desiredFor(family, 3)); err != nil {
					t.Fatal(err)
				}
				// A second jump of another shape, as an older version might leave.
				run(t, command(family, mode, ""), "-w", "5", "-t", "nat", "-A", "OUTPUT", "-j", "NPL-NODE-PORT-LOCAL")
				if err := ipt.Cleanup(ctx); err != nil {
					t.Fatalf("Cleanup: %v", err)
				}
				if save := run(t, command(family, mode, "-save"), "-t", "nat"); strings.Contains(save, "NPL-") {
					t.Errorf("iptables-save after Cleanup still mentions NPL:\n%s", save)
				}
				restores := ipt.Stats().Writes
				if err := ipt.Cleanup(ctx); err != nil {
					t.Fatalf("second Cleanup: %v", err)
				}
				if got := ipt.Stats().Writes; got != restores {
					t.Errorf("a Cleanup with nothing to remove wrote %d times", got-restores)
				}
			})
		}
	}
}

func TestDatapath_flushUDPDeletesConntrackEntriesOfThePort(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { flushUDPDeletesConntrackEntriesOfThePort(t, b.new) })
	}
}

func flushUDPDeletesConntrackEntriesOfThePort(t *testing.T, newDatapath func(testing.TB, contract.Family) counted) {
	for _, tc := range []struct {
		family                             contract.Family
		conntrackFamily, network, loopback string
	}{
		{v4, "ipv4", "udp4", "127.0.0.1"},
		{v6, "ipv6", "udp6", "::1"},
	} {
		t.Run(string(tc.family), func(t *testing.T) {
			ipt := newDatapath(t, tc.family)
			ctx := context.Background()
			// The nat chains make the kernel track connections in this namespace.
			if err := ipt.Sync(ctx, desiredFor(tc.family, 1)); err != nil {
				t.Fatal(err)
			}
			flows := func(port int) int {
				out := run(t, "conntrack", "-L", "-f", tc.conntrackFamily, "-p", "udp", "--orig-port-dst", fmt.Sprint(port))
				n := 0
				for l := range strings.Lines(out) {
					if strings.HasPrefix(l, tc.conntrackFamily) || strings.HasPrefix(l, "udp") {
						n++
					}
				}
				return n
			}
			// Flows of an earlier test in this namespace would count too.
			for _, port := range []int{61500, 61501} {
				_ = exec.Command("conntrack", "-D", "-f", tc.conntrackFamily, "-p", "udp", "--orig-port-dst", fmt.Sprint(port)).Run()
			}
			for _, port := range []int{61500, 61501} {
				c, err := net.Dial(tc.network, net.JoinHostPort(tc.loopback, fmt.Sprint(port)))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Write([]byte("ping")); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			if got := []int{flows(61500), flows(61501)}; !slices.Equal(got, []int{1, 1}) {
				t.Fatalf("UDP flows to 61500 and 61501 before the flush = %v, want [1 1]", got)
			}
			if err := ipt.FlushUDP(ctx, 61500); err != nil {
				t.Fatalf("FlushUDP: %v", err)
			}
			if got := []int{flows(61500), flows(61501)}; !slices.Equal(got, []int{0, 1}) {
				t.Errorf("UDP flows to 61500 and 61501 after flushing 61500 = %v, want [0 1]", got)
			}
			if err := ipt.FlushUDP(ctx, 61500); err != nil {
				t.Errorf("FlushUDP with nothing to delete: %v", err)
			}
		})
	}
}

func TestSyncer_repairsDriftWithoutANewUpdate(t *testing.T) {
	for _, periodic := range []bool{false, true} {
		name := "on Trigger"
		opts := datapath.SyncerOptions{CheckInterval: time.Hour}
		if periodic {
			name, opts.CheckInterval = "on the periodic check", 20*time.Millisecond
		}
		t.Run(name, func(t *testing.T) {
			ipt := newIPTables(t, v4, "")
			s := startSyncer(t, ipt, opts)
			d := desired(3)
			wait(t, s, s.Update(d))
			// Both in one transaction: a periodic check between two
			// commands would repair the first alone.
			restore := exec.Command("iptables-restore", "--noflush", "-w", "5")
			restore.Stdin = strings.NewReader("*nat\n-F NPL-NODE-PORT-LOCAL\n" + strings.Replace(jumpLines[1], "-A ", "-D ", 1) + "\nCOMMIT\n")
			if out, err := restore.CombinedOutput(); err != nil {
				t.Fatalf("iptables-restore: %v: %s", err, out)
			}
			if !periodic {
				s.Trigger()
			}
			eventually(t, "a drift repair", func() bool { return s.Stats().DriftRepairs >= 1 })
			assertNoDrift(t, ipt, d)
		})
	}
}

func TestSyncer_burstOf100UpdatesInOneWindowGivesOneRestore(t *testing.T) {
	ipt := newIPTables(t, v4, "")
	clk := fakeClock()
	opts := datapath.SyncerOptions{Window: 20 * time.Millisecond, Clock: clk}
	s := startSyncer(t, ipt, opts)
	states := make([]datapath.Desired, 100)
	for i := range states {
		states[i] = desired(i + 1)
	}
	before := ipt.Stats().Writes
	var gen uint64
	for _, d := range states {
		gen = s.Update(d)
	}
	armed(t, clk, 2) // the ticker and the window the first update opened
	clk.Step(20 * time.Millisecond)
	wait(t, s, gen)
	if got := ipt.Stats().Writes - before; got != 1 {
		t.Errorf("100 updates in one window gave %d restores, want 1", got)
	}
	assertNoDrift(t, ipt, states[99])
}
