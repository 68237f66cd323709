package datapath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/contract"
)

// Backend modes of iptables.
const (
	ModeNFT    = "nft"
	ModeLegacy = "legacy"
)

// Options tune NewIPTables.
type Options struct {
	// Mode is ModeNFT or ModeLegacy; empty means the mode of the iptables
	// (or ip6tables) command on PATH. It must match what kube-proxy and the
	// CNI use, or the rules land in tables nobody evaluates first.
	Mode string
	// WaitSeconds bounds the wait for the xtables lock (iptables -w,
	// iptables-restore -w). Zero means 5.
	WaitSeconds int
}

// IPTables programs the chains of one IP family with iptables. It is safe for
// concurrent use; its writes are serialised.
type IPTables struct {
	family  contract.Family
	mode    string
	wait    int
	cmd     string // path of iptables (or ip6tables) for the mode
	restore string // path of iptables-restore for the mode and family
	save    string // path of iptables-save for the mode and family

	// written holds the rule lines ("-A chain ...") last written; partialOK
	// says they are known to be in place, so the next Sync may write only
	// the difference.
	written   map[string]bool
	partialOK bool

	mu sync.Mutex
	// jumpsOK is set once Sync has seen or inserted every jump, and cleared
	// when a Check finds drift, a Sync fails or Cleanup runs: a jump deleted
	// meanwhile is found by the periodic Check. Until it is set, Sync reads
	// the nat table first (one iptables-save), and writes the missing jumps
	// in the same iptables-restore as the chains.
	jumpsOK bool
	// primed is a read of the nat table that the next Sync uses instead of
	// reading it again (readForSync, at the start).
	primed   *natState
	restores atomic.Int64
	bytes    atomic.Int64
	execs    execCount
}

var _ Datapath = (*IPTables)(nil)

// NewIPTables detects the iptables backend of family (contract.FamilyIPv4
// or contract.FamilyIPv6) and returns a datapath that uses the matching
// iptables, iptables-restore and iptables-save binaries. It runs no command
// when the mode is given or the iptables command is a link to xtables'
// multi-call binary (its name tells the mode); otherwise it runs
// `iptables --version` once for the life of the process.
func NewIPTables(family contract.Family, opts Options) (*IPTables, error) {
	base := "iptables"
	switch family {
	case contract.FamilyIPv4:
	case contract.FamilyIPv6:
		base = "ip6tables"
	default:
		return nil, fmt.Errorf("new iptables datapath: unknown IP family %q", family)
	}
	t := &IPTables{family: family, wait: opts.WaitSeconds}
	if t.wait <= 0 {
		t.wait = 5
	}
	cmd, err := t.binaries(base, opts.Mode)
	if err != nil {
		return nil, fmt.Errorf("new %s datapath: %w", family, err)
	}
	t.cmd = cmd
	return t, nil
}

var modePattern = regexp.MustCompile(`v(\d+\.\d+(?:\.\d+)?)(?:\s+\((\w+)\))?`)

// versionProbe is what `iptables --version` said of one command.
type versionProbe struct {
	once          sync.Once
	mode, version string
	err           error
}

// versionProbes caches the probe of each iptables command (by path) for the
// life of the process: the binary does not change under a running agent,
// and every family, backend choice and cleanup asks it again.
var versionProbes sync.Map

// probe returns the mode and version of cmd from `cmd --version`, running
// it only the first time the process asks; that exec is counted in execs.
func probe(cmd string, execs *execCount) (mode, version string, err error) {
	v, _ := versionProbes.LoadOrStore(cmd, &versionProbe{})
	p := v.(*versionProbe)
	p.once.Do(func() {
		execs.add(1)
		p.mode, p.version, p.err = parseVersion(cmd)
	})
	return p.mode, p.version, p.err
}

func parseVersion(cmd string) (mode, version string, err error) {
	out, err := exec.Command(cmd, "--version").Output()
	if err != nil {
		return "", "", fmt.Errorf("%s --version: %w", cmd, err)
	}
	m := modePattern.FindStringSubmatch(string(out))
	switch {
	case m == nil:
		return "", "", fmt.Errorf("%s --version: no version in %q", cmd, strings.TrimSpace(string(out)))
	case m[2] == "nf_tables":
		return ModeNFT, m[1], nil
	case m[2] == "" || m[2] == "legacy":
		return ModeLegacy, m[1], nil
	}
	return "", "", fmt.Errorf("%s --version: unknown mode %q", cmd, m[2])
}

