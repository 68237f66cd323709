// Package udp serves npl-edge's UDP listeners with nftables, as HAProxy 2.6
// has no UDP proxying. It owns one table, `inet npl-edge`, whose name and
// layout are defined here only:
//
//	map udp4 / udp6      VIP . port : goto <listener chain>   (looked up in prerouting, UDP only)
//	chain u4-<vip hex>-<port> (u6- for IPv6)
//	    meta mark set meta mark | Mark                      (so that postrouting masquerades the flow)
//	    dnat to numgen random mod N map @s-<chain>          (N slots over the members taking new flows)
//	map m-<chain>        member address . port : weight     (every member, draining ones too)
//	map s-<chain>        slot : member address . port       (each member taking new flows gets weight/gcd slots)
//	chain postrouting    meta mark & Mark == Mark masquerade
//
// The first packet of a flow picks a slot at random, so members get new
// flows in proportion to their weights; conntrack keeps every later packet
// of the flow (both ways) on the member it picked. A draining member stays
// in m-<chain> with no slot: it takes no new flow, and the flows conntrack
// already has live on until they time out. A member or listener that is
// removed loses its flows: their conntrack entries are deleted, so that a
// client's next packet picks a member that is there. Replies come back
// through the edge because the edge masquerades what it forwards (members
// see the edge's address, as with HAProxy).
//
// Every change is one nft transaction, which the kernel applies atomically.
package udp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/nodeportlocal/npl/internal/conntrack"
	"github.com/nodeportlocal/npl/lbmodel"
)

// TableName is the nftables table the package owns whole (family inet).
const TableName = "npl-edge"

// Mark is the packet mark bit set on the first packet of each flow the
// table sends to a member; the postrouting chain masquerades the packets
// that carry it.
const Mark = 0x00200000

// Objects of the table.
const (
	mapVIPs4    = "udp4"
	mapVIPs6    = "udp6"
	chainPre    = "prerouting"
	chainPost   = "postrouting"
	ruleMark    = "mark for masquerade"
	ruleMasq    = "masquerade udp listeners"
	rulePre4    = "udp listeners ipv4"
	rulePre6    = "udp listeners ipv6"
	slotsPrefix = "slots "
)

// Base chain priorities: just before the nat hooks of iptables and
// kube-proxy (dstnat -100, srcnat 100), as npl-agent's own table.
const (
	dnatPriority = "-101"
	snatPriority = "99"
)

// Listener is one UDP listener: datagrams to VIP:Port go to the members.
type Listener struct {
	VIP     netip.Addr
	Port    int32
	Members []lbmodel.Member
}

// Key names a listener: its VIP and port.
type Key struct {
	VIP  netip.Addr
	Port int32
}

func (k Key) String() string { return netip.AddrPortFrom(k.VIP, uint16(k.Port)).String() }

// member is a member as the table holds it.
type member struct {
	addr    netip.AddrPort
	weight  int32 // 1-256
	enabled bool
}

// content is what the table holds of one listener.
type content []member

// Table programs the npl-edge table. It is safe for concurrent use.
type Table struct {
	nft knftables.Interface
	// read returns the JSON listing of the table (nft -j list table).
	read func(ctx context.Context) ([]byte, error)
	// flush deletes the conntrack entries of flows from a listener to a
	// member.
	flush func(ctx context.Context, k Key, m netip.AddrPort) error
	// VerifyEvery is how often Sync reads the table back to find and
	// repair changes made by others; zero reads it at every Sync.
	VerifyEvery time.Duration
	// ForwardsIPv6 returns an error unless the host forwards IPv6, which
	// the listeners on IPv6 VIPs need (Unserved); nil counts as
	// forwarding. New sets it to Forwarding6.
	ForwardsIPv6 func() error

	writes atomic.Int64

	mu sync.Mutex
	// written is what the table holds after the last successful write;
	// nil makes the next Sync write the table whole.
	written  map[Key]content
	verified time.Time
	// unflushed are the flows of removed members whose conntrack entries
	// could not be deleted; every Sync tries again until they go or the
	// member is back on its listener.
	unflushed map[flow]bool
}

