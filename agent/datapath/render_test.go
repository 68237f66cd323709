package datapath

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/contract"
)

const (
	v4 = contract.FamilyIPv4
	v6 = contract.FamilyIPv6
)

var nplRange = [2]int{61000, 62000}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func lines(s ...string) string { return strings.Join(s, "\n") + "\n" }

const (
	header = "*nat\n:NPL-NODE-PORT-LOCAL - [0:0]\n:NPL-POSTROUTING - [0:0]"
	footer = "COMMIT"
)

func TestRender(t *testing.T) {
	tests := []struct {
		name   string
		family contract.Family
		d      Desired
		want   string
	}{{
		name:   "empty state declares both chains, which flushes them",
		family: v4,
		d:      Desired{PortRange: nplRange},
		want:   lines(header, footer),
	}, {
		name:   "IPv4 mappings and hairpin sources",
		family: v4,
		d: Desired{
			Mappings: []Mapping{
				{NodePort: 61000, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 8080, Pod: "ns/pod"},
			},
			HairpinSources: []netip.Addr{ip("198.19.0.5")},
			PortRange:      nplRange,
		},
		want: lines(header,
			`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61000 -m comment --comment "ns/pod:8080" -j DNAT --to-destination 198.19.0.5:8080`,
			`-A NPL-POSTROUTING -s 198.19.0.5/32 -m conntrack --ctstate DNAT --ctorigdstport 61000:62000 -m comment --comment "npl hairpin" -j MASQUERADE`,
			footer),
	}, {
		name:   "IPv6 targets are bracketed and sources are /128",
		family: v6,
		d: Desired{
			Mappings: []Mapping{
				{NodePort: 61000, Protocol: "udp", PodIP: ip("2001:2:0:0::5"), PodPort: 53, Pod: "ns/dns"},
			},
			HairpinSources: []netip.Addr{ip("2001:2::5")},
			PortRange:      nplRange,
		},
		want: lines(header,
			`-A NPL-NODE-PORT-LOCAL -p udp -m udp --dport 61000 -m comment --comment "ns/dns:53" -j DNAT --to-destination [2001:2::5]:53`,
			`-A NPL-POSTROUTING -s 2001:2::5/128 -m conntrack --ctstate DNAT --ctorigdstport 61000:62000 -m comment --comment "npl hairpin" -j MASQUERADE`,
			footer),
	}, {
		name:   "rules are sorted by protocol, node port and target, duplicates dropped",
		family: v4,
		d: Desired{
			Mappings: []Mapping{
				{NodePort: 61002, Protocol: "udp", PodIP: ip("198.19.0.6"), PodPort: 53, Pod: "ns/b"},
				{NodePort: 61001, Protocol: "tcp", PodIP: ip("198.19.0.6"), PodPort: 80, Pod: "ns/b"},
				{NodePort: 61000, Protocol: "udp", PodIP: ip("198.19.0.5"), PodPort: 53, Pod: "ns/a"},
				{NodePort: 61000, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 80, Pod: "ns/a"},
				{NodePort: 61001, Protocol: "tcp", PodIP: ip("198.19.0.6"), PodPort: 80, Pod: "ns/b"},
			},
			HairpinSources: []netip.Addr{ip("198.19.0.6"), ip("198.19.0.5"), ip("198.19.0.6")},
			PortRange:      nplRange,
		},
		want: lines(header,
			`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61000 -m comment --comment "ns/a:80" -j DNAT --to-destination 198.19.0.5:80`,
			`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61001 -m comment --comment "ns/b:80" -j DNAT --to-destination 198.19.0.6:80`,
			`-A NPL-NODE-PORT-LOCAL -p udp -m udp --dport 61000 -m comment --comment "ns/a:53" -j DNAT --to-destination 198.19.0.5:53`,
			`-A NPL-NODE-PORT-LOCAL -p udp -m udp --dport 61002 -m comment --comment "ns/b:53" -j DNAT --to-destination 198.19.0.6:53`,
			`-A NPL-POSTROUTING -s 198.19.0.5/32 -m conntrack --ctstate DNAT --ctorigdstport 61000:62000 -m comment --comment "npl hairpin" -j MASQUERADE`,
			`-A NPL-POSTROUTING -s 198.19.0.6/32 -m conntrack --ctstate DNAT --ctorigdstport 61000:62000 -m comment --comment "npl hairpin" -j MASQUERADE`,
			footer),
	}, {
		name:   "each family keeps only its own addresses",
		family: v4,
		d: Desired{
			Mappings: []Mapping{
				{NodePort: 61000, Protocol: "tcp", PodIP: ip("2001:2::5"), PodPort: 80, Pod: "ns/a"},
				{NodePort: 61000, Protocol: "tcp", PodIP: ip("::ffff:198.19.0.5"), PodPort: 80, Pod: "ns/a"},
			},
			HairpinSources: []netip.Addr{ip("2001:2::5"), ip("198.19.0.5")},
			PortRange:      nplRange,
		},
		want: lines(header,
			`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61000 -m comment --comment "ns/a:80" -j DNAT --to-destination 198.19.0.5:80`,
			`-A NPL-POSTROUTING -s 198.19.0.5/32 -m conntrack --ctstate DNAT --ctorigdstport 61000:62000 -m comment --comment "npl hairpin" -j MASQUERADE`,
			footer),
	}, {
		name:   "odd characters in comments are quoted, control characters replaced",
		family: v4,
		d: Desired{
			Mappings: []Mapping{
				{NodePort: 61000, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 80, Pod: `ns/we"ird \ 'pod'`},
				{NodePort: 61001, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 81, Pod: "ns/new\nline -j ACCEPT"},
				{NodePort: 61002, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 82, Pod: "ns/ünïcode"},
			},
		},
		want: lines(header,
			`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61000 -m comment --comment "ns/we\"ird \\ \'pod\':80" -j DNAT --to-destination 198.19.0.5:80`,
			`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61001 -m comment --comment "ns/new?line -j ACCEPT:81" -j DNAT --to-destination 198.19.0.5:81`,
			`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61002 -m comment --comment "ns/??n??code:82" -j DNAT --to-destination 198.19.0.5:82`,
			footer),
	}, {
		name:   "a one-port range is written as a single port",
		family: v4,
		d:      Desired{HairpinSources: []netip.Addr{ip("198.19.0.5")}, PortRange: [2]int{61000, 61000}},
		want: lines(header,
			`-A NPL-POSTROUTING -s 198.19.0.5/32 -m conntrack --ctstate DNAT --ctorigdstport 61000 -m comment --comment "npl hairpin" -j MASQUERADE`,
			footer),
	}, {
		name:   "without a port range no masquerade rule is written",
		family: v4,
		d:      Desired{HairpinSources: []netip.Addr{ip("198.19.0.5")}},
		want:   lines(header, footer),
	}, {
		name:   "invalid mappings are left out",
		family: v4,
		d: Desired{Mappings: []Mapping{
			{NodePort: 0, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 80, Pod: "ns/a"},
			{NodePort: 61000, Protocol: "sctp", PodIP: ip("198.19.0.5"), PodPort: 80, Pod: "ns/a"},
			{NodePort: 61000, Protocol: "tcp", PodPort: 80, Pod: "ns/a"},
			{NodePort: 61000, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 70000, Pod: "ns/a"},
		}},
		want: lines(header, footer),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(Render(tt.family, tt.d))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Render (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRender_truncatesLongComments(t *testing.T) {
	pod := "ns/" + strings.Repeat("p", 300)
	out := string(Render(v4, Desired{Mappings: []Mapping{
		{NodePort: 61000, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 80, Pod: pod},
	}}))
	var rule string
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "-A ") {
			rule = l
		}
	}
	args := splitRule(rule)
	i := 0
	for i < len(args) && args[i] != "--comment" {
		i++
	}
	if i+1 >= len(args) {
		t.Fatalf("no comment in %q", rule)
	}
	if got := args[i+1]; got != pod[:maxCommentLen] {
		t.Errorf("comment is %d bytes %q..., want the first %d bytes of the Pod name", len(got), got[:10], maxCommentLen)
	}
}

func TestSplitRule_readsBackJoinArgs(t *testing.T) {
	tests := [][]string{
		{"-p", "tcp", "--dport", "61000"},
		{"-m", "comment", "--comment", `we"ird \ 'x'`},
		{"-m", "comment", "--comment", "two  spaces\tand tab"},
		{"-m", "comment", "--comment", ""},
		{"--to-destination", "[2001:2::5]:53"},
	}
	for _, args := range tests {
		line := joinArgs(args)
		if diff := cmp.Diff(args, splitRule(line)); diff != "" {
			t.Errorf("splitRule(%q) (-want +got):\n%s", line, diff)
		}
	}
}

func TestSplitRule_readsIptablesSaveQuoting(t *testing.T) {
	line := `-A NPL-NODE-PORT-LOCAL -p udp -m udp --dport 61001 -m comment --comment "ns/we\"ird \\ \'x\' pod:53" -j DNAT --to-destination 198.19.0.5:53`
	want := []string{"-A", "NPL-NODE-PORT-LOCAL", "-p", "udp", "-m", "udp", "--dport", "61001", "-m", "comment",
		"--comment", `ns/we"ird \ 'x' pod:53`, "-j", "DNAT", "--to-destination", "198.19.0.5:53"}
	if diff := cmp.Diff(want, splitRule(line)); diff != "" {
		t.Errorf("splitRule (-want +got):\n%s", diff)
	}
}

func TestDrift(t *testing.T) {
	d := Desired{
		Mappings: []Mapping{
			{NodePort: 61000, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 8080, Pod: "ns/pod"},
			{NodePort: 61001, Protocol: "tcp", PodIP: ip("198.19.0.6"), PodPort: 8080, Pod: "ns/pod2"},
		},
		HairpinSources: []netip.Addr{ip("198.19.0.5")},
		PortRange:      nplRange,
	}
	jumpLines := []string{
		`-A PREROUTING -m addrtype --dst-type LOCAL -m comment --comment "npl node ports" -j NPL-NODE-PORT-LOCAL`,
		`-A OUTPUT -m addrtype --dst-type LOCAL -m comment --comment "npl node ports" -j NPL-NODE-PORT-LOCAL`,
		`-A POSTROUTING -m comment --comment "npl hairpin" -j NPL-POSTROUTING`,
	}
	rules := []string{
		`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61000 -m comment --comment "ns/pod:8080" -j DNAT --to-destination 198.19.0.5:8080`,
		`-A NPL-NODE-PORT-LOCAL -p tcp -m tcp --dport 61001 -m comment --comment "ns/pod2:8080" -j DNAT --to-destination 198.19.0.6:8080`,
		`-A NPL-POSTROUTING -s 198.19.0.5/32 -m conntrack --ctstate DNAT --ctorigdstport 61000:62000 -m comment --comment "npl hairpin" -j MASQUERADE`,
	}
	chains := []string{":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]",
		":NPL-NODE-PORT-LOCAL - [0:0]", ":NPL-POSTROUTING - [0:0]"}
	save := func(chains, jumps, rules []string) string {
		all := append([]string{"# Generated by iptables-nft-save v1.8.9 (nf_tables)", "*nat"}, chains...)
		all = append(append(all, jumps...), rules...)
		return lines(append(all, "COMMIT", "# Warning: iptables-legacy tables present, use iptables-legacy-save to see them")...)
	}
	without := func(s []string, i int) []string {
		return append(append([]string(nil), s[:i]...), s[i+1:]...)
	}
	tests := []struct {
		name string
		save string
		want string
	}{
		{"in sync", save(chains, jumpLines, rules), ""},
		{"in sync with other rules around", save(chains, append([]string{"-A PREROUTING -j KUBE-SERVICES"}, jumpLines...), rules), ""},
		{"a mapping rule deleted", save(chains, jumpLines, without(rules, 1)), "chain NPL-NODE-PORT-LOCAL has 1 rules, want 2"},
		{"a masquerade rule deleted", save(chains, jumpLines, without(rules, 2)), "chain NPL-POSTROUTING has 0 rules, want 1"},
		// Rules never overlap and a partial write appends: order is no drift.
		{"rules out of order", save(chains, jumpLines, []string{rules[1], rules[0], rules[2]}), ""},
		{"a foreign rule added", save(chains, jumpLines, append(rules, "-A NPL-NODE-PORT-LOCAL -j ACCEPT")), "unexpected"},
		{"a chain deleted", save(without(chains, 4), nil, rules[2:]), "chain NPL-NODE-PORT-LOCAL is missing"},
		{"a jump deleted", save(chains, without(jumpLines, 1), rules), "jump from OUTPUT is missing"},
		{"the postrouting jump deleted", save(chains, jumpLines[:2], rules), "jump from POSTROUTING is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := drift(parseSave(tt.save), desiredRules(v4, d))
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("drift = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDesired_Validate(t *testing.T) {
	ok := Mapping{NodePort: 61000, Protocol: "tcp", PodIP: ip("198.19.0.5"), PodPort: 80, Pod: "ns/a"}
	with := func(f func(*Mapping)) Desired {
		m := ok
		f(&m)
		return Desired{Mappings: []Mapping{m}}
	}
	tests := []struct {
		name string
		d    Desired
		want string
	}{
		{"valid", Desired{Mappings: []Mapping{ok}, HairpinSources: []netip.Addr{ip("198.19.0.5")}, PortRange: nplRange}, ""},
		{"uppercase protocol", with(func(m *Mapping) { m.Protocol = "TCP" }), `protocol "TCP"`},
		{"node port 0", with(func(m *Mapping) { m.NodePort = 0 }), "node port 0"},
		{"pod port too big", with(func(m *Mapping) { m.PodPort = 65536 }), "Pod port 65536"},
		{"no pod IP", with(func(m *Mapping) { m.PodIP = netip.Addr{} }), "Pod IP"},
		{"zoned pod IP", with(func(m *Mapping) { m.PodIP = ip("fe80::1%eth0") }), "Pod IP"},
		{"invalid hairpin source", Desired{HairpinSources: []netip.Addr{{}}}, "hairpin source"},
		{"reversed range", Desired{PortRange: [2]int{62000, 61000}}, "port range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.d.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}
