package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

// TestBuild_membersOnlyFromEntriesThePodsNodeServes: with npl-agent's range
// set (AgentPorts), an annotation entry is a member only when its nodeIP is
// an address of the Pod's node and its node port lies in the range; a
// forged entry (the metadata service, the node's ssh, another node) is
// skipped and reported, and the Pod's other entries stay members.
func TestBuild_membersOnlyFromEntriesThePodsNodeServes(t *testing.T) {
	n1 := node("n1", "198.18.0.11")
	n1.Status.Addresses = append(n1.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.11"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "198.18.0.99"})
	n2 := node("n2", "198.18.0.12")
	tcp2 := port(corev1.ProtocolTCP, 81, 8081)
	ports := containerPorts(corev1.ContainerPort{Name: "http", ContainerPort: 8080}, corev1.ContainerPort{ContainerPort: 8081})
	pods := []*corev1.Pod{
		pod("good", ports, npl(entry(8080, "198.18.0.11", 61000, "tcp"), entry(8081, "203.0.113.11", 61001, "tcp"))),
		pod("metadata", ports, npl(entry(8080, "169.254.169.254", 61002, "tcp"), entry(8081, "198.18.0.11", 61003, "tcp"))),
		pod("ssh", ports, npl(entry(8080, "198.18.0.11", 22, "tcp"))),
		pod("loopback", ports, npl(entry(8080, "127.0.0.1", 61004, "tcp"))),
		pod("othernode", ports, npl(entry(8080, "198.18.0.12", 61005, "tcp"))),
		pod("hostname", ports, npl(entry(8080, "198.18.0.99", 61006, "tcp"))),
		pod("unknownnode", ports, onNode("n9"), npl(entry(8080, "198.18.0.13", 61007, "tcp"))),
	}
	in := Input{ClusterName: testCluster, Service: service(tcp8080, tcp2), Pods: pods, Nodes: []*corev1.Node{n1, n2},
		AgentPorts: contract.PortRange{Start: 61000, End: 62000}}
	lb, r := Build(in)
	want := []lbmodel.Listener{
		listener(lbmodel.TCP, 80, up("198.18.0.11", 61000)),
		listener(lbmodel.TCP, 81, up("198.18.0.11", 61003), up("203.0.113.11", 61001)),
	}
	if diff := cmp.Diff(want, lb.Listeners); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
	var skipped []Skip
	for _, s := range r.Skipped {
		if s.Kind == SkipEntry {
			skipped = append(skipped, s)
		}
	}
	wantSkipped := []Skip{
		{SkipEntry, "shop/metadata", "entry 169.254.169.254:61002 (Pod port 8080/tcp): 169.254.169.254 is not an address of the Pod's node n1"},
		{SkipEntry, "shop/ssh", "entry 198.18.0.11:22 (Pod port 8080/tcp): node port 22 is outside npl-agent's range 61000-62000 (nodePortRange)"},
		{SkipEntry, "shop/loopback", "entry 127.0.0.1:61004 (Pod port 8080/tcp): 127.0.0.1 is not an address of the Pod's node n1"},
		{SkipEntry, "shop/othernode", "entry 198.18.0.12:61005 (Pod port 8080/tcp): 198.18.0.12 is not an address of the Pod's node n1"},
		{SkipEntry, "shop/hostname", "entry 198.18.0.99:61006 (Pod port 8080/tcp): 198.18.0.99 is not an address of the Pod's node n1"},
		{SkipEntry, "shop/unknownnode", `entry 198.18.0.13:61007 (Pod port 8080/tcp): the Pod's node "n9" is not known`},
	}
	if diff := cmp.Diff(wantSkipped, skipped); diff != "" {
		t.Errorf("skipped entries (-want +got):\n%s", diff)
	}

	// Without the range, entries are taken as they are.
	in.AgentPorts = contract.PortRange{}
	lb, _ = Build(in)
	if n := len(lb.Listeners[0].Pool.Members); n != 7 {
		t.Errorf("without AgentPorts: %d members of port 80, want every entry's 7", n)
	}
}

// TestMembers_checkEntriesToo: the members of an Ingress's or a route's
// backend (Members) are checked as a Service's.
func TestMembers_checkEntriesToo(t *testing.T) {
	in := Input{ClusterName: testCluster, Service: service(tcp8080), Nodes: []*corev1.Node{node("n1", "198.18.0.11")},
		AgentPorts: contract.PortRange{Start: 61000, End: 62000},
		Pods:       []*corev1.Pod{pod("a", npl(entry(8080, "198.18.0.11", 61000, "tcp"))), pod("b", npl(entry(8080, "169.254.169.254", 80, "tcp")))}}
	members, r := Members(in, tcp8080)
	if diff := cmp.Diff([]lbmodel.Member{up("198.18.0.11", 61000)}, members); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if len(r.Skipped) != 1 || r.Skipped[0].Kind != SkipEntry {
		t.Errorf("skipped %+v, want the forged entry", r.Skipped)
	}
}