// flow is the flows from a listener to one member.
type flow struct {
	k Key
	m netip.AddrPort
}

// New returns the table of this host's network namespace. It fails when
// nft is missing or does not work here.
func New() (*Table, error) {
	nft, err := knftables.New(knftables.InetFamily, TableName)
	if err != nil {
		return nil, fmt.Errorf("nftables for UDP listeners (apt-get install nftables; needs nf_tables, nat and numgen): %w", err)
	}
	return &Table{nft: nft, read: listTable, flush: flushConntrack, VerifyEvery: 10 * time.Second, ForwardsIPv6: Forwarding6}, nil
}

// Forwarding returns an error unless the host forwards IPv4 packets
// (net.ipv4.ip_forward), without which the DNAT'd datagrams go nowhere.
func Forwarding() error { return sysctlOn("net.ipv4.ip_forward") }

// Forwarding6 is Forwarding for IPv6 (net.ipv6.conf.all.forwarding): the
// listeners on IPv6 VIPs need it. New sets Table.ForwardsIPv6 to it.
func Forwarding6() error { return sysctlOn("net.ipv6.conf.all.forwarding") }

func sysctlOn(name string) error {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if v := strings.TrimSpace(string(b)); v != "1" {
		return fmt.Errorf("%s is %s: the edge does not forward the datagrams it sends to members (sysctl -w %s=1)", name, v, name)
	}
	return nil
}

// Unserved says why the table does not serve listeners on vip, "" when it
// does: an IPv6 VIP on a host that does not forward IPv6. Sync leaves such
// listeners out.
func (t *Table) Unserved(vip netip.Addr) string {
	if !vip.Unmap().Is6() {
		return ""
	}
	return t.noIPv6()
}

// noIPv6 says why the listeners on IPv6 VIPs are not served, "" when they
// are.
func (t *Table) noIPv6() string {
	if t.ForwardsIPv6 == nil {
		return ""
	}
	if err := t.ForwardsIPv6(); err != nil {
		return err.Error()
	}
	return ""
}

// NewWith returns a table driven by nft (a knftables.Fake in tests), read
// back by read and whose flows are deleted by flush.
func NewWith(nft knftables.Interface, read func(context.Context) ([]byte, error), flush func(context.Context, Key, netip.AddrPort) error) *Table {
	return &Table{nft: nft, read: read, flush: flush}
}

// Validate checks listeners as the table needs them: one listener per VIP
// and port, members of the VIP's family (NAT between families is not
// done).
func Validate(listeners []Listener) error {
	seen := map[Key]bool{}
	for _, l := range listeners {
		k := Key{l.VIP.Unmap(), l.Port}
		if !k.VIP.IsValid() || l.Port < 1 || l.Port > 65535 {
			return fmt.Errorf("UDP listener %s: not a VIP and port", k)
		}
		if seen[k] {
			return fmt.Errorf("UDP listener %s: listed twice", k)
		}
		seen[k] = true
		for _, m := range l.Members {
			a, err := netip.ParseAddr(m.IP)
			if err != nil || m.Port < 1 || m.Port > 65535 {
				return fmt.Errorf("UDP listener %s: member %s:%d is not an address and port", k, m.IP, m.Port)
			}
			if a.Unmap().Is4() != k.VIP.Is4() {
				return fmt.Errorf("UDP listener %s: member %s is not of the VIP's IP family", k, m.IP)
			}
		}
	}
	return nil
}

