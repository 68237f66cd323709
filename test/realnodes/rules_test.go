package realnodes

import (
	"context"
	"fmt"
	"iter"
	"regexp"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// A node's datapath as its own tools print it, split into npl's part and
// everybody else's (kube-proxy's, the kubelet's), counters cut so that two
// prints of the same rules compare equal.

var counters = regexp.MustCompile(`\[\d+:\d+\]|counter packets \d+ bytes \d+`)

// run runs a command in the node's network namespace.
func run(ctx context.Context, n *cluster.Node, name string, args ...string) (string, error) {
	out, err := n.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s on %s: %w: %s", name, strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// nodeRules is the node's iptables rules of both families (every table,
// iptables-save and ip6tables-save) and its nftables ruleset (every family).
type nodeRules struct{ iptables, ip6tables, nft string }

func readRules(ctx context.Context, n *cluster.Node) (nodeRules, error) {
	var r nodeRules
	var err error
	if r.iptables, err = run(ctx, n, "iptables-save"); err != nil {
		return r, err
	}
	if r.ip6tables, err = run(ctx, n, "ip6tables-save"); err != nil {
		return r, err
	}
	r.nft, err = run(ctx, n, "nft", "list", "ruleset")
	return r, err
}

// npl is npl's part: the lines of its chains and jumps (iptables and
// ip6tables, the latter marked) and its tables (nftables).
func (r nodeRules) npl() string {
	var b strings.Builder
	for _, line := range lines(r.iptables) {
		if strings.Contains(line, "NPL-") {
			b.WriteString(line + "\n")
		}
	}
	b.WriteString(r.nplIPv6())
	for line, table := range nftLines(r.nft) {
		if (table.npl && !table.ipv6) || (!table.npl && strings.Contains(line, "NPL-")) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// nplIPv6 is npl's IPv6 part: the lines of its ip6tables chains and jumps
// and of its nftables tables of the ip6 and inet families (which hold
// IPv6 traffic too), each ip6tables line marked "ip6: ".
func (r nodeRules) nplIPv6() string {
	var b strings.Builder
	for _, line := range lines(r.ip6tables) {
		if strings.Contains(line, "NPL-") {
			b.WriteString("ip6: " + line + "\n")
		}
	}
	for line, table := range nftLines(r.nft) {
		if table.npl && table.ipv6 {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// others is everything but npl's part.
func (r nodeRules) others() string {
	var b strings.Builder
	for _, line := range lines(r.iptables) {
		if !strings.Contains(line, "NPL-") && !strings.HasPrefix(line, "#") {
			b.WriteString(line + "\n")
		}
	}
	for _, line := range lines(r.ip6tables) {
		if !strings.Contains(line, "NPL-") && !strings.HasPrefix(line, "#") {
			b.WriteString("ip6: " + line + "\n")
		}
	}
	for line, table := range nftLines(r.nft) {
		if !table.npl && !strings.Contains(line, "NPL-") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// nftTable is the table a line of an nft listing is in: npl's (its name
// starts with npl), and of a family that holds IPv6 traffic (ip6, inet).
type nftTable struct{ npl, ipv6 bool }

// nftLines yields each line of an nft listing (counters cut) with the
// table it is in, its opening and closing lines included.
func nftLines(listing string) iter.Seq2[string, nftTable] {
	return func(yield func(string, nftTable) bool) {
		var table nftTable
		for _, line := range lines(listing) {
			if m := nftTableLine.FindStringSubmatch(line); m != nil {
				table = nftTable{npl: strings.HasPrefix(m[2], "npl"), ipv6: m[1] == "ip6" || m[1] == "inet"}
			}
			if !yield(line, table) {
				return
			}
			if line == "}" {
				table = nftTable{}
			}
		}
	}
}

var nftTableLine = regexp.MustCompile(`^table (\S+) (\S+) \{$`)

func lines(s string) []string {
	return strings.Split(strings.TrimRight(counters.ReplaceAllString(s, "[counters]"), "\n"), "\n")
}

var (
	iptablesNodePort = regexp.MustCompile(`-A NPL-NODE-PORT-LOCAL .*--dport (\d+) `)
	// An element of npl's node-ports map as nft lists it, with the
	// comment npl-agent writes on each: tcp . 61000 comment "ns/pod:8080" : ….
	nftNodePort = regexp.MustCompile(`(?:tcp|udp) \. (\d+)(?: comment "[^"]*")? :`)
)

// nodePorts lists the node ports npl's rules map.
func (r nodeRules) nodePorts() []int {
	var ports []int
	for _, m := range append(iptablesNodePort.FindAllStringSubmatch(r.npl(), -1), nftNodePort.FindAllStringSubmatch(r.npl(), -1)...) {
		p, _ := strconv.Atoi(m[1])
		ports = append(ports, p)
	}
	return ports
}

// heldPorts lists the TCP ports something listens on in the node's network
// namespace: the agent holds a socket on each node port it maps.
func heldPorts(ctx context.Context, n *cluster.Node) ([]int, error) {
	out, err := run(ctx, n, "ss", "-Hltn")
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		_, port, ok := cutLast(f[3], ":")
		if p, err := strconv.Atoi(port); ok && err == nil {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// deleteAJump deletes, by hand, one rule that sends traffic into npl's
// rules: the PREROUTING jump (iptables) or the first rule of the npl
// table's prerouting chain (nftables). It returns what it deleted.
func deleteAJump(ctx context.Context, n *cluster.Node, proxyMode string) (string, error) {
	if proxyMode == "nftables" {
		out, err := run(ctx, n, "nft", "-a", "list", "chain", "ip", "npl", "prerouting")
		if err != nil {
			return "", err
		}
		m := regexp.MustCompile(`(?m)^\s*([^{}\n]*[^{}\s]) # handle (\d+)$`).FindStringSubmatch(out)
		if m == nil {
			return "", fmt.Errorf("no rule in the npl table's prerouting chain on %s:\n%s", n.Name, out)
		}
		_, err = run(ctx, n, "nft", "delete", "rule", "ip", "npl", "prerouting", "handle", m[2])
		return "nft rule in ip npl prerouting: " + m[1], err
	}
	out, err := run(ctx, n, "iptables-save", "-t", "nat")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "-A PREROUTING "); ok && strings.Contains(rest, "-j NPL-NODE-PORT-LOCAL") {
			// iptables-save quotes like a shell.
			_, err := run(ctx, n, "sh", "-c", "iptables -t nat -D PREROUTING "+rest)
			return line, err
		}
	}
	return "", fmt.Errorf("no PREROUTING jump to NPL-NODE-PORT-LOCAL on %s", n.Name)
}
