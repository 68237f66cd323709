package datapath

import (
	"bytes"
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/contract"
)

const (
	hairpinComment = "npl hairpin"
	// maxCommentLen is the longest comment the comment match stores
	// (XT_MAX_COMMENT_LEN less its NUL byte).
	maxCommentLen = 255
)

// jump is a rule in a built-in chain that sends traffic to one of ours.
type jump struct {
	chain string
	spec  []string
}

// jumps are the rules that hook our chains into the nat table. Node-local
// clients (a process on the node dialing nodeIP:nodePort) are served by the
// OUTPUT jump; they keep the node IP as source and need no masquerade.
var jumps = []jump{
	{"PREROUTING", []string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "npl node ports", "-j", ChainNodePortLocal}},
	{"OUTPUT", []string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "npl node ports", "-j", ChainNodePortLocal}},
	{"POSTROUTING", []string{"-m", "comment", "--comment", "npl hairpin", "-j", ChainPostrouting}},
}

// rule is one rule of our chains as argument tokens, without "-A chain".
type rule struct {
	chain string
	args  []string
}

// Render returns the iptables-restore input that gives the nat chains
// NPL-NODE-PORT-LOCAL and NPL-POSTROUTING the content d asks for, for family
// (contract.FamilyIPv4 or contract.FamilyIPv6). It is meant for
// `iptables-restore --noflush`: the ":CHAIN" lines flush exactly our two
// chains, so the write also drops stale rules, and nothing else in nat moves.
//
// Mappings and hairpin sources of the other family are left out, as are
// mappings that Desired.Validate rejects. Rules are sorted (protocol, node
// port, then target) so equal states render to equal bytes.
//
// Mapping rules match on destination port only, behind jumps that match
// any local destination address, and do not SNAT, so client IPs are kept.
// The masquerade rules cover same-node hairpin: traffic from a local Pod
// whose connection NPL DNATed (original destination port in the range) is
// masqueraded, so a Pod that reaches itself or a neighbour through
// nodeIP:nodePort gets the replies back through the node.
//
// 127.0.0.1:nodePort is deliberately not served: DNAT of loopback-sourced
// traffic to a Pod only works with net.ipv4.conf.*.route_localnet=1, which
// exposes services bound to localhost to the node's neighbours
// (CVE-2020-8558). Node-local clients dial nodeIP:nodePort instead.
func Render(family contract.Family, d Desired) []byte {
	return render(desiredRules(family, d), nil)
}

