package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const (
	// heartbeatInterval is how often a node renews its Lease and its Ready
	// condition, as a kubelet does; the node lifecycle controller waits 40s
	// or more before it marks a silent node unhealthy.
	heartbeatInterval = 10 * time.Second
	// heartbeatRetry is the pause after a failed heartbeat.
	heartbeatRetry = time.Second
	leaseNamespace = "kube-node-lease"
	leaseDuration  = 40
	kubeletVersion = "v1.36.3"
)

// Node is one node: a Node object kept Ready by a heartbeat and a network
// namespace joined to the bridge npl-br0, with a bridge cbr0 for its Pods.
type Node struct {
	// Name is npl-node-<i>.
	Name string
	// IP is the node's InternalIP, 198.18.0.(10+i), on eth0 in its namespace.
	IP netip.Addr
	// PodCIDR is 198.19.i.0/24; its first address is the Pods' gateway.
	PodCIDR netip.Prefix
	// IPv6 is the node's IPv6 InternalIP in a dual-stack cluster,
	// fd00:198:18::(10+i) on eth0; the zero Addr otherwise.
	IPv6 netip.Addr
	// PodCIDRv6 is fd00:198:19:i::/64 in a dual-stack cluster, the zero
	// Prefix otherwise. A Pod's IPv6 address ends like its IPv4 one.
	PodCIDRv6 netip.Prefix
	// Netns is the name of the node's network namespace.
	Netns string

	c     *Cluster
	index int
	ips   *ipPool

	hbMu     sync.Mutex
	hbCancel context.CancelFunc
	hbDone   chan struct{}
}

func newNode(c *Cluster, i int) *Node {
	cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i), 0}), 24)
	n := &Node{
		Name:    fmt.Sprintf("npl-node-%d", i),
		IP:      netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)}),
		PodCIDR: cidr,
		Netns:   fmt.Sprintf("npl-%s-n%d", c.runID, i),
		c:       c,
		index:   i,
		ips:     newIPPool(cidr),
	}
	if c.opts.DualStack {
		// The groups are written with the decimal digits of the IPv4
		// octets: 198.18.0.10 and fd00:198:18::10 are the same node.
		n.IPv6 = netip.MustParseAddr(fmt.Sprintf("fd00:198:18::%d", 10+i))
		n.PodCIDRv6 = netip.MustParsePrefix(fmt.Sprintf("fd00:198:19:%d::/64", i))
	}
	return n
}

// IPs returns the node's InternalIPs: IP, then IPv6 in a dual-stack cluster.
func (n *Node) IPs() []netip.Addr {
	if n.IPv6.IsValid() {
		return []netip.Addr{n.IP, n.IPv6}
	}
	return []netip.Addr{n.IP}
}

// PodCIDRs returns the node's Pod CIDRs: PodCIDR, then PodCIDRv6 in a
// dual-stack cluster.
func (n *Node) PodCIDRs() []netip.Prefix {
	if n.PodCIDRv6.IsValid() {
		return []netip.Prefix{n.PodCIDR, n.PodCIDRv6}
	}
	return []netip.Prefix{n.PodCIDR}
}

// gateway is the node's address on cbr0, the Pods' default route.
func (n *Node) gateway() netip.Addr { return n.PodCIDR.Addr().Next() }

// gatewayV6 is the node's IPv6 address on cbr0 in a dual-stack cluster.
func (n *Node) gatewayV6() netip.Addr { return n.PodCIDRv6.Addr().Next() }

// podIPv6 returns the IPv6 address that goes with a Pod's IPv4 address in a
// dual-stack cluster (198.19.i.x: fd00:198:19:i::x, x in decimal digits),
// or the zero Addr.
func (n *Node) podIPv6(ip netip.Addr) netip.Addr {
	if !n.PodCIDRv6.IsValid() {
		return netip.Addr{}
	}
	last := ip.As4()[3]
	return netip.MustParseAddr(fmt.Sprintf("%s%d", n.PodCIDRv6.Addr(), last))
}

// NetnsPath is the path of the node's network namespace, for setns(2) or
// nsenter --net=.
func (n *Node) NetnsPath() string { return netnsPath(n.Netns) }

// Command returns a command that runs name inside the node's network
// namespace (through ip netns exec, which also gives it the namespace's
// /sys). It is killed if the test binary dies.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return command(ctx, "ip", append([]string{"netns", "exec", n.Netns, name}, args...)...)
}

