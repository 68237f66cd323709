package datapath_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/internal/netns"
)

// Addresses of the traffic test, inside the private namespace: the outer
// namespace is the node, a second one is the Pod, joined by a veth.
const (
	nodeIP   = "198.18.0.1"
	podIP    = "198.18.0.2"
	nodePort = 61000
	podPort  = 8080
)

// newPod creates the Pod namespace, wires it to the node with a veth and
// returns its path.
func newPod(t testing.TB) string {
	t.Helper()
	pod := newNetNS(t)
	run(t, "ip", "link", "add", "npl-node0", "type", "veth", "peer", "name", "npl-pod0", "netns", pod)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "npl-node0").Run() })
	run(t, "ip", "addr", "add", nodeIP+"/24", "dev", "npl-node0")
	run(t, "ip", "link", "set", "npl-node0", "up")
	in := func(args ...string) { run(t, "nsenter", append([]string{"--net=" + pod, "ip"}, args...)...) }
	in("addr", "add", podIP+"/24", "dev", "npl-pod0")
	in("link", "set", "npl-pod0", "up")
	in("link", "set", "lo", "up")
	in("route", "add", "default", "via", nodeIP)
	// Hairpin traffic leaves the node by the interface it came in on. This is
	// the private namespace's sysctl, not the host's.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		t.Fatalf("enable forwarding in the private namespace: %v", err)
	}
	return pod
}

// serveRemoteAddr listens on podIP:podPort in the Pod and answers each
// connection with the client address it sees.
func serveRemoteAddr(t testing.TB, pod string) {
	t.Helper()
	var ln net.Listener
	err := netns.Do(pod, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(podIP, fmt.Sprint(podPort)))
		return err
	})
	if err != nil {
		t.Fatalf("listen in the Pod: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, c.RemoteAddr().(*net.TCPAddr).IP)
			c.Close()
		}
	}()
}

// askPeer connects with dial and returns the client address the Pod saw.
func askPeer(dial func() (net.Conn, error)) (string, error) {
	c, err := dial()
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(deadline))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func TestDatapath_trafficToNodePortReachesThePod(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { trafficToNodePortReachesThePod(t, b.new(t, v4)) })
	}
}

func trafficToNodePortReachesThePod(t *testing.T, ipt datapath.Datapath) {
	pod := newPod(t)
	serveRemoteAddr(t, pod)
	// The agent holds the node port with a socket; DNAT must win over it.
	reservation, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", nodePort))
	if err != nil {
		t.Fatal(err)
	}
	defer reservation.Close()

	target := net.JoinHostPort(nodeIP, fmt.Sprint(nodePort))
	mapping := datapath.Mapping{NodePort: nodePort, Protocol: "tcp", PodIP: netip.MustParseAddr(podIP), PodPort: podPort, Pod: "ns/web"}
	fromNode := func() (net.Conn, error) { return net.DialTimeout("tcp4", target, 5*time.Second) }
	fromPod := func() (conn net.Conn, err error) {
		err = netns.Do(pod, func() error {
			conn, err = net.DialTimeout("tcp4", target, 2*time.Second)
			return err
		})
		return conn, err
	}

	ctx := context.Background()
	// Without a hairpin source the Pod cannot reach itself through the node:
	// the masquerade rule is what makes the next step work.
	if err := ipt.Sync(ctx, datapath.Desired{Mappings: []datapath.Mapping{mapping}, PortRange: [2]int{61000, 62000}}); err != nil {
		t.Fatal(err)
	}
	if peer, err := askPeer(fromPod); err == nil {
		t.Fatalf("the Pod reached itself through %s without masquerade (it saw %s); the test cannot tell whether the hairpin rule works", target, peer)
	}

	if err := ipt.Sync(ctx, datapath.Desired{
		Mappings:       []datapath.Mapping{mapping},
		HairpinSources: []netip.Addr{netip.MustParseAddr(podIP)},
		PortRange:      [2]int{61000, 62000},
	}); err != nil {
		t.Fatal(err)
	}
	peer, err := askPeer(fromNode)
	if err != nil {
		t.Fatalf("node-local client to %s: %v", target, err)
	}
	if peer != nodeIP {
		t.Errorf("the Pod saw a node-local client as %s, want %s (no SNAT for node-local clients)", peer, nodeIP)
	}
	peer, err = askPeer(fromPod)
	if err != nil {
		t.Fatalf("Pod to itself through %s: %v", target, err)
	}
	if peer != nodeIP {
		t.Errorf("the Pod saw its own hairpin connection as %s, want the node address %s (masqueraded)", peer, nodeIP)
	}
}

// kubeProxyNFT is a table shaped like kube-proxy's nftables mode: a nat
// prerouting and output chain at dstnat priority that sends packets to local
// addresses through a verdict map of NodePorts. NodePort 30080 goes to the
// test's Pod.
var kubeProxyNFT = fmt.Sprintf(`
table ip kube-proxy {
	map service-nodeports {
		type inet_proto . inet_service : verdict
		elements = { tcp . 30080 : goto svc-web }
	}
	chain svc-web {
		meta l4proto tcp dnat to %s:%d
	}
	chain nodeports {
		meta l4proto . th dport vmap @service-nodeports
	}
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		fib daddr type local jump nodeports
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		fib daddr type local jump nodeports
	}
}
`, podIP, podPort)