// Sync makes the table serve exactly listeners, except those it does not
// serve (Unserved: IPv6 VIPs on a host that does not forward IPv6), and
// returns whether it wrote anything. It writes only the listeners that changed (one
// transaction); when it has not written the table yet, when the table was
// changed by someone else (read back every VerifyEvery), or when the
// transaction fails, it replaces the whole table in one transaction.
// Members removed from a listener, and every member of a removed listener,
// lose their flows.
func (t *Table) Sync(ctx context.Context, listeners []Listener) (bool, error) {
	if err := Validate(listeners); err != nil {
		return false, err
	}
	want := make(map[Key]content, len(listeners))
	// One read of the host's IPv6 forwarding for all listeners.
	noIPv6 := t.noIPv6() != ""
	for _, l := range listeners {
		vip := l.VIP.Unmap()
		if vip.Is6() && noIPv6 {
			continue
		}
		want[Key{vip, l.Port}] = contentOf(l.Members)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	log := klog.FromContext(ctx)
	t.flushAgain(ctx, want)
	// last is what was written last, whose removed members lose their
	// flows even when the table is written whole.
	last := t.written
	if t.written != nil && time.Since(t.verified) >= t.VerifyEvery {
		st, err := t.state(ctx)
		switch {
		case err != nil:
			log.Error(err, "Read the UDP table back; writing it whole")
			t.written = nil
		case !st.equal(expected(t.written)):
			log.Info("The UDP table differs from what npl-edge wrote; writing it whole")
			t.written = nil
		default:
			t.verified = time.Now()
		}
	}
	prev := t.written
	if prev != nil {
		tx := t.nft.NewTransaction()
		diff(tx, prev, want)
		if tx.NumOperations() == 0 {
			return false, nil
		}
		if err := t.nft.Run(ctx, tx); err == nil {
			t.writes.Add(1)
			t.written = want
			t.flushRemoved(ctx, prev, want)
			return true, nil
		} else {
			log.Info("Change of the UDP table did not apply; writing it whole", "err", err.Error())
		}
	}
	tx := t.nft.NewTransaction()
	whole(tx, want)
	if err := t.nft.Run(ctx, tx); err != nil {
		t.written = nil
		return false, fmt.Errorf("write nftables table inet %s: %w", TableName, err)
	}
	t.writes.Add(1)
	t.written, t.verified = want, time.Now()
	if last != nil {
		t.flushRemoved(ctx, last, want)
	}
	return true, nil
}

// flushRemoved deletes the flows of the members that were in prev and are
// not in want; those it cannot delete are tried again at the next Sync.
func (t *Table) flushRemoved(ctx context.Context, prev, want map[Key]content) {
	for k, c := range prev {
		for _, m := range c {
			if !serves(want, k, m.addr) {
				t.flushFlow(ctx, flow{k, m.addr})
			}
		}
	}
}

// flushAgain tries again the flows flushRemoved could not delete, and
// forgets those of members that are back on their listener.
func (t *Table) flushAgain(ctx context.Context, want map[Key]content) {
	again := t.unflushed
	t.unflushed = nil
	for f := range again {
		if !serves(want, f.k, f.m) {
			t.flushFlow(ctx, f)
		}
	}
}

// flushFlow deletes the flows f, and keeps it for flushAgain when that
// fails.
func (t *Table) flushFlow(ctx context.Context, f flow) {
	err := t.flush(ctx, f.k, f.m)
	if err == nil {
		return
	}
	klog.FromContext(ctx).Error(err, "Delete the flows of a removed UDP member; the next sync tries again", "listener", f.k.String(), "member", f.m.String())
	if t.unflushed == nil {
		t.unflushed = map[flow]bool{}
	}
	t.unflushed[f] = true
}

// serves reports whether listener k of want has member m.
func serves(want map[Key]content, k Key, m netip.AddrPort) bool {
	return slices.ContainsFunc(want[k], func(o member) bool { return o.addr == m })
}

// Writes returns how many transactions changed the table.
func (t *Table) Writes() int64 { return t.writes.Load() }

// Listeners returns how many listeners the table holds as last written.
func (t *Table) Listeners() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.written)
}

