package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// Backends of npl-agent's --datapath that every agent test runs against.
const (
	backendIPTables = "iptables"
	backendNFTables = "nftables"
)

// datapaths are the backends in the order the agent tests visit them, and
// what a test reads and breaks of each on a node, by hand, as an operator
// would: with iptables and nft, not through the agent's code.
var datapaths = []nodeDatapath{iptablesView{}, nftablesView{}}

// nodeDatapath is one backend's view of a node.
type nodeDatapath interface {
	backend() string
	// dump returns npl's part of the node's rules of family (with the
	// comments that name Pods), empty when there is none.
	dump(t *testing.T, n *cluster.Node, family contract.Family) string
	// targets returns where the node's mappings of family lead, by
	// "proto/nodePort": the Pod's ip:port ([ip]:port for IPv6).
	targets(t *testing.T, n *cluster.Node, family contract.Family) map[string]string
	// deleteMapping removes the mapping of tcp/nodePort.
	deleteMapping(t *testing.T, n *cluster.Node, nodePort int)
	// deleteHook removes what sends incoming traffic to npl's rules, and
	// returns a check that it is back.
	deleteHook(t *testing.T, n *cluster.Node) (restored func() bool)
	// deleteAll removes every mapping at once.
	deleteAll(t *testing.T, n *cluster.Node)
}

// forEachDatapath runs body once per backend, as subtests named after it,
// with every shared agent running that backend.
func forEachDatapath(t *testing.T, body func(t *testing.T, e *env)) {
	for _, dp := range datapaths {
		t.Run(dp.backend(), func(t *testing.T) { body(t, setupDatapath(t, dp)) })
	}
}

// setupDatapath returns the shared env with its agents on dp's backend,
// restarting them when they run another one; the agent removes the other
// backend's rules as it starts.
func setupDatapath(t *testing.T, dp nodeDatapath) *env {
	t.Helper()
	e := setup(t)
	e.dp = dp
	var switching []*stack.Agent
	for _, a := range e.agents {
		if a.Datapath() != dp.backend() {
			switching = append(switching, a)
		}
	}
	if len(switching) == 0 {
		return e
	}
	ctx := ctxFor(t, 2*time.Minute)
	for _, a := range switching {
		if err := a.Stop(); err != nil {
			t.Fatalf("stop %s: %v", a.Name, err)
		}
		a.SetDatapath(dp.backend())
		if err := a.Start(ctx); err != nil {
			t.Fatalf("start %s with --datapath %s: %v", a.Name, dp.backend(), err)
		}
	}
	for _, a := range switching {
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		// The switch leaves one backend's rules: the agent removed the others.
		for _, other := range datapaths {
			if other.backend() == dp.backend() {
				continue
			}
			if left := other.dump(t, a.Node, contract.FamilyIPv4); left != "" {
				t.Fatalf("%s switched to %s and left its %s rules:\n%s", a.Name, dp.backend(), other.backend(), left)
			}
		}
	}
	return e
}

// target returns the Pod address ("ip:port") that the node DNATs IPv4
// proto/nodePort to, or "" when the node port is not mapped.
func (e *env) target(t *testing.T, n *cluster.Node, proto string, nodePort int) string {
	return e.dp.targets(t, n, contract.FamilyIPv4)[proto+"/"+strconv.Itoa(nodePort)]
}

// hasMapping reports whether the node DNATs IPv4 proto/nodePort somewhere.
func (e *env) hasMapping(t *testing.T, n *cluster.Node, proto string, nodePort int) bool {
	return e.target(t, n, proto, nodePort) != ""
}

type iptablesView struct{}

func (iptablesView) backend() string { return backendIPTables }

func (iptablesView) dump(t *testing.T, n *cluster.Node, family contract.Family) string {
	t.Helper()
	save := "iptables-save"
	if family == contract.FamilyIPv6 {
		save = "ip6tables-save"
	}
	out, err := n.Command(context.Background(), save, "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("%s on %s: %v: %s", save, n.Name, err, out)
	}
	var lines []string
	for l := range strings.Lines(string(out)) {
		if strings.Contains(l, "NPL-") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "")
}

var dnatRule = regexp.MustCompile(`-p (\w+) -m \w+ --dport (\d+) .*--to-destination (\S+)`)

func (v iptablesView) targets(t *testing.T, n *cluster.Node, family contract.Family) map[string]string {
	out := map[string]string{}
	for l := range strings.Lines(v.dump(t, n, family)) {
		if m := dnatRule.FindStringSubmatch(l); m != nil {
			out[m[1]+"/"+m[2]] = m[3]
		}
	}
	return out
}

