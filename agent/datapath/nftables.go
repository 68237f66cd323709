package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/nodeportlocal/npl/contract"
)

// TableName is the nftables table the nftables backend owns whole, one per
// IP family (`ip npl`, `ip6 npl`), as kube-proxy owns `ip kube-proxy`.
const TableName = "npl"

// Objects of the npl table.
const (
	nftMapNodePorts     = "node-ports"      // meta l4proto . th dport : Pod address . Pod port
	nftSetHairpin       = "hairpin-sources" // local Pod addresses
	nftChainPrerouting  = "prerouting"
	nftChainOutput      = "output"
	nftChainPostrouting = "postrouting"
	nftChainNodePorts   = "node-ports"
)

// Base chain priorities: one before the nat chains of iptables and of
// kube-proxy's nftables mode (dstnat -100, srcnat 100), so that the order of
// the hooks is defined rather than left to registration order. Whoever runs
// first, nothing is shadowed: our map holds only our node ports (a range
// disjoint from the cluster's NodePorts), and a packet that misses it goes on
// to the next chain unchanged.
const (
	nftDNATPriority = "-101"
	nftSNATPriority = "99"
)

// NFTables programs the npl table of one IP family with nftables: its
// transactions are built with sigs.k8s.io/knftables' types and run by the
// nft binary. Mappings live in one map keyed by protocol and node port, so
// the cost of a new connection does not grow with the number of mappings,
// and an update is one transaction of element adds and deletes. It is safe
// for concurrent use; its writes are serialised.
type NFTables struct {
	family  contract.Family
	nftFam  knftables.Family
	nft     nftInfo
	render  knftables.Interface // a fake: it only makes transactions
	addr    string              // "ipv4_addr" or "ipv6_addr", the nft type of an address
	ipMatch string              // "ip" or "ip6", the nft payload of the family

	mu sync.Mutex
	// written is the content last written and known to be in place; nil
	// forces the next Sync to write the table whole.
	written *nftContent
	// elements writes the element changes, once the table is written.
	elements *elementWriter
	writes   atomic.Int64
	bytes    atomic.Int64
	execs    execCount
}

var _ Datapath = (*NFTables)(nil)

// NewNFTables returns the nftables datapath of family (contract.FamilyIPv4 or
// contract.FamilyIPv6). It fails when nft is missing or does not work here
// (too old, no permission, no nf_tables in the kernel): the first one in a
// process lists the tables to know (one command), unless the backend choice
// listed them already.
func NewNFTables(family contract.Family) (*NFTables, error) {
	t := &NFTables{family: family}
	switch family {
	case contract.FamilyIPv4:
		t.nftFam, t.addr, t.ipMatch = knftables.IPv4Family, "ipv4_addr", "ip"
	case contract.FamilyIPv6:
		t.nftFam, t.addr, t.ipMatch = knftables.IPv6Family, "ipv6_addr", "ip6"
	default:
		return nil, fmt.Errorf("new nftables datapath: unknown IP family %q", family)
	}
	info, err := probeNFT(context.Background())
	if err != nil {
		return nil, fmt.Errorf("new %s nftables datapath (apt-get install nftables; needs nft 1.0.1 or later and nf_tables): %w", family, err)
	}
	t.nft, t.render = info, knftables.NewFake(t.nftFam, TableName)
	return t, nil
}

// lister is knftables' interface to the npl table of one family, for the
// drift check's listings.
type lister struct {
	once sync.Once
	nft  knftables.Interface
	err  error
}

// listers caches, per family, knftables' interface for the life of the
// process: making one runs nft twice (--version, --check).
var listers sync.Map

// lister returns the cached knftables interface to the family's npl table,
// making it on first use; the two commands that costs are counted.
func (t *NFTables) lister() (knftables.Interface, error) {
	v, _ := listers.LoadOrStore(t.nftFam, &lister{})
	l := v.(*lister)
	l.once.Do(func() {
		t.execs.add(2) // nft --version, nft --check
		l.nft, l.err = knftables.New(t.nftFam, TableName)
	})
	return l.nft, l.err
}

// Family returns the IP family this datapath programs.
func (t *NFTables) Family() contract.Family { return t.family }

// Stats returns the commands run so far.
func (t *NFTables) Stats() Stats {
	return Stats{Writes: int(t.writes.Load()), Bytes: int(t.bytes.Load()), Execs: int(t.execs.Load())}
}

// nftContent is what the npl table holds beyond its fixed chains: the map
// and set elements, and the port range of the masquerade rule. Keys and
// values stay typed; the strings nft reads are made only for what is
// written.
type nftContent struct {
	elements  map[nftKey]Mapping // the mapping served on each key
	sources   map[netip.Addr]bool
	portRange [2]int
}