// Served returns the members the table serves on each listener, read back
// from the kernel: every member of m-<chain> with its weight (the model's:
// 1 is 0), enabled when it has a slot.
func (t *Table) Served(ctx context.Context) (map[Key][]lbmodel.Member, error) {
	st, err := t.state(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[Key][]lbmodel.Member, len(st.listeners))
	for k, l := range st.listeners {
		members := []lbmodel.Member{}
		for _, m := range l.members {
			w := m.weight
			if w == 1 {
				w = 0
			}
			members = append(members, lbmodel.Member{IP: m.addr.Addr().String(), Port: int32(m.addr.Port()), Enabled: m.enabled, Weight: w})
		}
		out[k] = lbmodel.SortMembers(members)
	}
	return out, nil
}

// Delete removes the table; without one it does nothing.
func (t *Table) Delete(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written = nil
	tx := t.nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if err := t.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("delete nftables table inet %s: %w", TableName, err)
	}
	return nil
}

// contentOf is the table's form of members: sorted, weights 1-256.
func contentOf(members []lbmodel.Member) content {
	c := make(content, 0, len(members))
	for _, m := range members {
		a := netip.MustParseAddr(m.IP).Unmap()
		w := m.Weight
		if w == 0 {
			w = 1
		}
		c = append(c, member{addr: netip.AddrPortFrom(a, uint16(m.Port)), weight: w, enabled: m.Enabled})
	}
	slices.SortFunc(c, func(a, b member) int { return a.addr.Compare(b.addr) })
	return slices.CompactFunc(c, func(a, b member) bool { return a.addr == b.addr })
}

// slots are the members a new flow picks from, one entry per slot: each
// enabled member weight/g times, g the greatest common divisor of the
// enabled members' weights.
func (c content) slots() []netip.AddrPort {
	g := int32(0)
	for _, m := range c {
		if m.enabled {
			g = lbmodel.WeightGCD(g, m.weight)
		}
	}
	var out []netip.AddrPort
	for _, m := range c {
		if m.enabled {
			for range m.weight / g {
				out = append(out, m.addr)
			}
		}
	}
	return out
}

// chainName is the chain of listener k: u4-<VIP in hex>-<port>, or u6-.
func chainName(k Key) string {
	if k.VIP.Is4() {
		a := k.VIP.As4()
		return fmt.Sprintf("u4-%x-%d", a[:], k.Port)
	}
	a := k.VIP.As16()
	return fmt.Sprintf("u6-%x-%d", a[:], k.Port)
}

func membersMap(chain string) string { return "m-" + chain }
func slotsMap(chain string) string   { return "s-" + chain }

// ipOf returns the nft names of k's family: payload, address type, map of
// VIPs.
func ipOf(k Key) (ip, addrType, vips string) {
	if k.VIP.Is4() {
		return "ip", "ipv4_addr", mapVIPs4
	}
	return "ip6", "ipv6_addr", mapVIPs6
}