// Do runs fn on an OS thread inside the node's network namespace, as if it
// ran on the node: sockets fn opens (net.Dial, net.Listen) belong there.
// Goroutines that fn starts do not run in the namespace.
func (n *Node) Do(fn func() error) error { return doInNetns(n.NetnsPath(), fn) }

// setupNetwork creates the node namespace: eth0 with the node IP, its peer
// on npl-br0, a default route via 198.18.0.1, forwarding on, rp_filter off,
// cbr0 for the Pods, and in the test namespace a route to the Pod CIDR; in a
// dual-stack cluster the same again for IPv6 (addresses without duplicate
// address detection, which would keep them unusable for a second or two).
func (n *Node) setupNetwork(ctx context.Context) error {
	if err := addNetns(ctx, n.Netns); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	// Before any device exists, so that eth0 and cbr0 inherit rp_filter=0.
	sysctls := map[string]string{
		"net/ipv4/ip_forward":             "1",
		"net/ipv4/conf/all/rp_filter":     "0",
		"net/ipv4/conf/default/rp_filter": "0",
	}
	if n.IPv6.IsValid() {
		sysctls["net/ipv6/conf/all/forwarding"] = "1"
	}
	if err := writeSysctls(n.NetnsPath(), sysctls); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	peer := n.peerName()
	_ = deleteLink(peer) // left by an earlier cluster of this process
	if err := ipBatch(ctx, "",
		fmt.Sprintf("link add %s type veth peer name eth0 netns %s", peer, n.Netns),
		fmt.Sprintf("link set %s master %s", peer, bridgeName),
		fmt.Sprintf("link set %s up", peer),
	); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	lines := []string{
		"link set lo up",
		fmt.Sprintf("addr add %s/24 dev eth0", n.IP),
		"link set eth0 up",
		fmt.Sprintf("route add default via %s dev eth0 onlink", bridgeIP),
		"link add cbr0 type bridge",
		fmt.Sprintf("addr add %s/%d dev cbr0", n.gateway(), n.PodCIDR.Bits()),
	}
	routes := []string{fmt.Sprintf("route replace %s via %s dev %s onlink", n.PodCIDR, n.IP, bridgeName)}
	if n.IPv6.IsValid() {
		lines = append(lines,
			fmt.Sprintf("addr add %s/64 dev eth0 nodad", n.IPv6),
			fmt.Sprintf("route add ::/0 via %s dev eth0 onlink", bridgeIPv6),
			fmt.Sprintf("addr add %s/%d dev cbr0 nodad", n.gatewayV6(), n.PodCIDRv6.Bits()),
		)
		routes = append(routes, fmt.Sprintf("route replace %s via %s dev %s onlink", n.PodCIDRv6, n.IPv6, bridgeName))
	}
	if err := ipBatch(ctx, n.Netns, append(lines, "link set cbr0 up")...); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := ipBatch(ctx, "", routes...); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	return nil
}

// peerName is the test-namespace end of the node's veth, a port of npl-br0.
func (n *Node) peerName() string { return fmt.Sprintf("npl-n%d", n.index) }

// teardownNetwork removes the node's veth, then its namespace. The veth goes
// first and explicitly: the kernel destroys a deleted namespace (and the
// devices in it) asynchronously, and the next cluster reuses the name.
func (n *Node) teardownNetwork() error {
	return errors.Join(deleteLink(n.peerName()), deleteNetns(n.Netns))
}

// object is the Node as a kubelet registers it.
func (n *Node) object() *corev1.Node {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name,
			Labels: map[string]string{
				corev1.LabelHostname:   n.Name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: runtime.GOARCH,
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: n.PodCIDR.String()},
	}
	for _, p := range n.PodCIDRs() {
		node.Spec.PodCIDRs = append(node.Spec.PodCIDRs, p.String())
	}
	n.setStatus(&node.Status, time.Now())
	return node
}

// setStatus writes what a healthy kubelet reports, keeping the transition
// time of conditions that did not change.
func (n *Node) setStatus(st *corev1.NodeStatus, now time.Time) {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	st.Capacity, st.Allocatable = resources, resources.DeepCopy()
	st.Addresses = nil
	for _, ip := range n.IPs() {
		st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	st.Addresses = append(st.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
	st.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion:          kubeletVersion,
		OperatingSystem:         "linux",
		Architecture:            runtime.GOARCH,
		OSImage:                 "npl test cluster",
		ContainerRuntimeVersion: "npl-test://0",
		KernelVersion:           kernelVersion(),
	}
	t := metav1.NewTime(now)
	for _, want := range []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
	} {
		want.LastHeartbeatTime, want.LastTransitionTime = t, t
		found := false
		for i := range st.Conditions {
			if st.Conditions[i].Type == want.Type {
				if st.Conditions[i].Status == want.Status {
					want.LastTransitionTime = st.Conditions[i].LastTransitionTime
				}
				st.Conditions[i], found = want, true
			}
		}
		if !found {
			st.Conditions = append(st.Conditions, want)
		}
	}
}