// nftKey is the key of the node-ports map: protocol and node port.
type nftKey struct {
	protocol contract.Protocol
	nodePort int
}

// contentOf renders the family's selection of d as table content.
func contentOf(family contract.Family, d Desired) nftContent {
	sel := selectFamily(family, d)
	c := nftContent{
		elements:  make(map[nftKey]Mapping, len(sel.mappings)),
		sources:   make(map[netip.Addr]bool, len(sel.sources)),
		portRange: sel.portRange,
	}
	for _, m := range sel.mappings {
		k := nftKey{m.Protocol, m.NodePort}
		// Two mappings of one node port cannot both be served: the first in
		// compareMappings order wins, as its iptables rule would.
		if have, dup := c.elements[k]; !dup || compareMappings(m, have) < 0 {
			c.elements[k] = m
		}
	}
	for _, a := range sel.sources {
		c.sources[a] = true
	}
	return c
}

// element is the map element of m.
func element(m Mapping) *knftables.Element {
	return &knftables.Element{
		Map:     nftMapNodePorts,
		Key:     []string{string(m.Protocol), strconv.Itoa(m.NodePort)},
		Value:   []string{m.PodIP.String(), strconv.Itoa(m.PodPort)},
		Comment: knftables.PtrTo(mappingComment(m)),
	}
}

// chains returns the chains of the table and their rules, in order. The
// rules are fixed but for the port range of the masquerade, which is left
// out when the range is zero (as the iptables backend writes no masquerade
// then). Each rule has a comment, the one thing nft lists back that Check
// can compare.
func (t *NFTables) chains(portRange [2]int) []nftChain {
	nat := knftables.NATType
	accept := knftables.AcceptPolicy
	base := func(name string, hook knftables.BaseChainHook, prio knftables.BaseChainPriority, rules ...nftRule) nftChain {
		return nftChain{chain: knftables.Chain{Name: name, Type: &nat, Hook: &hook, Priority: &prio, Policy: &accept}, rules: rules}
	}
	// Node-local clients are served by the output hook and keep the node IP
	// as source. 127.0.0.1 is not a destination of type local for fib here
	// either way: see Render for why loopback is not served.
	toNodePorts := nftRule{"fib daddr type local jump " + nftChainNodePorts, "npl node ports"}
	var masquerade []nftRule
	if portRange != [2]int{} {
		ports := strconv.Itoa(portRange[0])
		if portRange[1] != portRange[0] {
			ports += "-" + strconv.Itoa(portRange[1])
		}
		// "meta l4proto" gives "ct original proto-dst" a type nft 1.0.6 can parse.
		masquerade = append(masquerade, nftRule{
			t.ipMatch + " saddr @" + nftSetHairpin + " ct status dnat meta l4proto { tcp, udp } ct original proto-dst " + ports + " masquerade",
			hairpinComment,
		})
	}
	return []nftChain{
		base(nftChainPrerouting, knftables.PreroutingHook, nftDNATPriority, toNodePorts),
		base(nftChainOutput, knftables.OutputHook, nftDNATPriority, toNodePorts),
		base(nftChainPostrouting, knftables.PostroutingHook, nftSNATPriority, masquerade...),
		{chain: knftables.Chain{Name: nftChainNodePorts}, rules: []nftRule{
			{"dnat " + t.ipMatch + " to meta l4proto . th dport map @" + nftMapNodePorts, "npl dnat"},
		}},
	}
}

type nftChain struct {
	chain knftables.Chain
	rules []nftRule
}

type nftRule struct{ rule, comment string }

// Sync programs d. When it wrote the table itself last and no drift was seen
// since, and the port range is unchanged, it writes one transaction of
// element deletes and adds, over its netlink socket (elementWriter);
// otherwise, and when that transaction fails (an element to delete was
// gone: drift), it replaces the whole table in one transaction, which the
// kernel applies atomically: no packet sees a half written table.
func (t *NFTables) Sync(ctx context.Context, d Desired) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("sync %s nftables datapath: %w", t.family, err)
	}
	want := contentOf(t.family, d)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.written != nil && t.written.portRange == want.portRange {
		err := t.writeChanges(*t.written, want)
		if err == nil {
			t.written = &want
			return nil
		}
		if !errors.Is(err, errNothingChanged) {
			klog.FromContext(ctx).V(2).Info("Difference did not apply, writing the table whole", "family", t.family, "err", err)
		}
	}
	if err := t.run(ctx, t.whole(want)); err != nil {
		t.written = nil
		return fmt.Errorf("sync %s nftables datapath: %w", t.family, err)
	}
	t.written = &want
	return nil
}