// whole adds to tx what replaces the table with want. nft 1.0.6 has no
// "destroy": the table is added (a no-op when it exists) before it is
// deleted, which then cannot fail.
func whole(tx *knftables.Transaction, want map[Key]content) {
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("UDP listeners: owned by npl-edge")})
	tx.Add(&knftables.Map{Name: mapVIPs4, Type: "ipv4_addr . inet_service : verdict", Comment: knftables.PtrTo("IPv4 VIP and port to listener")})
	tx.Add(&knftables.Map{Name: mapVIPs6, Type: "ipv6_addr . inet_service : verdict", Comment: knftables.PtrTo("IPv6 VIP and port to listener")})
	nat := knftables.NATType
	accept := knftables.AcceptPolicy
	pre, post := knftables.PreroutingHook, knftables.PostroutingHook
	dprio, sprio := knftables.BaseChainPriority(dnatPriority), knftables.BaseChainPriority(snatPriority)
	tx.Add(&knftables.Chain{Name: chainPre, Type: &nat, Hook: &pre, Priority: &dprio, Policy: &accept})
	tx.Add(&knftables.Chain{Name: chainPost, Type: &nat, Hook: &post, Priority: &sprio, Policy: &accept})
	for _, k := range sortedKeys(want) {
		addListener(tx, k, want[k])
	}
	tx.Add(&knftables.Rule{Chain: chainPre, Rule: "ip daddr . udp dport vmap @" + mapVIPs4, Comment: knftables.PtrTo(rulePre4)})
	tx.Add(&knftables.Rule{Chain: chainPre, Rule: "ip6 daddr . udp dport vmap @" + mapVIPs6, Comment: knftables.PtrTo(rulePre6)})
	tx.Add(&knftables.Rule{Chain: chainPost, Rule: fmt.Sprintf("meta mark & 0x%08x == 0x%08x masquerade", Mark, Mark), Comment: knftables.PtrTo(ruleMasq)})
}

// diff adds to tx what turns the table from have into want: removed
// listeners deleted, new and changed ones written again.
func diff(tx *knftables.Transaction, have, want map[Key]content) {
	for _, k := range sortedKeys(have) {
		if _, ok := want[k]; ok {
			continue
		}
		chain := chainName(k)
		_, _, vips := ipOf(k)
		tx.Delete(&knftables.Element{Map: vips, Key: []string{k.VIP.String(), strconv.Itoa(int(k.Port))}})
		tx.Flush(&knftables.Chain{Name: chain})
		tx.Delete(&knftables.Chain{Name: chain})
		tx.Delete(&knftables.Map{Name: membersMap(chain)})
		tx.Delete(&knftables.Map{Name: slotsMap(chain)})
	}
	for _, k := range sortedKeys(want) {
		if h, ok := have[k]; ok && slices.Equal(h, want[k]) {
			continue
		}
		addListener(tx, k, want[k])
	}
}

// addListener adds to tx the chain, maps and VIP element of listener k,
// emptied first when they exist, then filled with c.
func addListener(tx *knftables.Transaction, k Key, c content) {
	chain := chainName(k)
	ip, addrType, vips := ipOf(k)
	tx.Add(&knftables.Chain{Name: chain, Comment: knftables.PtrTo("UDP listener " + k.String())})
	tx.Add(&knftables.Map{Name: membersMap(chain), Type: addrType + " . inet_service : mark"})
	tx.Add(&knftables.Map{Name: slotsMap(chain), TypeOf: "numgen random mod 1 : " + ip + " daddr . udp dport"})
	tx.Flush(&knftables.Chain{Name: chain})
	tx.Flush(&knftables.Map{Name: membersMap(chain)})
	tx.Flush(&knftables.Map{Name: slotsMap(chain)})
	for _, m := range c {
		tx.Add(&knftables.Element{Map: membersMap(chain), Key: []string{m.addr.Addr().String(), strconv.Itoa(int(m.addr.Port()))},
			Value: []string{strconv.Itoa(int(m.weight))}})
	}
	slots := c.slots()
	for i, a := range slots {
		tx.Add(&knftables.Element{Map: slotsMap(chain), Key: []string{strconv.Itoa(i)}, Value: []string{a.Addr().String(), strconv.Itoa(int(a.Port()))}})
	}
	if len(slots) > 0 {
		tx.Add(&knftables.Rule{Chain: chain, Rule: fmt.Sprintf("meta mark set meta mark | 0x%08x", Mark), Comment: knftables.PtrTo(ruleMark)})
		tx.Add(&knftables.Rule{Chain: chain, Rule: fmt.Sprintf("meta l4proto udp dnat %s to numgen random mod %d map @%s", ip, len(slots), slotsMap(chain)),
			Comment: knftables.PtrTo(slotsPrefix + strconv.Itoa(len(slots)))})
	}
	// The same key always goes to the same chain: adding it again is a no-op.
	tx.Add(&knftables.Element{Map: vips, Key: []string{k.VIP.String(), strconv.Itoa(int(k.Port))}, Value: []string{"goto " + chain}})
}