func (iptablesView) deleteMapping(t *testing.T, n *cluster.Node, nodePort int) {
	deleteRule(t, n, "NPL-NODE-PORT-LOCAL", fmt.Sprintf("--dport %d ", nodePort))
}

func (v iptablesView) deleteHook(t *testing.T, n *cluster.Node) func() bool {
	jump := deleteRule(t, n, "PREROUTING", "-j NPL-NODE-PORT-LOCAL")
	return func() bool { return strings.Contains(natRules(t, n), jump) }
}

func (iptablesView) deleteAll(t *testing.T, n *cluster.Node) {
	runIn(t, n, "iptables", "-t", "nat", "-F", "NPL-NODE-PORT-LOCAL")
}

// deleteRule deletes, by its number, the first rule of a nat chain whose
// iptables -S line contains match, and returns that line.
func deleteRule(t *testing.T, n *cluster.Node, chain, match string) string {
	t.Helper()
	num := 0
	for _, line := range strings.Split(runIn(t, n, "iptables", "-t", "nat", "-S", chain), "\n") {
		if !strings.HasPrefix(line, "-A ") {
			continue
		}
		num++
		if strings.Contains(line, match) {
			runIn(t, n, "iptables", "-t", "nat", "-D", chain, fmt.Sprint(num))
			return line
		}
	}
	t.Fatalf("no rule matching %q in %s", match, chain)
	return ""
}

type nftablesView struct{}

func (nftablesView) backend() string { return backendNFTables }

// dump is the family's npl table as nft lists it, empty when there is none.
func (nftablesView) dump(t *testing.T, n *cluster.Node, family contract.Family) string {
	t.Helper()
	table := "ip"
	if family == contract.FamilyIPv6 {
		table = "ip6"
	}
	out, err := n.Command(context.Background(), "nft", "list", "table", table, "npl").CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file or directory") {
			return ""
		}
		t.Fatalf("nft list table %s npl on %s: %v: %s", table, n.Name, err, out)
	}
	return string(out)
}

// nftElement matches a map element as nft lists it:
// tcp . 61000 comment "ns/pod:8080" : 198.19.0.5 . 8080
var nftElement = regexp.MustCompile(`(tcp|udp) \. (\d+)(?: comment "[^"]*")? : ([0-9a-f.:]+) \. (\d+)`)

func (v nftablesView) targets(t *testing.T, n *cluster.Node, family contract.Family) map[string]string {
	out := map[string]string{}
	for _, m := range nftElement.FindAllStringSubmatch(v.dump(t, n, family), -1) {
		out[m[1]+"/"+m[2]] = net.JoinHostPort(m[3], m[4])
	}
	return out
}

func (nftablesView) deleteMapping(t *testing.T, n *cluster.Node, nodePort int) {
	runIn(t, n, "nft", "delete", "element", "ip", "npl", "node-ports", fmt.Sprintf("{ tcp . %d }", nodePort))
}

func (v nftablesView) deleteHook(t *testing.T, n *cluster.Node) func() bool {
	runIn(t, n, "nft", "flush", "chain", "ip", "npl", "prerouting")
	return func() bool { return v.hooked(t, n) }
}

// hooked reports whether the prerouting chain jumps to the mappings.
func (v nftablesView) hooked(t *testing.T, n *cluster.Node) bool {
	out := runIn(t, n, "nft", "list", "chain", "ip", "npl", "prerouting")
	return strings.Contains(out, "jump node-ports")
}

func (nftablesView) deleteAll(t *testing.T, n *cluster.Node) {
	runIn(t, n, "nft", "flush", "map", "ip", "npl", "node-ports")
}

// TestAgent_refusesADatapathItCannotRun: an unknown --datapath, and
// nftables on a node without nft, end the agent with exit 2 and one line
// that names the problem; nothing is left half started.
func TestAgent_refusesADatapathItCannotRun(t *testing.T) {
	e := setup(t)
	a := e.agent(node0)
	ctx := ctxFor(t, time.Minute)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown backend", nil, []string{"--datapath", "ebpf"}, `--datapath: "ebpf" is not auto, iptables or nftables`},
		// Without /usr/sbin on PATH there is no nft (nor iptables).
		{"nftables without nft", []string{"PATH=/nonexistent"}, []string{"--datapath", "nftables", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, "apt-get install nftables"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := a.RunOnce(ctx, tc.env, tc.args...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("npl-agent %v: %v, want exit 2\n%s", tc.args, err, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Errorf("npl-agent %v printed %q; want one line containing %q", tc.args, out, tc.want)
			}
		})
	}
}
