package haproxy

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/edge"
	"github.com/nodeportlocal/npl/edge/udp"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// startUDPEcho starts a UDP echo named name in the test namespace on the
// bridge address: it answers "<name>: <datagram>". It returns its member.
func startUDPEcho(t *testing.T, ip netip.Addr, name string) lbmodel.Member {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(name+": "+string(buf[:n])), from)
		}
	}()
	return lbmodel.Member{IP: ip.String(), Port: int32(pc.LocalAddr().(*net.UDPAddr).Port), Enabled: true}
}

// askNew sends one datagram on a new flow and returns who answered.
func askNew(ctx context.Context, b *edgebed.Bed, addr string) (string, error) {
	f, err := b.DialUDP(ctx, addr)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return f.Ask("ping")
}

// udpChains lists the listener chains of the edge's nftables table.
func udpChains(t *testing.T, e *edgebed.EdgeHost) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", e.Netns, "nft", "list", "table", "inet", udp.TableName).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table inet %s in the edge: %v: %s", udp.TableName, err, out)
	}
	var chains []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "chain" && (strings.HasPrefix(f[1], "u4-") || strings.HasPrefix(f[1], "u6-")) {
			chains = append(chains, f[1])
		}
	}
	return chains
}

func TestProvider_udpListenerThroughNFTablesWithWeightsAndDrain(t *testing.T) {
	b, bs := newBed(t)
	if st := status(t, b); st.UDP != edge.UDPNFTables {
		t.Fatalf("the edge says udp %q; want %q (--udp auto, and the edge namespace forwards)", st.UDP, edge.UDPNFTables)
	}
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	lb := model("dns", 80, startBackends(t, bs, "web", 1))
	a, c := startUDPEcho(t, bridgeIP, "a"), startUDPEcho(t, bridgeIP, "b")
	a.Weight, c.Weight = 70, 30
	lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: 53, Protocol: lbmodel.UDP,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName(lb.Name, lbmodel.UDP, 53), Members: lbmodel.SortMembers([]lbmodel.Member{a, c})}})
	lbmodel.SortListeners(lb.Listeners)
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if len(st.Warnings) != 0 {
		t.Fatalf("warnings %q; want none: the edge serves UDP", st.Warnings)
	}
	addr := net.JoinHostPort(st.VIPs[0], "53")
	waitAnswers(t, b, edgebed.URL(st.VIPs[0], 80), []string{"web-0"})

	// 500 new flows at weights 70/30.
	counts := map[string]int{}
	for range 500 {
		name, err := askNew(ctx, b, addr)
		if err != nil {
			t.Fatalf("a new flow to %s: %v", addr, err)
		}
		counts[name]++
	}
	t.Logf("500 UDP flows through the VIP at weights 70/30: %v", counts)
	if counts["a"] < 300 || counts["a"] > 400 || counts["a"]+counts["b"] != 500 {
		t.Fatalf("flows per member %v; want about 350/150 (binomial, sd 10)", counts)
	}

	// List reads the listener back from the table: the model exactly.
	got := listOne(t, p, lb.Name)
	want := lb.Clone()
	want.VIPs = st.VIPs
	if diff := cmp.Diff(want.Listeners, got.Listeners); diff != "" {
		t.Fatalf("listed listeners (-want +got):\n%s", diff)
	}

	// b drains: its flow lives on, new flows go to a only.
	var onB *edgebed.UDPFlow
	for onB == nil {
		f, err := b.DialUDP(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		if name, err := f.Ask("ping"); err != nil {
			t.Fatal(err)
		} else if name == "b" {
			onB = f
			defer f.Close()
		} else {
			f.Close()
		}
	}
	for i, m := range lb.Listeners[1].Pool.Members {
		if m.Port == c.Port {
			lb.Listeners[1].Pool.Members[i].Enabled = false
		}
	}
	if _, err := p.Ensure(ctx, lb); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if name, err := askNew(ctx, b, addr); err != nil || name != "a" {
			t.Fatalf("a new flow while b drains: answer from %q, %v; want a", name, err)
		}
	}
	if name, err := onB.Ask("still there"); err != nil || name != "b" {
		t.Fatalf("b's flow while b drains: answer from %q, %v; want b", name, err)
	}
	got = listOne(t, p, lb.Name)
	if diff := cmp.Diff(lb.Listeners, got.Listeners); diff != "" {
		t.Fatalf("listed listeners while b drains (-want +got):\n%s", diff)
	}

	// Deleted: the table has no listener left, nothing answers on the VIP.
	if err := p.Delete(ctx, lb.Name, lbmodel.L4); err != nil {
		t.Fatal(err)
	}
	if chains := udpChains(t, b.Edges[0]); len(chains) != 0 {
		t.Fatalf("the table still has listener chains %q after the delete", chains)
	}
	if name, err := askNew(ctx, b, addr); err == nil {
		t.Fatalf("after the delete: answer from %q; want none", name)
	}
}

