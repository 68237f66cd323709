package udp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/edge/udp"
	"github.com/nodeportlocal/npl/internal/netns"
	"github.com/nodeportlocal/npl/internal/netnstest"
	"github.com/nodeportlocal/npl/lbmodel"
)

// TestMain runs the tests in a private network namespace: it is the edge.
func TestMain(m *testing.M) {
	netnstest.Main(m, "nft", "conntrack", "ip", "sysctl")
}

// bed is the edge (the test's private namespace) with a bridge
// 198.18.210.0/24, a client namespace and member namespaces on it, and the
// VIPs of 198.18.200.0/24 local on the edge, as test/harness/edgebed has them.
type bed struct {
	client   string
	members  map[string]netip.AddrPort // name -> IPv4 address of its UDP echo
	members6 map[string]netip.AddrPort // name -> IPv6 address of its UDP echo
}

var (
	vip  = netip.MustParseAddr("198.18.200.1")
	vip6 = netip.MustParseAddr("fd00:198:200::1")
)

// beds numbers the beds, so that the links of one are never those of the
// previous, whose namespaces may linger a moment.
var beds int

func run(t *testing.T, ns string, name string, args ...string) {
	t.Helper()
	err := netns.Do(ns, func() error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func newBed(t *testing.T, members ...string) *bed {
	netnstest.Require(t, "programs nftables and sends UDP through it")
	b := &bed{members: map[string]netip.AddrPort{}, members6: map[string]netip.AddrPort{}}
	beds++
	run(t, "", "ip", "link", "add", "br0", "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "br0").Run() })
	run(t, "", "ip", "addr", "add", "198.18.210.1/24", "dev", "br0")
	run(t, "", "ip", "addr", "add", "fd00:198:210::1/64", "dev", "br0", "nodad")
	run(t, "", "ip", "link", "set", "br0", "up")
	run(t, "", "ip", "route", "add", "local", "198.18.200.0/24", "dev", "lo")
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", "local", "198.18.200.0/24", "dev", "lo").Run() })
	run(t, "", "ip", "-6", "route", "add", "local", "fd00:198:200::/120", "dev", "lo")
	t.Cleanup(func() { _ = exec.Command("ip", "-6", "route", "del", "local", "fd00:198:200::/120", "dev", "lo").Run() })
	run(t, "", "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	attach := func(i int, name string) string {
		ns := netnstest.NewNetNS(t)
		peer := fmt.Sprintf("v%d-%d", beds, i)
		run(t, "", "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns)
		run(t, "", "ip", "link", "set", peer, "master", "br0", "up")
		addr := fmt.Sprintf("198.18.210.%d", 10+i)
		run(t, ns, "ip", "addr", "add", addr+"/24", "dev", "eth0")
		run(t, ns, "ip", "addr", "add", fmt.Sprintf("fd00:198:210::%d/64", 10+i), "dev", "eth0", "nodad")
		run(t, ns, "ip", "link", "set", "eth0", "up")
		run(t, ns, "ip", "link", "set", "lo", "up")
		run(t, ns, "ip", "route", "add", "default", "via", "198.18.210.1")
		run(t, ns, "ip", "-6", "route", "add", "default", "via", "fd00:198:210::1")
		return ns
	}
	b.client = attach(0, "client")
	for i, name := range members {
		ns := attach(i+1, name)
		var pc net.PacketConn
		if err := netns.Do(ns, func() (err error) { pc, err = net.ListenPacket("udp", ":5353"); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		go func() {
			buf := make([]byte, 512)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(append([]byte(name+":"), buf[:n]...), from)
			}
		}()
		b.members[name] = netip.MustParseAddrPort(fmt.Sprintf("198.18.210.%d:5353", 11+i))
		b.members6[name] = netip.MustParseAddrPort(fmt.Sprintf("[fd00:198:210::%d]:5353", 11+i))
	}
	return b
}

// flow is one client socket: a UDP flow from its own source port.
type flow struct{ c *net.UDPConn }

func (b *bed) dial(t *testing.T, port int) *flow {
	t.Helper()
	return b.dialVIP(t, vip, port)
}

func (b *bed) dialVIP(t *testing.T, vip netip.Addr, port int) *flow {
	t.Helper()
	var c *net.UDPConn
	err := netns.Do(b.client, func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip, uint16(port))))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &flow{c}
}

// ask sends one datagram and returns the name of the member that answered.
func (f *flow) ask() (string, error) {
	if _, err := f.c.Write([]byte("ping")); err != nil {
		return "", err
	}
	_ = f.c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 512)
	n, err := f.c.Read(buf)
	if err != nil {
		return "", err
	}
	name, _, _ := strings.Cut(string(buf[:n]), ":")
	return name, nil
}

func (b *bed) member(name string, weight int32, enabled bool) lbmodel.Member {
	a := b.members[name]
	return lbmodel.Member{IP: a.Addr().String(), Port: int32(a.Port()), Weight: weight, Enabled: enabled}
}

func newTable(t *testing.T) *udp.Table {
	tab, err := udp.New()
	if err != nil {
		t.Fatal(err)
	}
	tab.VerifyEvery = 0 // read back at every Sync: drift repaired at once
	t.Cleanup(func() { _ = tab.Delete(context.Background()) })
	return tab
}

func TestTable_weightsDrainRemoveAndDelete(t *testing.T) {
	b := newBed(t, "a", "b")
	ctx := context.Background()
	tab := newTable(t)
	l := udp.Listener{VIP: vip, Port: 53, Members: []lbmodel.Member{b.member("a", 70, true), b.member("b", 30, true)}}
	if changed, err := tab.Sync(ctx, []udp.Listener{l}); err != nil || !changed {
		t.Fatalf("Sync: changed %v, %v", changed, err)
	}
	if changed, err := tab.Sync(ctx, []udp.Listener{l}); err != nil || changed {
		t.Fatalf("Sync of the same listeners: changed %v, %v; want nothing written", changed, err)
	}
	served, err := tab.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := served[udp.Key{VIP: vip, Port: 53}]; fmt.Sprint(got) != fmt.Sprint(l.Members) {
		t.Fatalf("Served: %v, want %v", got, l.Members)
	}

	// 70/30: 500 new flows, each from its own source port.
	const flows = 500
	counts := map[string]int{}
	for range flows {
		name, err := b.dial(t, 53).ask()
		if err != nil {
			t.Fatalf("a new flow to the VIP: %v", err)
		}
		counts[name]++
	}
	t.Logf("500 flows at weights 70/30: %v", counts)
	// Binomial, sd ≈ 10: five of them either side.
	if counts["a"] < 300 || counts["a"] > 400 || counts["a"]+counts["b"] != flows {
		t.Fatalf("flows per member %v; want about 350/150", counts)
	}

	// A flow stays on its member.
	var onB *flow
	for onB == nil {
		f := b.dial(t, 53)
		if name, err := f.ask(); err != nil {
			t.Fatal(err)
		} else if name == "b" {
			onB = f
		}
	}
	for range 5 {
		if name, err := onB.ask(); err != nil || name != "b" {
			t.Fatalf("a flow moved: answer from %q, %v; want b", name, err)
		}
	}

	// b drains: no new flow goes to it; its flow lives on.
	l.Members[1].Enabled = false
	if _, err := tab.Sync(ctx, []udp.Listener{l}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if name, err := b.dial(t, 53).ask(); err != nil || name != "a" {
			t.Fatalf("a new flow while b drains: answer from %q, %v; want a", name, err)
		}
	}
	if name, err := onB.ask(); err != nil || name != "b" {
		t.Fatalf("b's flow while b drains: answer from %q, %v; want b", name, err)
	}
	if served, err = tab.Served(ctx); err != nil {
		t.Fatalf("Served while b drains: %v", err)
	}
	if got := served[udp.Key{VIP: vip, Port: 53}]; fmt.Sprint(got) != fmt.Sprint(l.Members) {
		t.Fatalf("Served while b drains: %v, want %v", got, l.Members)
	}

	// Drift: a member's slot deleted by hand is back after the next Sync.
	run(t, "", "nft", "flush", "map", "inet", udp.TableName, "s-u4-c612c801-53")
	if changed, err := tab.Sync(ctx, []udp.Listener{l}); err != nil || !changed {
		t.Fatalf("Sync after drift: changed %v, %v; want the table written", changed, err)
	}
	if name, err := b.dial(t, 53).ask(); err != nil || name != "a" {
		t.Fatalf("after the repair: answer from %q, %v; want a", name, err)
	}

	// b removed: its flow's conntrack entry goes, its next datagram is a
	// new flow to a.
	l.Members = l.Members[:1]
	if _, err := tab.Sync(ctx, []udp.Listener{l}); err != nil {
		t.Fatal(err)
	}
	if name, err := onB.ask(); err != nil || name != "a" {
		t.Fatalf("b's flow after b was removed: answer from %q, %v; want a", name, err)
	}

	// The listener removed: nothing answers on the VIP, and its flows are gone.
	if _, err := tab.Sync(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if name, err := onB.ask(); err == nil {
		t.Fatalf("after the listener was removed: answer from %q; want none", name)
	}
	out, _ := exec.Command("nft", "list", "table", "inet", udp.TableName).CombinedOutput()
	if strings.Contains(string(out), "u4-") {
		t.Fatalf("the removed listener's chain or maps are left:\n%s", out)
	}
	if err := tab.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nft", "list", "table", "inet", udp.TableName).CombinedOutput(); err == nil {
		t.Fatalf("the table is left after Delete:\n%s", out)
	}
}

func TestTable_twoListenersAndAWholeRewrite(t *testing.T) {
	b := newBed(t, "a", "b")
	ctx := context.Background()
	tab := newTable(t)
	ls := []udp.Listener{
		{VIP: vip, Port: 53, Members: []lbmodel.Member{b.member("a", 0, true)}},
		{VIP: vip, Port: 54, Members: []lbmodel.Member{b.member("b", 0, true)}},
	}
	if _, err := tab.Sync(ctx, ls); err != nil {
		t.Fatal(err)
	}
	for port, want := range map[int]string{53: "a", 54: "b"} {
		if name, err := b.dial(t, port).ask(); err != nil || name != want {
			t.Fatalf("port %d: answer from %q, %v; want %s", port, name, err, want)
		}
	}
	// Someone deletes the table: the next Sync writes it whole.
	run(t, "", "nft", "delete", "table", "inet", udp.TableName)
	if changed, err := tab.Sync(ctx, ls); err != nil || !changed {
		t.Fatalf("Sync after the table was deleted: changed %v, %v", changed, err)
	}
	if name, err := b.dial(t, 54).ask(); err != nil || name != "b" {
		t.Fatalf("port 54 after the rewrite: answer from %q, %v; want b", name, err)
	}
	// A listener without enabled members refuses (port unreachable).
	ls[1].Members[0].Enabled = false
	if _, err := tab.Sync(ctx, ls); err != nil {
		t.Fatal(err)
	}
	if name, err := b.dial(t, 54).ask(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("port 54 with its one member draining: answer %q, %v; want the port refused", name, err)
	}
}

func TestTable_ipv6Listener(t *testing.T) {
	b := newBed(t, "a", "b")
	ctx := context.Background()
	tab := newTable(t)
	member6 := func(name string, enabled bool) lbmodel.Member {
		a := b.members6[name]
		return lbmodel.Member{IP: a.Addr().String(), Port: int32(a.Port()), Enabled: enabled}
	}
	l := udp.Listener{VIP: vip6, Port: 53, Members: []lbmodel.Member{member6("a", true), member6("b", true)}}
	if _, err := tab.Sync(ctx, []udp.Listener{l}); err != nil {
		t.Fatal(err)
	}
	// Neighbour discovery on the new links: the first flows may take a moment.
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, last = b.dialVIP(t, vip6, 53).ask(); last == nil {
			break
		}
	}
	if last != nil {
		out, _ := exec.Command("sh", "-c", "nft list table inet npl-edge; conntrack -L -f ipv6; ip -6 neigh").CombinedOutput()
		t.Fatalf("no IPv6 flow answered in 10s: %v\n%s", last, out)
	}
	counts := map[string]int{}
	for range 60 {
		name, err := b.dialVIP(t, vip6, 53).ask()
		if err != nil {
			t.Fatalf("a new flow to [%s]:53: %v", vip6, err)
		}
		counts[name]++
	}
	t.Logf("60 IPv6 flows at equal weights: %v", counts)
	if counts["a"] == 0 || counts["b"] == 0 {
		t.Fatalf("flows per member %v; want both", counts)
	}
	l.Members[1].Enabled = false
	if _, err := tab.Sync(ctx, []udp.Listener{l}); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if name, err := b.dialVIP(t, vip6, 53).ask(); err != nil || name != "a" {
			t.Fatalf("a new IPv6 flow while b drains: answer from %q, %v; want a", name, err)
		}
	}
	served, err := tab.Served(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := served[udp.Key{VIP: vip6, Port: 53}]; fmt.Sprint(got) != fmt.Sprint(l.Members) {
		t.Fatalf("Served: %v, want %v", got, l.Members)
	}
}