func sortedKeys(m map[Key]content) []Key {
	keys := make([]Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int { return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Port, b.Port)) })
	return keys
}

// state is the table as read back, in a form to compare with expected.
type state struct {
	base      []string // comments of the base chains' rules, prerouting then postrouting
	listeners map[Key]listenerState
}

type listenerState struct {
	members []member
	slots   []netip.AddrPort
	rules   []string // comments
}

func (s state) equal(o state) bool {
	if !slices.Equal(s.base, o.base) || len(s.listeners) != len(o.listeners) {
		return false
	}
	for k, l := range s.listeners {
		ol, ok := o.listeners[k]
		if !ok || !slices.Equal(l.members, ol.members) || !slices.Equal(l.slots, ol.slots) || !slices.Equal(l.rules, ol.rules) {
			return false
		}
	}
	return true
}

// expected is the state the table has when it holds written.
func expected(written map[Key]content) state {
	s := state{base: []string{rulePre4, rulePre6, ruleMasq}, listeners: map[Key]listenerState{}}
	for k, c := range written {
		l := listenerState{members: slices.Clone(c), slots: c.slots()}
		if len(l.slots) > 0 {
			l.rules = []string{ruleMark, slotsPrefix + strconv.Itoa(len(l.slots))}
		}
		s.listeners[k] = l
	}
	return s
}

// state reads the table back: one nft run whatever its size.
func (t *Table) state(ctx context.Context) (state, error) {
	data, err := t.read(ctx)
	if err != nil {
		return state{}, err
	}
	return parseState(data)
}

// listTable runs nft -j list table inet npl-edge.
func listTable(ctx context.Context) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "nft", "-j", "list", "table", "inet", TableName)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nft -j list table inet %s: %w: %s", TableName, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// errParse is a listing the table's layout does not explain.
var errParse = errors.New("unexpected nft listing")

// parseState reads nft's JSON listing of the table.
func parseState(data []byte) (state, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return state{}, fmt.Errorf("%w: %v", errParse, err)
	}
	type object struct {
		Name    string            `json:"name"`
		Chain   string            `json:"chain"`
		Comment string            `json:"comment"`
		Elem    []json.RawMessage `json:"elem"`
	}
	maps := map[string][][2][]string{}
	rules := map[string][]string{}
	for _, o := range doc.Nftables {
		for kind, raw := range o {
			if kind != "map" && kind != "rule" {
				continue
			}
			var obj object
			if err := json.Unmarshal(raw, &obj); err != nil {
				return state{}, fmt.Errorf("%w: %s: %v", errParse, kind, err)
			}
			if kind == "rule" {
				rules[obj.Chain] = append(rules[obj.Chain], obj.Comment)
				continue
			}
			elems := [][2][]string{}
			for _, e := range obj.Elem {
				var pair []json.RawMessage
				if err := json.Unmarshal(e, &pair); err != nil || len(pair) != 2 {
					return state{}, fmt.Errorf("%w: map %s: element %s", errParse, obj.Name, e)
				}
				key, err1 := jsonValue(pair[0])
				val, err2 := jsonValue(pair[1])
				if err := errors.Join(err1, err2); err != nil {
					return state{}, fmt.Errorf("%w: map %s: %v", errParse, obj.Name, err)
				}
				elems = append(elems, [2][]string{key, val})
			}
			maps[obj.Name] = elems
		}
	}
	s := state{listeners: map[Key]listenerState{}}
	s.base = append(append(s.base, rules[chainPre]...), rules[chainPost]...)
	for _, vips := range []string{mapVIPs4, mapVIPs6} {
		for _, e := range maps[vips] {
			k, err := keyOf(e[0])
			if err != nil {
				return state{}, fmt.Errorf("map %s: %w", vips, err)
			}
			chain := chainName(k)
			if len(e[1]) != 1 || e[1][0] != "goto "+chain {
				return state{}, fmt.Errorf("%w: map %s: %s goes to %q, not to %s", errParse, vips, k, e[1], chain)
			}
			l := listenerState{rules: rules[chain]}
			enabled := map[netip.AddrPort]bool{}
			slots := make([]netip.AddrPort, len(maps[slotsMap(chain)]))
			for _, se := range maps[slotsMap(chain)] {
				i, err := strconv.Atoi(strings.Join(se[0], ""))
				if err != nil || i < 0 || i >= len(slots) {
					return state{}, fmt.Errorf("%w: map %s: slot %q", errParse, slotsMap(chain), se[0])
				}
				a, err := addrPortOf(se[1])
				if err != nil {
					return state{}, fmt.Errorf("map %s: %w", slotsMap(chain), err)
				}
				slots[i], enabled[a] = a, true
			}
			l.slots = slots
			for _, me := range maps[membersMap(chain)] {
				a, err := addrPortOf(me[0])
				if err != nil {
					return state{}, fmt.Errorf("map %s: %w", membersMap(chain), err)
				}
				w, err := strconv.ParseInt(strings.Join(me[1], ""), 10, 32)
				if err != nil {
					return state{}, fmt.Errorf("%w: map %s: weight %q", errParse, membersMap(chain), me[1])
				}
				l.members = append(l.members, member{addr: a, weight: int32(w), enabled: enabled[a]})
			}
			slices.SortFunc(l.members, func(a, b member) int { return a.addr.Compare(b.addr) })
			s.listeners[k] = l
		}
	}
	return s, nil
}

