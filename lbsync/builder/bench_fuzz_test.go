package builder

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/providers"
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

// FuzzBuild feeds arbitrary annotation values to Build. Whatever the value,
// Build must not panic, must keep the other Pod's members, must give sorted,
// unique, valid members of the wanted family, and must ignore a value that
// contract.Parse rejects.
func FuzzBuild(f *testing.F) {
	for _, seed := range []string{
		`[{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":61000,"protocol":"tcp","ipFamily":"IPv4"}]`,
		`[{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":61000,"protocol":"tcp"}]`,
		`[{"podPort":5353,"nodeIP":"2001:db8::11","nodePort":61001,"protocol":"UDP","ipFamily":"IPv6"}]`,
		`[{"podPort":8080,"nodeIP":"::ffff:198.18.0.11","nodePort":61000,"protocol":"tcp"}]`,
		`[{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":70000,"protocol":"tcp"}]`,
		`[{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":61000,"protocol":"sctp"}]`,
		`[{"podPort":8080,`,
		`[] []`,
		`null`,
		`[]`,
		``,
		`{"podPort":8080}`,
	} {
		f.Add(seed)
	}
	svc := service(port(corev1.ProtocolTCP, 80, "http"), port(corev1.ProtocolUDP, 53, 5353))
	other := pod("other", npl(entry(8080, "198.18.0.99", 61999, "tcp"), entry(8080, "2001:db8::99", 61999, "tcp")))
	f.Fuzz(func(t *testing.T, value string) {
		for _, family := range []string{contract.FamilyIPv4, contract.FamilyIPv6} {
			fuzzed := pod("fuzzed", rawNPL(value))
			in := Input{ClusterName: testCluster, Family: family, Service: svc, Pods: []*corev1.Pod{other}}
			baseline, _ := Build(in)
			in.Pods = append(in.Pods, fuzzed)
			lb, report := Build(in)
			if lb == nil {
				t.Fatalf("no model; report %+v", report)
			}
			if _, err := contract.Parse(value); err != nil {
				if diff := cmp.Diff(baseline, lb); diff != "" {
					t.Fatalf("a rejected annotation changed the model (-without +with):\n%s", diff)
				}
				continue
			}
			for i, l := range lb.Listeners {
				if l.Pool.Name != providers.PoolName(testLB, l.Protocol, l.Port) {
					t.Errorf("pool name %q", l.Pool.Name)
				}
				sorted := providers.SortMembers(slices.Clone(l.Pool.Members))
				if diff := cmp.Diff(sorted, l.Pool.Members); diff != "" {
					t.Errorf("listener %d members not sorted and unique (-want +got):\n%s", i, diff)
				}
				for _, m := range l.Pool.Members {
					addr, err := netip.ParseAddr(m.IP)
					if err != nil || addr.String() != m.IP || addr.Is4() != (family == contract.FamilyIPv4) {
						t.Errorf("member IP %q is not a canonical %s address", m.IP, family)
					}
					if m.Port < 1 || m.Port > 65535 {
						t.Errorf("member port %d out of range", m.Port)
					}
				}
				for _, m := range baseline.Listeners[i].Pool.Members {
					if !slices.Contains(l.Pool.Members, m) {
						t.Errorf("member %+v of the other Pod was lost", m)
					}
				}
			}
		}
	})
}