// render is Render of rules, with the jumps to insert at the top of their
// built-in chains (nothing else of those chains is touched).
func render(rules []rule, insert []jump) []byte {
	var b bytes.Buffer
	b.WriteString("*nat\n")
	b.WriteString(":" + ChainNodePortLocal + " - [0:0]\n")
	b.WriteString(":" + ChainPostrouting + " - [0:0]\n")
	for _, r := range rules {
		b.WriteString(formatRule("-A", r.chain, r.args))
		b.WriteByte('\n')
	}
	for _, j := range insert {
		b.WriteString(formatRule("-I", j.chain, append([]string{"1"}, j.spec...)))
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// selection is what one family's datapath programs of a Desired, whatever
// the backend: the valid mappings of that family (unmapped, in the order of
// d), the hairpin sources of that family (sorted, unique), and the port
// range of the masquerade rule, zero when none is to be written.
type selection struct {
	mappings  []Mapping
	sources   []netip.Addr
	portRange [2]int
}

// selectFamily returns the selection of d for family; any family but IPv6
// means IPv4. Mappings and sources that Desired.Validate rejects are left
// out, as is a port range that is not one.
func selectFamily(family contract.Family, d Desired) selection {
	if family != contract.FamilyIPv6 {
		family = contract.FamilyIPv4
	}
	var sel selection
	for _, m := range d.Mappings {
		if m.validate() == nil && contract.FamilyOf(m.PodIP) == family {
			m.PodIP = m.PodIP.Unmap()
			sel.mappings = append(sel.mappings, m)
		}
	}
	for _, a := range d.HairpinSources {
		if a.IsValid() && a.Zone() == "" && contract.FamilyOf(a) == family {
			sel.sources = append(sel.sources, a.Unmap())
		}
	}
	slices.SortFunc(sel.sources, netip.Addr.Compare)
	sel.sources = slices.Compact(sel.sources)

	if lo, hi := d.PortRange[0], d.PortRange[1]; lo >= 1 && hi <= 65535 && lo <= hi {
		sel.portRange = d.PortRange
	}
	return sel
}

// compareMappings orders mappings by protocol, node port, then target: the
// order of the iptables rules, and the tie-break when two mappings claim one
// node port (the first in this order is served).
func compareMappings(a, b Mapping) int {
	return cmp.Or(
		cmp.Compare(a.Protocol, b.Protocol),
		cmp.Compare(a.NodePort, b.NodePort),
		a.PodIP.Compare(b.PodIP),
		cmp.Compare(a.PodPort, b.PodPort),
		cmp.Compare(a.Pod, b.Pod),
	)
}

// mappingComment names the Pod and Pod port of a mapping, for a rule or
// element comment.
func mappingComment(m Mapping) string { return comment(m.Pod + ":" + strconv.Itoa(m.PodPort)) }

// desiredRules returns the rules of both chains in the order Render writes them.
func desiredRules(family contract.Family, d Desired) []rule {
	sel := selectFamily(family, d)
	slices.SortFunc(sel.mappings, compareMappings)
	sel.mappings = slices.Compact(sel.mappings)
	rules := make([]rule, 0, len(sel.mappings)+len(sel.sources))
	for _, m := range sel.mappings {
		rules = append(rules, rule{ChainNodePortLocal, []string{
			"-p", string(m.Protocol), "-m", string(m.Protocol), "--dport", strconv.Itoa(m.NodePort),
			"-m", "comment", "--comment", mappingComment(m),
			"-j", "DNAT", "--to-destination", netip.AddrPortFrom(m.PodIP, uint16(m.PodPort)).String(),
		}})
	}
	if sel.portRange == [2]int{} {
		return rules
	}
	lo, hi := sel.portRange[0], sel.portRange[1]
	ports := strconv.Itoa(lo)
	if hi != lo {
		// iptables-save prints a one-port range as a single port.
		ports += ":" + strconv.Itoa(hi)
	}
	for _, a := range sel.sources {
		rules = append(rules, rule{ChainPostrouting, []string{
			"-s", netip.PrefixFrom(a, a.BitLen()).String(),
			"-m", "conntrack", "--ctstate", "DNAT", "--ctorigdstport", ports,
			"-m", "comment", "--comment", hairpinComment,
			"-j", "MASQUERADE",
		}})
	}
	return rules
}

// comment makes s safe for a rule comment: printable ASCII only (a newline
// would end the restore line), at most maxCommentLen bytes.
func comment(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c >= 0x7f {
			b[i] = '?'
		}
	}
	if len(b) > maxCommentLen {
		b = b[:maxCommentLen]
	}
	return string(b)
}

// formatRule writes a rule line as iptables-save does, quoting arguments
// the way iptables-restore reads them back.
func formatRule(op, chain string, args []string) string {
	return op + " " + chain + " " + joinArgs(args)
}

// joinArgs joins rule arguments with the quoting of iptables-save, so that
// splitRule gives them back.
func joinArgs(args []string) string {
	var sb strings.Builder
	for i, a := range args {
		if i > 0 {
			sb.WriteByte(' ')
		}
		if (i > 0 && args[i-1] == "--comment") || needsQuotes(a) {
			sb.WriteString(quoteArg(a))
		} else {
			sb.WriteString(a)
		}
	}
	return sb.String()
}

// quoteArg quotes a as iptables-save quotes strings (xtables_save_string):
// bare when made of [A-Za-z0-9_-] only, otherwise in double quotes with ", \
// and ' escaped by a backslash.
func quoteArg(a string) string {
	if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == "" {
		return a
	}
	var sb strings.Builder
	sb.WriteByte('"')
	for _, c := range []byte(a) {
		if c == '"' || c == '\\' || c == '\'' {
			sb.WriteByte('\\')
		}
		sb.WriteByte(c)
	}
	sb.WriteByte('"')
	return sb.String()
}

// needsQuotes reports whether iptables-restore would split or alter a if it
// were written bare.
func needsQuotes(a string) bool {
	return a == "" || strings.ContainsAny(a, " \t\n\r\"\\'")
}

// splitRule splits a rule line into arguments as iptables-restore does:
// spaces separate, double quotes group, and inside quotes a backslash takes
// the next character literally.
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inQuote, escaped, started := false, false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case escaped:
			cur.WriteByte(c)
			escaped = false
		case inQuote && c == '\\':
			escaped = true
		case c == '"':
			inQuote = !inQuote
			started = true
		case !inQuote && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			if started {
				args = append(args, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteByte(c)
			started = true
		}
	}
	if started {
		args = append(args, cur.String())
	}
	return args
}