// kernelVersion is the running kernel's release, as a kubelet reports it.
func kernelVersion() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// register creates the Node object. Heartbeats create its Lease.
func (n *Node) register(ctx context.Context) error {
	_, err := n.c.client.CoreV1().Nodes().Create(ctx, n.object(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", n.Name, err)
	}
	return nil
}

// StartHeartbeat (re)starts the heartbeat: the Lease and the Ready condition
// are renewed at once, then every 10s. Start calls it for every node.
func (n *Node) StartHeartbeat() {
	n.hbMu.Lock()
	defer n.hbMu.Unlock()
	if n.hbCancel != nil || n.c.bgCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(n.c.bgCtx)
	done := make(chan struct{})
	n.hbCancel, n.hbDone = cancel, done
	go func() {
		defer close(done)
		n.heartbeatLoop(ctx)
	}()
}

// StopHeartbeat stops renewing the Lease and the Ready condition, as when a
// node is lost: after its grace period the node lifecycle controller marks
// the node NotReady and taints it. It returns when no renewal is in flight.
func (n *Node) StopHeartbeat() {
	n.hbMu.Lock()
	cancel, done := n.hbCancel, n.hbDone
	n.hbCancel, n.hbDone = nil, nil
	n.hbMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (n *Node) heartbeatLoop(ctx context.Context) {
	log := klog.FromContext(ctx).WithValues("node", n.Name)
	for {
		wait := heartbeatInterval
		if err := n.beat(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error(err, "Node heartbeat failed")
			wait = heartbeatRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// beat renews the Ready condition and the Lease once.
func (n *Node) beat(ctx context.Context) error {
	nodes := n.c.client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// A kubelet registers again when its Node was deleted.
		if node, err = nodes.Create(ctx, n.object(), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("register node %s: %w", n.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("get node %s: %w", n.Name, err)
	}
	node = node.DeepCopy()
	now := time.Now()
	n.setStatus(&node.Status, now)
	if node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of node %s: %w", n.Name, err)
	}
	return n.renewLease(ctx, node, now)
}

func (n *Node) renewLease(ctx context.Context, node *corev1.Node, now time.Time) error {
	leases := n.c.client.CoordinationV1().Leases(leaseNamespace)
	renew := metav1.NewMicroTime(now)
	lease, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:      n.Name,
				Namespace: leaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(n.Name),
				LeaseDurationSeconds: ptr.To[int32](leaseDuration),
				RenewTime:            &renew,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease of node %s: %w", n.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease of node %s: %w", n.Name, err)
	}
	lease = lease.DeepCopy()
	lease.Spec.HolderIdentity = ptr.To(n.Name)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](leaseDuration)
	lease.Spec.RenewTime = &renew
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew lease of node %s: %w", n.Name, err)
	}
	return nil
}

// ipPool hands out the addresses of a Pod CIDR from .2 up. A cursor moves
// past each allocation, so a released address is reused only after all the
// others: a test never sees a new Pod take the IP of one just deleted.
type ipPool struct {
	mu     sync.Mutex
	prefix netip.Prefix
	next   netip.Addr
	used   map[netip.Addr]bool
}

func newIPPool(prefix netip.Prefix) *ipPool {
	return &ipPool{prefix: prefix, next: first(prefix), used: map[netip.Addr]bool{}}
}

// first is the first Pod address: .0 is the network, .1 the gateway.
func first(p netip.Prefix) netip.Addr { return p.Addr().Next().Next() }

var errPoolFull = errors.New("no free address")

func (p *ipPool) allocate() (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	size := 1<<(32-p.prefix.Bits()) - 3 // minus network, gateway, broadcast
	for range size {
		ip := p.next
		p.next = ip.Next()
		if !p.prefix.Contains(p.next.Next()) { // p.next would be the broadcast address
			p.next = first(p.prefix)
		}
		if !p.used[ip] {
			p.used[ip] = true
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("allocate a pod IP in %s: %w", p.prefix, errPoolFull)
}

func (p *ipPool) release(ip netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, ip)
}