func TestProvider_udpListenersAreWarnedAboutWhenTheEdgeServesNoUDP(t *testing.T) {
	b, bs := newBedOptions(t, edgebed.Options{UDP: "off"})
	if st := status(t, b); st.UDP != edge.UDPOff {
		t.Fatalf("the edge says udp %q; want %q (--udp off)", st.UDP, edge.UDPOff)
	}
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	lb := model("dns", 80, startBackends(t, bs, "dns", 1))
	lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: 53, Protocol: lbmodel.UDP,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName(lb.Name, lbmodel.UDP, 53), Members: []lbmodel.Member{startUDPEcho(t, bridgeIP, "a")}}})
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], "UDP/53") {
		t.Fatalf("warnings %q; want one naming UDP/53", st.Warnings)
	}
	t.Logf("warning: %s", st.Warnings[0])
	waitAnswers(t, b, edgebed.URL(st.VIPs[0], 80), []string{"dns-0"})
	got := listOne(t, p, lb.Name)
	if len(got.Listeners) != 1 || got.Listeners[0].Protocol != lbmodel.TCP {
		t.Fatalf("listed listeners %+v; want the TCP one only", got.Listeners)
	}
	if name, err := askNew(ctx, b, net.JoinHostPort(st.VIPs[0], "53")); err == nil {
		t.Fatalf("UDP to the VIP answered by %q; want nothing served", name)
	}
}

// TestProvider_udpTableRepairedAndKeptAcrossRestarts: the table deleted by
// hand in the edge is written again at the next resync (1 s in the bed);
// npl-edge stopped, the table keeps serving; npl-edge started again, it
// writes the table whole from its saved state and List is the model again.
func TestProvider_udpTableRepairedAndKeptAcrossRestarts(t *testing.T) {
	b, _ := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	name := lbmodel.LoadBalancerName(testCluster, "ns", "dns")
	lb := &lbmodel.LoadBalancer{Name: name, Service: "ns/dns", Listeners: []lbmodel.Listener{{Port: 53, Protocol: lbmodel.UDP,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.UDP, 53), Members: []lbmodel.Member{startUDPEcho(t, bridgeIP, "a")}}}}}
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(st.VIPs[0], "53")
	if who, err := askNew(ctx, b, addr); err != nil || who != "a" {
		t.Fatalf("answer from %q, %v; want a", who, err)
	}

	if out, err := exec.Command("ip", "netns", "exec", b.EdgeNetns, "nft", "delete", "table", "inet", udp.TableName).CombinedOutput(); err != nil {
		t.Fatalf("delete the table by hand: %v: %s", err, out)
	}
	start := time.Now()
	for {
		if who, err := askNew(ctx, b, addr); err == nil && who == "a" {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatal("the table deleted by hand was not written again within 15 s")
		}
	}
	t.Logf("the table deleted by hand served again within %v (resync period 1 s; a try without answer waits 2 s)", time.Since(start).Round(time.Millisecond))

	b.StopEdge()
	if who, err := askNew(ctx, b, addr); err != nil || who != "a" {
		t.Fatalf("with npl-edge stopped: answer from %q, %v; want a (the table stays)", who, err)
	}
	if err := b.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	if who, err := askNew(ctx, b, addr); err != nil || who != "a" {
		t.Fatalf("after npl-edge started again: answer from %q, %v; want a", who, err)
	}
	got := listOne(t, p, name)
	if diff := cmp.Diff(lb.Listeners, got.Listeners); diff != "" {
		t.Fatalf("listed after the restart (-want +got):\n%s", diff)
	}
}

// TestProvider_gatewayUDPListener: a Gateway's load balancer with an HTTP
// listener (HAProxy) and a UDP listener (UDPRoute, nftables) on one VIP:
// both served, and List gives both back with the UDP pool's weights.
func TestProvider_gatewayUDPListener(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	name := lbmodel.GatewayLoadBalancerName(testCluster, "ns", "gw")
	web := startBackends(t, bs, "web", 1)
	a, c := startUDPEcho(t, bridgeIP, "a"), startUDPEcho(t, bridgeIP, "b")
	c.Weight = 3
	pool := lbmodel.PoolName(name, lbmodel.UDP, 5353)
	lb := &lbmodel.LoadBalancer{Name: name, Gateway: "ns/gw", Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP},
			{Port: 5353, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: pool, Members: lbmodel.SortMembers([]lbmodel.Member{a, c})}}},
		Pools: []lbmodel.Pool{{Name: name + "-web", Members: web}},
		HTTP:  &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}, DefaultPool: name + "-web"}}
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if len(st.Warnings) != 0 {
		t.Fatalf("warnings %q; want none", st.Warnings)
	}
	waitAnswers(t, b, edgebed.URL(st.VIPs[0], 80), []string{"web-0"})
	counts := map[string]int{}
	for range 80 {
		name, err := askNew(ctx, b, net.JoinHostPort(st.VIPs[0], "5353"))
		if err != nil {
			t.Fatal(err)
		}
		counts[name]++
	}
	t.Logf("80 UDP flows to the Gateway's UDP listener at weights 1/3: %v", counts)
	if counts["a"] == 0 || counts["b"] <= counts["a"] {
		t.Fatalf("flows per member %v; want both, b about three times a", counts)
	}
	got := listOne(t, p, name)
	if diff := cmp.Diff(lb.Listeners, got.Listeners); diff != "" {
		t.Fatalf("listed listeners (-want +got):\n%s", diff)
	}
	if got.Kind != lbmodel.L7 || got.Gateway != "ns/gw" {
		t.Fatalf("listed %s kind %q gateway %q; want L7 of ns/gw", got.Name, got.Kind, got.Gateway)
	}
}