// linkedMode returns the mode of an iptables command that links to xtables'
// multi-call binary, whose name tells it, or "" for any other file.
func linkedMode(cmd string) string {
	target, err := filepath.EvalSymlinks(cmd)
	if err != nil {
		return ""
	}
	switch filepath.Base(target) {
	case "xtables-nft-multi":
		return ModeNFT
	case "xtables-legacy-multi":
		return ModeLegacy
	}
	return ""
}

// modeOf returns the backend mode of cmd: from its link when it has one,
// else from its --version.
func (t *IPTables) modeOf(cmd string) (string, error) {
	if mode := linkedMode(cmd); mode != "" {
		return mode, nil
	}
	mode, _, err := probe(cmd, &t.execs)
	return mode, err
}

// binaries picks the iptables command of base for mode and sets the
// restore and save binaries that go with it: base-nft or base-legacy when
// installed, otherwise base itself if it runs in that mode.
func (t *IPTables) binaries(base, mode string) (string, error) {
	if mode == "" {
		path, err := exec.LookPath(base)
		if err != nil {
			return "", fmt.Errorf("%s not found (apt-get install iptables): %w", base, err)
		}
		if mode, err = t.modeOf(path); err != nil {
			return "", err
		}
	}
	if mode != ModeNFT && mode != ModeLegacy {
		return "", fmt.Errorf("iptables mode %q is not %s or %s", mode, ModeNFT, ModeLegacy)
	}
	t.mode = mode
	if cmd, err := exec.LookPath(base + "-" + mode); err == nil {
		restore, err1 := exec.LookPath(base + "-" + mode + "-restore")
		save, err2 := exec.LookPath(base + "-" + mode + "-save")
		if err := errors.Join(err1, err2); err != nil {
			return "", fmt.Errorf("%s is installed without its restore and save commands: %w", cmd, err)
		}
		t.restore, t.save = restore, save
		return cmd, nil
	}
	cmd, err := exec.LookPath(base)
	if err != nil {
		return "", fmt.Errorf("%s not found (apt-get install iptables): %w", base, err)
	}
	if got, err := t.modeOf(cmd); err != nil {
		return "", err
	} else if got != mode {
		return "", fmt.Errorf("%s runs in %s mode and %s-%s is not installed", cmd, got, base, mode)
	}
	restore, err1 := exec.LookPath(base + "-restore")
	save, err2 := exec.LookPath(base + "-save")
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("%s is installed without its restore and save commands: %w", cmd, err)
	}
	t.restore, t.save = restore, save
	return cmd, nil
}

// Family returns the IP family this datapath programs.
func (t *IPTables) Family() contract.Family { return t.family }

// Mode returns the iptables backend in use: ModeNFT or ModeLegacy.
func (t *IPTables) Mode() string { return t.mode }

// Version returns the iptables version, e.g. "1.8.9", or "" when the
// iptables command does not run.
func (t *IPTables) Version() string {
	_, v, _ := probe(t.cmd, &t.execs)
	return v
}

// Probe reports whether the iptables command runs here (its --version,
// asked once in the life of the process).
func (t *IPTables) Probe() error {
	_, _, err := probe(t.cmd, &t.execs)
	return err
}

// Stats returns the commands run so far.
func (t *IPTables) Stats() Stats {
	return Stats{Writes: int(t.restores.Load()), Bytes: int(t.bytes.Load()), Execs: int(t.execs.Load())}
}