func (t *NFTables) run(ctx context.Context, tx *knftables.Transaction) error {
	text := tx.String()
	t.execs.add(1)
	t.writes.Add(1)
	t.bytes.Add(int64(len(text)))
	return runNFT(ctx, t.nft.path, text)
}

// whole returns the transaction that replaces the table with want. nft 1.0.6
// has no "destroy", so the table is added (a no-op when it exists) before it
// is deleted, which then cannot fail.
func (t *NFTables) whole(want nftContent) *knftables.Transaction {
	tx := t.render.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{Comment: t.objectComment("NodePortLocal: owned by npl-agent")})
	tx.Add(&knftables.Map{
		Name:    nftMapNodePorts,
		Type:    knftables.Concat("inet_proto", ".", "inet_service", ":", t.addr, ".", "inet_service"),
		Comment: t.objectComment("node port to Pod address and port"),
	})
	tx.Add(&knftables.Set{Name: nftSetHairpin, Type: t.addr, Comment: t.objectComment("local Pods, masqueraded when they reach a node port")})
	chains := t.chains(want.portRange)
	for _, c := range chains {
		tx.Add(&c.chain) // every chain before any rule jumps to one
	}
	for _, c := range chains {
		for _, r := range c.rules {
			tx.Add(&knftables.Rule{Chain: c.chain.Name, Rule: r.rule, Comment: knftables.PtrTo(r.comment)})
		}
	}
	for _, m := range sortedMappings(want.elements, nil) {
		tx.Add(element(m))
	}
	for _, a := range sortedAddrs(want.sources, nil) {
		tx.Add(&knftables.Element{Set: nftSetHairpin, Key: []string{a.String()}})
	}
	return tx
}

// objectComment is the comment of a table, map or set, or none where the
// kernel takes none (as knftables leaves it out).
func (t *NFTables) objectComment(c string) *string {
	if !t.nft.objectComments {
		return nil
	}
	return &c
}