// TestDatapath_coexistsWithKubeProxy: with kube-proxy's NodePort rules on the
// node, in iptables mode (a DNAT in the nat table's PREROUTING and OUTPUT)
// or nftables mode (its own table), a NodePort and an npl node port both
// reach their Pod from the node and from outside it, whichever npl backend
// runs: neither shadows the other.
func TestDatapath_coexistsWithKubeProxy(t *testing.T) {
	for _, kp := range []string{"iptables", "nftables"} {
		for _, b := range backends {
			t.Run("kube-proxy="+kp+"/npl="+b.name, func(t *testing.T) {
				dp := b.new(t, v4)
				pod := newPod(t)
				serveRemoteAddr(t, pod)
				switch kp {
				case "iptables":
					for _, chain := range []string{"PREROUTING", "OUTPUT"} {
						spec := []string{"-w", "5", "-t", "nat", "-A", chain, "-p", "tcp", "--dport", "30080", "-m", "addrtype", "--dst-type", "LOCAL",
							"-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", podIP, podPort)}
						run(t, "iptables", spec...)
						t.Cleanup(func() { spec[3] = "-D"; _ = exec.Command("iptables", spec...).Run() })
					}
				case "nftables":
					cmd := exec.Command("nft", "-f", "-")
					cmd.Stdin = strings.NewReader(kubeProxyNFT)
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("kube-proxy's table: %v: %s", err, out)
					}
					t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "ip", "kube-proxy").Run() })
				}
				ctx := context.Background()
				d := datapath.Desired{Mappings: []datapath.Mapping{{NodePort: nodePort, Protocol: "tcp", PodIP: netip.MustParseAddr(podIP), PodPort: podPort, Pod: "ns/web"}}}
				if err := dp.Sync(ctx, d); err != nil {
					t.Fatal(err)
				}
				client := newClient(t)
				for _, port := range []int{30080, nodePort} {
					target := net.JoinHostPort(nodeIP, fmt.Sprint(port))
					dial := func() (net.Conn, error) { return net.DialTimeout("tcp4", target, 5*time.Second) }
					if _, err := askPeer(dial); err != nil {
						t.Errorf("from the node to %s: %v", target, err)
					}
					err := netns.Do(client, func() error {
						peer, err := askPeer(dial)
						if err == nil && peer != clientIP {
							err = fmt.Errorf("the Pod saw the client as %s, want %s", peer, clientIP)
						}
						return err
					})
					if err != nil {
						t.Errorf("from outside the node to %s: %v", target, err)
					}
				}
				if drift, err := dp.Check(ctx, d); err != nil || drift {
					t.Errorf("Check beside kube-proxy's rules = drift %v, err %v; want none", drift, err)
				}
			})
		}
	}
}

// TestNFTables_aDifferenceOverNetlinkCarriesTraffic: the mappings a
// difference adds over the netlink socket, with the key and value bytes
// nft would write, DNAT connections, with no command run; a mapping
// retargeted by a difference (deleted and added again in one transaction)
// sends new connections to its new target.
func TestNFTables_aDifferenceOverNetlinkCarriesTraffic(t *testing.T) {
	nft := newNFTables(t, v4)
	pod := newPod(t)
	serveRemoteAddr(t, pod)
	ctx := context.Background()
	target := net.JoinHostPort(nodeIP, fmt.Sprint(nodePort))
	fromNode := func() (net.Conn, error) { return net.DialTimeout("tcp4", target, 5*time.Second) }

	elsewhere := datapath.Mapping{NodePort: nodePort, Protocol: "tcp", PodIP: netip.MustParseAddr("203.0.113.9"), PodPort: podPort, Pod: "ns/gone"}
	if err := nft.Sync(ctx, datapath.Desired{Mappings: []datapath.Mapping{elsewhere}, PortRange: [2]int{61000, 62000}}); err != nil {
		t.Fatal(err)
	}
	execs := nft.Stats().Execs
	mapping := datapath.Mapping{NodePort: nodePort, Protocol: "tcp", PodIP: netip.MustParseAddr(podIP), PodPort: podPort, Pod: "ns/web"}
	other := datapath.Mapping{NodePort: nodePort + 1, Protocol: "udp", PodIP: netip.MustParseAddr(podIP), PodPort: 53, Pod: "ns/web"}
	d := datapath.Desired{Mappings: []datapath.Mapping{mapping, other}, PortRange: [2]int{61000, 62000}}
	if err := nft.Sync(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := nft.Stats().Execs - execs; got != 0 {
		t.Errorf("a difference ran %d commands, want none", got)
	}
	assertTable(t, v4, d)
	assertNoNFTDrift(t, nft, d)
	if peer, err := askPeer(fromNode); err != nil || peer != nodeIP {
		t.Errorf("node-local client to %s: the Pod saw %q, %v; want %s", target, peer, err, nodeIP)
	}
}