// jsonValue flattens a JSON element key or value of nft: a string, a
// number, a concatenation, a verdict ({"goto": {"target": c}} is
// "goto c"), or any of them wrapped with a comment.
func jsonValue(raw json.RawMessage) ([]string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return flatten(v)
}

func flatten(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case float64:
		return []string{strconv.FormatInt(int64(x), 10)}, nil
	case map[string]any:
		if c, ok := x["concat"].([]any); ok {
			var out []string
			for _, e := range c {
				f, err := flatten(e)
				if err != nil {
					return nil, err
				}
				out = append(out, f...)
			}
			return out, nil
		}
		if e, ok := x["elem"].(map[string]any); ok {
			return flatten(e["val"])
		}
		for _, verdict := range []string{"goto", "jump"} {
			if t, ok := x[verdict].(map[string]any); ok {
				if target, ok := t["target"].(string); ok {
					return []string{verdict + " " + target}, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("value %v", v)
}

func addrPortOf(s []string) (netip.AddrPort, error) {
	if len(s) != 2 {
		return netip.AddrPort{}, fmt.Errorf("%w: %q is not an address and port", errParse, s)
	}
	a, err := netip.ParseAddr(s[0])
	p, err2 := strconv.ParseUint(s[1], 10, 16)
	if err != nil || err2 != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: %q is not an address and port", errParse, s)
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(p)), nil
}

func keyOf(s []string) (Key, error) {
	a, err := addrPortOf(s)
	if err != nil {
		return Key{}, err
	}
	return Key{a.Addr(), int32(a.Port())}, nil
}

// flushConntrack deletes the conntrack entries of UDP flows from listener
// k (original destination) to member m (reply source).
func flushConntrack(ctx context.Context, k Key, m netip.AddrPort) error {
	f := conntrack.UDPFlows{IPv6: !k.VIP.Is4(), Dst: k.VIP, DstPort: int(k.Port), ReplySrc: m}
	if err := conntrack.DeleteUDP(ctx, f); err != nil {
		return fmt.Errorf("flush the UDP flows of listener %s to member %s: %w", k, m, err)
	}
	return nil
}