// sortedMappings returns the mappings of elements that keep says to keep (all
// when keep is nil), in compareMappings order, so that a transaction's text
// depends on its content only.
func sortedMappings(elements map[nftKey]Mapping, keep func(nftKey, Mapping) bool) []Mapping {
	var out []Mapping
	for k, m := range elements {
		if keep == nil || keep(k, m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, compareMappings)
	return out
}

// sortedAddrs is sortedMappings for the hairpin sources.
func sortedAddrs(set map[netip.Addr]bool, keep func(netip.Addr) bool) []netip.Addr {
	var out []netip.Addr
	for a := range set {
		if keep == nil || keep(a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// errNothingChanged is writeChanges' answer to two equal contents: Sync
// then writes the table whole, which repairs what a Check would find.
var errNothingChanged = errors.New("no element changed")

// writeChanges writes the element deletes and adds that turn have into
// want, in one transaction. A changed element is deleted and added again:
// adding a key that exists does not replace its value. Only what changed is
// sorted, so a small change costs little on a large table.
func (t *NFTables) writeChanges(have, want nftContent) error {
	delMappings := sortedMappings(have.elements, func(k nftKey, m Mapping) bool { w, ok := want.elements[k]; return !ok || w != m })
	addMappings := sortedMappings(want.elements, func(k nftKey, m Mapping) bool { h, ok := have.elements[k]; return !ok || h != m })
	delSources := sortedAddrs(have.sources, func(a netip.Addr) bool { return !want.sources[a] })
	addSources := sortedAddrs(want.sources, func(a netip.Addr) bool { return !have.sources[a] })
	if len(delMappings)+len(addMappings)+len(delSources)+len(addSources) == 0 {
		return errNothingChanged
	}
	if t.elements == nil {
		w, err := newElementWriter(t.family)
		if err != nil {
			return err
		}
		t.elements = w
	}
	t.writes.Add(1)
	size, err := t.elements.write(delMappings, addMappings, delSources, addSources)
	t.bytes.Add(int64(size))
	return err
}

// Check compares the npl table with d: the table, its chains, map and set
// must exist, each chain must hold exactly its rules (compared by comment
// and count: nft does not list a rule back in the form it was written), and
// the map and the set must hold exactly the elements of d (keys and values;
// comments are not compared). It costs four nft runs whatever the size.
func (t *NFTables) Check(ctx context.Context, d Desired) (bool, error) {
	want := contentOf(t.family, d)
	t.mu.Lock()
	defer t.mu.Unlock()
	reason, err := t.drift(ctx, want)
	if err != nil {
		return false, fmt.Errorf("check %s nftables datapath: %w", t.family, err)
	}
	if reason != "" {
		t.written = nil
		klog.FromContext(ctx).V(2).Info("Datapath drift", "family", t.family, "reason", reason)
		return true, nil
	}
	return false, nil
}

// drift describes the first difference between the table and want, or
// returns "" when there is none.
func (t *NFTables) drift(ctx context.Context, want nftContent) (string, error) {
	nft, err := t.lister()
	if err != nil {
		return "", err
	}
	t.execs.add(1)
	objects, err := nft.ListAll(ctx)
	if knftables.IsNotFound(err) {
		return "table " + TableName + " is missing", nil
	}
	if err != nil {
		return "", err
	}
	for kind, names := range map[string][]string{
		"map": {nftMapNodePorts}, "set": {nftSetHairpin},
		"chain": {nftChainPrerouting, nftChainOutput, nftChainPostrouting, nftChainNodePorts},
	} {
		for _, name := range names {
			if !slices.Contains(objects[kind], name) {
				return kind + " " + name + " is missing", nil
			}
		}
	}

	t.execs.add(1)
	rules, err := nft.ListRules(ctx, "")
	if err != nil {
		return "", fmt.Errorf("list rules: %w", err)
	}
	have := map[string][]string{}
	for _, r := range rules {
		c := ""
		if r.Comment != nil {
			c = *r.Comment
		}
		have[r.Chain] = append(have[r.Chain], c)
	}
	for _, c := range t.chains(want.portRange) {
		var comments []string
		for _, r := range c.rules {
			comments = append(comments, r.comment)
		}
		if !slices.Equal(have[c.chain.Name], comments) {
			return fmt.Sprintf("chain %s has rules %q, want %q", c.chain.Name, have[c.chain.Name], comments), nil
		}
	}

	if reason, err := t.elementsDrift(ctx, nft, "map", nftMapNodePorts, len(want.elements), func(e *knftables.Element) bool {
		return listedAsWanted(e, want.elements)
	}); reason != "" || err != nil {
		return reason, err
	}
	return t.elementsDrift(ctx, nft, "set", nftSetHairpin, len(want.sources), func(e *knftables.Element) bool {
		a, err := netip.ParseAddr(strings.Join(e.Key, ""))
		return err == nil && want.sources[a]
	})
}

// elementsDrift lists a map or set and describes how it differs from the n
// elements wanted, each of which wanted recognises, or returns "".
func (t *NFTables) elementsDrift(ctx context.Context, nft knftables.Interface, kind, name string, n int, wanted func(*knftables.Element) bool) (string, error) {
	t.execs.add(1)
	elements, err := nft.ListElements(ctx, kind, name)
	if err != nil {
		return "", fmt.Errorf("list %s %s: %w", kind, name, err)
	}
	if len(elements) != n {
		return fmt.Sprintf("%s %s has %d elements, want %d", kind, name, len(elements), n), nil
	}
	for _, e := range elements {
		if !wanted(e) {
			return fmt.Sprintf("%s %s: unexpected element %s : %s", kind, name, strings.Join(e.Key, " . "), strings.Join(e.Value, " . ")), nil
		}
	}
	return "", nil
}

// listedAsWanted reports whether a map element nft listed is the one want
// holds for its key. Addresses are compared as addresses, so nft's spelling
// of an IPv6 address cannot cause a false drift.
func listedAsWanted(e *knftables.Element, want map[nftKey]Mapping) bool {
	if len(e.Key) != 2 || len(e.Value) != 2 {
		return false
	}
	port, err1 := strconv.Atoi(e.Key[1])
	podPort, err2 := strconv.Atoi(e.Value[1])
	addr, err3 := netip.ParseAddr(e.Value[0])
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	m, ok := want[nftKey{contract.Protocol(e.Key[0]), port}]
	return ok && m.PodIP == addr && m.PodPort == podPort
}

// FlushUDP deletes the conntrack entries of UDP flows whose original
// destination port is nodePort.
func (t *NFTables) FlushUDP(ctx context.Context, nodePort int) error {
	return flushUDPConntrack(ctx, t.family, nodePort, &t.execs)
}

// Cleanup deletes the npl table, in one command whether it exists or not.
// It is idempotent.
func (t *NFTables) Cleanup(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written = nil
	if t.elements != nil {
		_ = t.elements.close() // a socket: nothing of it survives the close
		t.elements = nil
	}
	tx := t.render.NewTransaction()
	tx.Delete(&knftables.Table{})
	text := tx.String()
	t.execs.add(1)
	if err := runNFT(ctx, t.nft.path, text); errors.Is(err, errNFTNotFound) {
		return nil // nothing was written
	} else if err != nil {
		return fmt.Errorf("clean up %s nftables datapath: %w", t.family, err)
	}
	t.writes.Add(1)
	t.bytes.Add(int64(len(text)))
	klog.FromContext(ctx).Info("Removed the NodePortLocal nftables table", "family", t.family, "table", TableName)
	return nil
}
