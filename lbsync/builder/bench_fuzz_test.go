package builder

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

// benchInput is a Service with a named TCP port and a UDP port, backed by n
// Ready Pods spread over 50 nodes, each mapped for both ports.
func benchInput(n int) Input {
	svc := service(port(corev1.ProtocolTCP, 80, "http"), port(corev1.ProtocolUDP, 53, 5353))
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		nodeIP := fmt.Sprintf("198.18.0.%d", 10+i%50)
		pods = append(pods, pod(fmt.Sprintf("web-%d", i), npl(
			entry(8080, nodeIP, 61000+i, "tcp"),
			entry(5353, nodeIP, 62000+i, "udp"),
		)))
	}
	return Input{ClusterName: testCluster, Service: svc, Pods: pods}
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{10, 250} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			in := benchInput(n)
			b.ReportAllocs()
			for b.Loop() {
				lb, r := Build(in)
				if r.ReadyBackends != 2*n || len(lb.Listeners) != 2 {
					b.Fatalf("unexpected model: %d ready backends, %d listeners", r.ReadyBackends, len(lb.Listeners))
				}
			}
		})
	}
}

// FuzzBuild feeds arbitrary annotation values to Build (seeds in
// testdata/fuzz/FuzzBuild). Whatever the value, Build must not panic, must
// ignore a value that contract.Parse rejects, and must otherwise give each
// listener, under its documented pool name, exactly the members the test
// derives itself from the entries: the other Pod's, plus the fuzzed Pod's
// entries of the wanted family, protocol and target port, at their canonical
// address, without duplicates, in numeric IP then port order.
func FuzzBuild(f *testing.F) {
	svc := service(port(corev1.ProtocolTCP, 80, "http"), port(corev1.ProtocolUDP, 53, 5353))
	other := pod("other", npl(entry(8080, "198.18.0.99", 61999, "tcp"), entry(8080, "2001:db8::99", 61999, "tcp")))
	// What each listener selects, and its pool name written out:
	// <cluster>--<namespace>-<service>-<PROTO>-<port>.
	listeners := []struct {
		proto   string
		podPort int
		pool    string
	}{
		{"tcp", 8080, "c1--shop_web-TCP-80"},
		{"udp", 5353, "c1--shop_web-UDP-53"},
	}
	otherMember := map[contract.Family]member{
		contract.FamilyIPv4: {"198.18.0.99", 61999},
		contract.FamilyIPv6: {"2001:db8::99", 61999},
	}
	f.Fuzz(func(t *testing.T, value string) {
		for _, family := range []contract.Family{contract.FamilyIPv4, contract.FamilyIPv6} {
			fuzzed := pod("fuzzed", rawNPL(value))
			in := Input{ClusterName: testCluster, Family: string(family), Service: svc, Pods: []*corev1.Pod{other}}
			baseline, _ := Build(in)
			in.Pods = append(in.Pods, fuzzed)
			lb, report := Build(in)
			if lb == nil {
				t.Fatalf("no model; report %+v", report)
			}
			entries, err := contract.Parse(value)
			if err != nil {
				if diff := cmp.Diff(baseline, lb); diff != "" {
					t.Fatalf("a rejected annotation changed the model (-without +with):\n%s", diff)
				}
				continue
			}
			if len(lb.Listeners) != len(listeners) {
				t.Fatalf("%d listeners, want %d", len(lb.Listeners), len(listeners))
			}
			for i, want := range listeners {
				l := lb.Listeners[i]
				if l.Pool.Name != want.pool {
					t.Errorf("listener %d pool name %q, want %q", i, l.Pool.Name, want.pool)
				}
				wantSet := map[member]bool{}
				if want.proto == "tcp" { // the other Pod maps 8080/TCP only
					wantSet[otherMember[family]] = true
				}
				for _, e := range entries {
					ip := canonicalIP(e.NodeIP)
					if string(e.Protocol) == want.proto && e.PodPort == want.podPort && ipFamily(ip) == string(family) {
						wantSet[member{ip, e.NodePort}] = true
					}
				}
				gotSet := map[member]bool{}
				for j, m := range l.Pool.Members {
					got := member{m.IP, int(m.Port)}
					if gotSet[got] {
						t.Errorf("%s: member %v twice", want.pool, got)
					}
					gotSet[got] = true
					if !m.Enabled {
						t.Errorf("%s: member %v of a Ready Pod is disabled", want.pool, got)
					}
					if j > 0 && !memberBefore(l.Pool.Members[j-1], m) {
						t.Errorf("%s: member %v after %v: not in IP then port order", want.pool, got, l.Pool.Members[j-1])
					}
				}
				if diff := cmp.Diff(wantSet, gotSet); diff != "" {
					t.Errorf("%s members for %s (-want +got):\n%s", want.pool, value, diff)
				}
			}
		}
	})
}

// member is a pool member's address, as a map key.
type member struct {
	ip   string
	port int
}

// canonicalIP is the standard library's text of an address: an IPv4-mapped
// IPv6 address as IPv4, IPv6 compressed; "" when s is not an address.
func canonicalIP(s string) string {
	ip := net.ParseIP(s)
	if ip == nil {
		return ""
	}
	return ip.String()
}

func ipFamily(canonical string) string {
	if strings.Contains(canonical, ":") {
		return "IPv6"
	}
	return "IPv4"
}

// memberBefore orders members by the 16-byte form of their IP, then port.
func memberBefore(a, b lbmodel.Member) bool {
	if c := bytes.Compare(net.ParseIP(a.IP).To16(), net.ParseIP(b.IP).To16()); c != 0 {
		return c < 0
	}
	return a.Port < b.Port
}