// Sync programs d with one iptables-restore. When it wrote the chains itself
// last and no drift was seen since, it writes only the difference (deleted
// rules, then appended ones), which costs far less than the whole chains on a
// busy node; otherwise, and when the difference fails to apply or is empty,
// it writes both chains whole, in Render's order. Unless it has seen the
// jumps to the chains since the last drift, it first reads the nat table
// (one iptables-save): a table that already holds d and the jumps (an agent restarted with its
// rules in place) is not written at all, and a missing jump is inserted,
// at the top of its built-in chain so that no rule of another component
// shadows it, by the same iptables-restore that writes the chains.
func (t *IPTables) Sync(ctx context.Context, d Desired) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("sync %s datapath: %w", t.family, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	want := desiredRules(t.family, d)
	lines := make(map[string]bool, len(want))
	for _, r := range want {
		lines[formatRule("-A", r.chain, r.args)] = true
	}
	if t.partialOK && t.jumpsOK {
		if input := renderDiff(t.written, lines); input != nil {
			if err := t.runRestore(ctx, input); err == nil {
				t.written = lines
				return nil
			}
			// A rule to delete was not there (drift): write whole.
		}
	}
	var missing []jump
	if !t.jumpsOK {
		got, err := t.natForSync(ctx)
		if err != nil {
			return fmt.Errorf("sync %s datapath: %w", t.family, err)
		}
		if drift(got, want) == "" {
			t.written, t.partialOK, t.jumpsOK = lines, true, true
			return nil
		}
		missing = missingJumps(got)
	}
	if err := t.runRestore(ctx, render(want, missing)); err != nil {
		t.jumpsOK, t.partialOK = false, false
		return fmt.Errorf("sync %s datapath: %w", t.family, err)
	}
	for _, j := range missing {
		klog.FromContext(ctx).V(2).Info("Inserted jump", "family", t.family, "chain", j.chain)
	}
	t.written, t.partialOK, t.jumpsOK = lines, true, true
	return nil
}

// missingJumps returns the jumps the nat table lacks.
func missingJumps(got natState) []jump {
	var out []jump
	for _, j := range jumps {
		if !slices.Contains(got.rules[j.chain], joinArgs(j.spec)) {
			out = append(out, j)
		}
	}
	return out
}

func (t *IPTables) runRestore(ctx context.Context, input []byte) error {
	t.execs.add(1)
	t.restores.Add(1)
	t.bytes.Add(int64(len(input)))
	cmd := exec.CommandContext(ctx, t.restore, "--noflush", "-w", strconv.Itoa(t.wait))
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s --noflush: %w: %s", t.restore, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// readForSync reads the nat table for the next Sync, which uses it rather
// than reading it again, and reports whether our chains are there: the
// start's one read, which also tells whether this backend ran last.
func (t *IPTables) readForSync(ctx context.Context) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	got, err := t.readNAT(ctx)
	if err != nil {
		return false, err
	}
	t.primed = &got
	return got.chains[ChainNodePortLocal] || got.chains[ChainPostrouting], nil
}

// natForSync returns the read readForSync made, once, or reads the nat
// table. Called with t.mu held.
func (t *IPTables) natForSync(ctx context.Context) (natState, error) {
	if got := t.primed; got != nil {
		t.primed = nil
		return *got, nil
	}
	return t.readNAT(ctx)
}

// natState is what iptables-save shows of the nat table.
type natState struct {
	chains map[string]bool     // declared chains
	rules  map[string][]string // per chain, each rule's arguments in canonical form
}

func (t *IPTables) readNAT(ctx context.Context) (natState, error) {
	t.execs.add(1)
	cmd := exec.CommandContext(ctx, t.save, "-t", "nat")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return natState{}, fmt.Errorf("%s -t nat: %w: %s", t.save, err, strings.TrimSpace(stderr.String()))
	}
	return parseSave(stdout.String()), nil
}

// parseSave reads iptables-save output of one table.
func parseSave(out string) natState {
	s := natState{chains: make(map[string]bool), rules: make(map[string][]string)}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			s.chains[name] = true
		case strings.HasPrefix(line, "-A "):
			args := splitRule(line)
			if len(args) < 2 {
				continue
			}
			s.rules[args[1]] = append(s.rules[args[1]], joinArgs(args[2:]))
		}
	}
	return s
}

// Check compares the nat table with d: our two chains must hold exactly the
// rules Render writes, in any order (a difference write appends, so the order
// in the table need not be Render's), and the three jumps must exist.
func (t *IPTables) Check(ctx context.Context, d Desired) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.primed = nil
	got, err := t.readNAT(ctx)
	if err != nil {
		return false, fmt.Errorf("check %s datapath: %w", t.family, err)
	}
	if reason := drift(got, desiredRules(t.family, d)); reason != "" {
		t.jumpsOK, t.partialOK = false, false
		klog.FromContext(ctx).V(2).Info("Datapath drift", "family", t.family, "reason", reason)
		return true, nil
	}
	return false, nil
}

// drift describes the first difference between the nat table and the rules we
// want, or returns "" when there is none.
func drift(got natState, want []rule) string {
	for _, chain := range []string{ChainNodePortLocal, ChainPostrouting} {
		if !got.chains[chain] {
			return "chain " + chain + " is missing"
		}
		var rules []string
		for _, r := range want {
			if r.chain == chain {
				rules = append(rules, joinArgs(r.args))
			}
		}
		// Order does not matter: the rules of a chain never overlap (one
		// node port, one source each), and a difference write appends.
		have := slices.Sorted(slices.Values(got.rules[chain]))
		slices.Sort(rules)
		if !slices.Equal(have, rules) {
			return fmt.Sprintf("chain %s has %d rules, want %d%s", chain, len(have), len(rules), firstDiff(have, rules))
		}
	}
	if missing := missingJumps(got); len(missing) > 0 {
		return "jump from " + missing[0].chain + " is missing"
	}
	return ""
}

// firstDiff names a rule that one sorted list has and the other lacks.
func firstDiff(have, want []string) string {
	for _, w := range want {
		if _, found := slices.BinarySearch(have, w); !found {
			return fmt.Sprintf("; missing %q", w)
		}
	}
	for _, h := range have {
		if _, found := slices.BinarySearch(want, h); !found {
			return fmt.Sprintf("; unexpected %q", h)
		}
	}
	return "; a rule is duplicated"
}

// FlushUDP deletes the conntrack entries of UDP flows whose original
// destination port is nodePort.
func (t *IPTables) FlushUDP(ctx context.Context, nodePort int) error {
	return flushUDPConntrack(ctx, t.family, nodePort, &t.execs)
}

// Cleanup deletes every rule that jumps to our chains and both chains, in one
// iptables-restore; with nothing to delete it only reads the table.
func (t *IPTables) Cleanup(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.jumpsOK, t.partialOK, t.primed = false, false, nil
	got, err := t.readNAT(ctx)
	if err != nil {
		return fmt.Errorf("clean up %s datapath: %w", t.family, err)
	}
	var b strings.Builder
	for _, chain := range slices.Sorted(maps.Keys(got.rules)) {
		if isOurs(chain) {
			continue
		}
		for _, r := range got.rules[chain] {
			args := splitRule(r)
			if i := slices.Index(args, "-j"); i >= 0 && i+1 < len(args) && isOurs(args[i+1]) {
				b.WriteString(formatRule("-D", chain, args) + "\n")
			}
		}
	}
	for _, chain := range []string{ChainNodePortLocal, ChainPostrouting} {
		if got.chains[chain] {
			// Declaring the chain flushes it, so -X finds it empty.
			b.WriteString(":" + chain + " - [0:0]\n-X " + chain + "\n")
		}
	}
	if b.Len() == 0 {
		return nil
	}
	if err := t.runRestore(ctx, []byte("*nat\n"+b.String()+"COMMIT\n")); err != nil {
		return fmt.Errorf("clean up %s datapath: %w", t.family, err)
	}
	klog.FromContext(ctx).Info("Removed NodePortLocal chains and jumps", "family", t.family)
	return nil
}

func isOurs(chain string) bool {
	return chain == ChainNodePortLocal || chain == ChainPostrouting
}

// renderDiff returns the iptables-restore input that turns the rules of
// before into those of after (no chain declaration, so nothing else is
// flushed), or nil when they are equal.
func renderDiff(before, after map[string]bool) []byte {
	var del, add []string
	for line := range before {
		if !after[line] {
			del = append(del, "-D"+strings.TrimPrefix(line, "-A"))
		}
	}
	for line := range after {
		if !before[line] {
			add = append(add, line)
		}
	}
	if len(del) == 0 && len(add) == 0 {
		return nil
	}
	slices.Sort(del)
	slices.Sort(add)
	var b bytes.Buffer
	b.WriteString("*nat\n")
	for _, l := range slices.Concat(del, add) {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}
