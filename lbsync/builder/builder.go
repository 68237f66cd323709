// Package builder turns Kubernetes objects into the load balancer model:
// a Service, the Pods of its namespace and the Nodes in, a
// lbmodel.LoadBalancer and a Report out. It is pure
// (no client-go calls, no clock), so every rule is tested with tables.
package builder

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

// Service types: what a pool member is. They are the values of the
// serviceType configuration field.
const (
	// ServiceTypeNodePortLocal makes each Pod port's node port (from the
	// nodeportlocal.antrea.io annotation) a member: nodeIP:nodePort.
	ServiceTypeNodePortLocal = "NodePortLocal"
	// ServiceTypeNodePort makes every Ready, schedulable node a member:
	// nodeIP:spec.ports[].nodePort.
	ServiceTypeNodePort = "NodePort"
	// ServiceTypeClusterIP makes each Ready Pod a member: podIP:targetPort,
	// for load balancers that route to Pod IPs directly.
	ServiceTypeClusterIP = "ClusterIP"
)

// Input is everything Build reads. Build does not modify it.
type Input struct {
	// ClusterName prefixes the load balancer name.
	ClusterName string
	// ServiceType is one of the ServiceType constants; empty means
	// ServiceTypeNodePortLocal.
	ServiceType string
	// Family is contract.FamilyIPv4 or contract.FamilyIPv6: members of
	// other families are left out. Empty means IPv4.
	Family string
	// Service is the Service to build for.
	Service *corev1.Service
	// Pods are candidate Pods, typically those of the Service's namespace;
	// Build checks namespace and selector itself.
	Pods []*corev1.Pod
	// EndpointSlices are the Service's EndpointSlices written by hand (or
	// by any controller but the EndpointSlice controller): for a Service
	// without a selector, their targetRefs choose its Pods
	// (contract.Chooses). Slices of other Services are ignored.
	EndpointSlices []*discoveryv1.EndpointSlice
	// Nodes are, in ServiceTypeNodePort mode, the nodes that may be
	// members; in ServiceTypeNodePortLocal mode, the nodes of the Pods, whose
	// addresses the annotation entries must name (AgentPorts).
	Nodes []*corev1.Node
	// AgentPorts, in ServiceTypeNodePortLocal mode, is the range npl-agent
	// allocates node ports from. When set, an annotation entry is a member
	// only when its nodeIP is an address of the Pod's node (the Node in
	// Nodes that spec.nodeName names) and its nodePort lies in the range:
	// whoever may write a Pod's annotations could otherwise send the load
	// balancer's traffic to any address and port (169.254.169.254:80, a
	// node's port 22). Other entries are skipped (SkipEntry). The zero range
	// takes every entry as it is (the builders' own tests); npl-lbsync and
	// nplctl always set it (lbsync/inputs).
	AgentPorts contract.PortRange
}

// Report says what Build could not use and why, for Events and logs.
type Report struct {
	// Errors are mistakes in the Service the user must fix. Build still
	// returns a usable model without the faulty part (an invalid requested
	// VIP is not requested).
	Errors []string
	// Warnings explain empty pools that are not errors (no selector, no
	// nodePort).
	Warnings []string
	// Skipped lists the ports and Pods left out, in the order met.
	Skipped []Skip
	// ReadyBackends counts the enabled members over all pools; zero means
	// the load balancer has nothing to send traffic to.
	ReadyBackends int
	// PoolBackends names, by pool of an Ingress's or a Gateway's model,
	// the backend Services ("namespace/name", sorted, once each) whose
	// Pods make its members: a Service's LoadBalancerPolicy reaches the
	// pools whose only backend it is (lbpolicy.Attach).
	PoolBackends map[string][]string
}

// AddPoolBackend records that the members of pool come from the backend
// Service svcID.
func (r *Report) AddPoolBackend(pool, svcID string) {
	if r.PoolBackends == nil {
		r.PoolBackends = map[string][]string{}
	}
	if svcs := r.PoolBackends[pool]; !slices.Contains(svcs, svcID) {
		r.PoolBackends[pool] = append(svcs, svcID)
		slices.Sort(r.PoolBackends[pool])
	}
}

// AddBackend adds the report of the members of a backend Service (an
// Ingress's or an HTTPRoute's) to r: its errors and warnings prefixed with
// the Service, its skips once each.
func (r *Report) AddBackend(svcID string, backend Report) {
	for _, e := range backend.Errors {
		r.Errors = append(r.Errors, "backend Service "+svcID+": "+e)
	}
	for _, w := range backend.Warnings {
		r.Warnings = append(r.Warnings, "backend Service "+svcID+": "+w)
	}
	for _, sk := range backend.Skipped {
		if !slices.Contains(r.Skipped, sk) {
			r.Skipped = append(r.Skipped, sk)
		}
	}
}

// SkipKind says what a Skip is about.
type SkipKind string

const (
	// SkipPort is a Service port that gets no listener.
	SkipPort SkipKind = "port"
	// SkipPod is a Pod that contributes nothing to one or all pools.
	SkipPod SkipKind = "pod"
	// SkipEntry is an annotation entry of a Pod that is no member: its
	// nodeIP is not an address of the Pod's node, or its nodePort lies
	// outside Input.AgentPorts. Name is the Pod's "namespace/name".
	SkipEntry SkipKind = "entry"
)

// Skip is one port or Pod that Build left out.
type Skip struct {
	Kind SkipKind
	// Name is "9000/SCTP" for a port, "namespace/name" for a Pod.
	Name   string
	Reason string
}

// Summary joins the warnings and the first limit skips into one line for an
// Event or a condition message, e.g. "pod shop/web-1: no node port yet: ...;
// and 3 more skipped". It is empty when there is nothing to say.
func (r Report) Summary(limit int) string {
	parts := slices.Clone(r.Warnings)
	for i, s := range r.Skipped {
		if i == limit {
			parts = append(parts, fmt.Sprintf("and %d more skipped", len(r.Skipped)-limit))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s", s.Kind, s.Name, s.Reason))
	}
	return strings.Join(parts, "; ")
}

// Build returns the load balancer model of in.Service and a report. The model
// is nil when the input cannot give one (no Service, an unknown service type
// or family); the reason is in Report.Errors and nothing should be synced.
// Otherwise listeners are sorted by protocol then port and members by IP then
// port, without duplicates.
func Build(in Input) (*lbmodel.LoadBalancer, Report) {
	var r Report
	svc := in.Service
	if svc == nil {
		r.Errors = append(r.Errors, "no Service to build from")
		return nil, r
	}
	mode, family, ok := settings(in, &r)
	if !ok {
		return nil, r
	}

	name := lbmodel.LoadBalancerName(in.ClusterName, svc.Namespace, svc.Name)
	lb := &lbmodel.LoadBalancer{
		Name:         name,
		Service:      svc.Namespace + "/" + svc.Name,
		RequestedVIP: requestedVIP(svc, &r),
		Listeners:    make([]lbmodel.Listener, 0, len(svc.Spec.Ports)),
	}
	b := newBackends(in, mode, family, &r)
	for _, sp := range svc.Spec.Ports {
		proto, ok := listenerProtocol(sp.Protocol)
		if !ok {
			r.Skipped = append(r.Skipped, Skip{Kind: SkipPort, Name: portName(sp),
				Reason: fmt.Sprintf("protocol %s is not supported", sp.Protocol)})
			continue
		}
		members := b.members(mode, sp, proto)
		r.ReadyBackends += countEnabled(members)
		lb.Listeners = append(lb.Listeners, lbmodel.Listener{
			Port:     sp.Port,
			Protocol: proto,
			Pool:     lbmodel.Pool{Name: lbmodel.PoolName(name, proto, sp.Port), Members: members, Policy: affinityPolicy(svc)},
		})
	}
	lbmodel.SortListeners(lb.Listeners)
	return lb, r
}

// defaultAffinitySeconds is Kubernetes' default of
// sessionAffinityConfig.clientIP.timeoutSeconds.
const defaultAffinitySeconds = 10800

// affinityPolicy is the policy a Service's session affinity gives every
// pool of its load balancer: with sessionAffinity ClientIP, the
// connections of a client address stay on one member, each a Pod in
// NodePortLocal mode, until the client is idle for
// sessionAffinityConfig.clientIP.timeoutSeconds (10800 unless set; the
// API server allows 1-86400). nil without affinity.
func affinityPolicy(svc *corev1.Service) *lbmodel.Policy {
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return nil
	}
	timeout := int32(defaultAffinitySeconds)
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		timeout = *c.ClientIP.TimeoutSeconds
	}
	return &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: timeout}}
}

// requestedVIP returns the canonical address the Service asks for, from
// spec.loadBalancerIP or else the npl.io/load-balancer-ip annotation.
func requestedVIP(svc *corev1.Service, r *Report) string {
	field, value := "spec.loadBalancerIP", svc.Spec.LoadBalancerIP
	if ann := svc.Annotations[contract.LoadBalancerIPKey]; ann != "" {
		if value == "" {
			field, value = "annotation "+contract.LoadBalancerIPKey, ann
		} else if ann != value {
			r.Warnings = append(r.Warnings, fmt.Sprintf("annotation %s %q ignored: spec.loadBalancerIP %q is set",
				contract.LoadBalancerIPKey, ann, value))
		}
	}
	if value == "" {
		return ""
	}
	addr, err := netip.ParseAddr(value)
	if err != nil || addr.Zone() != "" {
		r.Errors = append(r.Errors, fmt.Sprintf("%s %q is not an IP address: no VIP requested", field, value))
		return ""
	}
	return addr.Unmap().String()
}

func listenerProtocol(p corev1.Protocol) (lbmodel.Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return lbmodel.TCP, true
	case corev1.ProtocolUDP:
		return lbmodel.UDP, true
	default:
		return "", false
	}
}

func portName(sp corev1.ServicePort) string {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	return fmt.Sprintf("%d/%s", sp.Port, proto)
}

// candidate is a selected Pod that may contribute members.
type candidate struct {
	pod *corev1.Pod
	// enabled is false for a draining Pod: one that is terminating.
	enabled bool
	// entries are the Pod's node-port mappings of the wanted family, in
	// NodePortLocal mode.
	entries []contract.Entry
	// ip is the Pod IP of the wanted family, in ClusterIP mode.
	ip string
}

// backends holds what all ports of a Service share: the selected Pods with
// their parsed annotation, and the usable Nodes.
type backends struct {
	svc        *corev1.Service
	family     contract.Family
	r          *Report
	candidates []candidate
	nodes      []*corev1.Node
	// agentPorts and podNodes check annotation entries (Input.AgentPorts):
	// the range, and the Pods' nodes by name; podNodes is nil when entries
	// are taken as they are.
	agentPorts contract.PortRange
	podNodes   map[string]*corev1.Node
}

func newBackends(in Input, mode string, family contract.Family, r *Report) *backends {
	b := &backends{svc: in.Service, family: family, r: r, agentPorts: in.AgentPorts}
	if mode == ServiceTypeNodePortLocal && in.AgentPorts != (contract.PortRange{}) {
		b.podNodes = make(map[string]*corev1.Node, len(in.Nodes))
		for _, n := range in.Nodes {
			if n != nil {
				b.podNodes[n.Name] = n
			}
		}
	}
	if len(in.Service.Spec.Selector) == 0 && mode != ServiceTypeNodePort && !namesPods(in.Service, in.EndpointSlices) {
		r.Warnings = append(r.Warnings, "the Service has no selector and no EndpointSlice of it names a Pod: no Pods are selected")
		return b
	}
	for _, pod := range in.Pods {
		if !contract.Chooses(in.Service, pod, in.EndpointSlices) || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		terminating := pod.DeletionTimestamp != nil
		if !terminating && !podReady(pod) {
			continue
		}
		c := candidate{pod: pod, enabled: !terminating}
		switch mode {
		case ServiceTypeNodePortLocal:
			entries, ok := b.podEntries(pod, c.enabled)
			if !ok {
				continue
			}
			c.entries = entries
		case ServiceTypeClusterIP:
			c.ip = podIP(pod, family)
			if c.ip == "" {
				if c.enabled {
					b.skipPod(pod, fmt.Sprintf("no %s Pod IP yet", family))
				}
				continue
			}
		}
		b.candidates = append(b.candidates, c)
	}
	if mode == ServiceTypeNodePort {
		b.nodes = b.usableNodes(in.Nodes)
	}
	return b
}

// namesPods reports whether one of the Service's slices names a Pod.
func namesPods(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) bool {
	for _, s := range eps {
		if s != nil && s.Namespace == svc.Namespace && contract.SliceService(s) == svc.Name && len(contract.SlicePods(s)) > 0 {
			return true
		}
	}
	return false
}

// podEntries returns the Pod's node-port mappings of the wanted family. A Pod
// without the annotation has none yet (reported when it should serve); one
// with a malformed annotation contributes nothing and is reported.
func (b *backends) podEntries(pod *corev1.Pod, enabled bool) ([]contract.Entry, bool) {
	value, ok := pod.Annotations[contract.PodKey]
	if !ok {
		if enabled {
			b.skipPod(pod, "no node port yet: annotation "+contract.PodKey+" is absent")
		}
		return nil, false
	}
	entries, err := contract.Parse(value)
	if err != nil {
		b.skipPod(pod, err.Error())
		return nil, false
	}
	kept := entries[:0]
	for _, e := range entries {
		if e.IPFamily != b.family {
			continue
		}
		ip, ok := memberIP(e)
		if !ok {
			continue // contract.Parse rejects this; kept for safety.
		}
		e.NodeIP = ip
		if why := b.untrusted(pod, e); why != "" {
			b.r.Skipped = append(b.r.Skipped, Skip{Kind: SkipEntry, Name: pod.Namespace + "/" + pod.Name, Reason: why})
			continue
		}
		kept = append(kept, e)
	}
	return kept, true
}

// untrusted says why an annotation entry of pod (its nodeIP canonical)
// cannot be a member: it names an address that is not one of the Pod's
// node, or a node port outside the range npl-agent allocates from; "" when
// it can, or when entries are taken as they are (Input.AgentPorts).
func (b *backends) untrusted(pod *corev1.Pod, e contract.Entry) string {
	if b.podNodes == nil {
		return ""
	}
	entry := fmt.Sprintf("entry %s:%d (Pod port %d/%s)", e.NodeIP, e.NodePort, e.PodPort, e.Protocol)
	if !b.agentPorts.Contains(e.NodePort) {
		return fmt.Sprintf("%s: node port %d is outside npl-agent's range %s (nodePortRange)", entry, e.NodePort, b.agentPorts)
	}
	node := b.podNodes[pod.Spec.NodeName]
	if node == nil {
		return fmt.Sprintf("%s: the Pod's node %q is not known", entry, pod.Spec.NodeName)
	}
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeHostName && ofFamily(a.Address, b.family) == e.NodeIP {
			return ""
		}
	}
	return fmt.Sprintf("%s: %s is not an address of the Pod's node %s", entry, e.NodeIP, node.Name)
}

// memberIP is the node IP of an annotation entry as NodePortLocal members
// name it.
func memberIP(e contract.Entry) (string, bool) {
	addr, err := netip.ParseAddr(e.NodeIP)
	if err != nil {
		return "", false
	}
	return addr.Unmap().String(), true
}

// MovedMembers returns the NodePortLocal members that a change of a Pod's
// annotation from old to cur moved: the old node port of each mapping
// (node IP, Pod port, protocol) that cur publishes on another node port, as
// when npl-agent restarts with another port range. Such a member still
// forwards for npl-agent's retired-port grace; a load balancer can drain it
// instead of cutting its open connections. A malformed annotation moves
// nothing.
func MovedMembers(old, cur *corev1.Pod) []lbmodel.Member {
	if old.Annotations[contract.PodKey] == cur.Annotations[contract.PodKey] {
		return nil
	}
	before, err := contract.Parse(old.Annotations[contract.PodKey])
	if err != nil {
		return nil
	}
	after, err := contract.Parse(cur.Annotations[contract.PodKey])
	if err != nil {
		return nil
	}
	type mapping struct {
		ip       string
		podPort  int
		protocol contract.Protocol
	}
	now := map[mapping][]int{}
	for _, e := range after {
		if ip, ok := memberIP(e); ok {
			k := mapping{ip, e.PodPort, e.Protocol}
			now[k] = append(now[k], e.NodePort)
		}
	}
	var out []lbmodel.Member
	for _, e := range before {
		ip, ok := memberIP(e)
		if !ok {
			continue
		}
		ports := now[mapping{ip, e.PodPort, e.Protocol}]
		if len(ports) > 0 && !slices.Contains(ports, e.NodePort) {
			out = append(out, lbmodel.Member{IP: ip, Port: int32(e.NodePort)})
		}
	}
	return out
}

func (b *backends) skipPod(pod *corev1.Pod, reason string) {
	b.r.Skipped = append(b.r.Skipped, Skip{Kind: SkipPod, Name: pod.Namespace + "/" + pod.Name, Reason: reason})
}

// nodePortLocalMembers: for each candidate, its annotation entries for the
// resolved targetPort and the port's protocol.
func (b *backends) nodePortLocalMembers(sp corev1.ServicePort, proto lbmodel.Protocol) []lbmodel.Member {
	members := make([]lbmodel.Member, 0, len(b.candidates))
	want, ok := contract.ProtocolOf(corev1.Protocol(proto))
	if !ok {
		return members
	}
	for _, c := range b.candidates {
		port, ok := b.resolve(c.pod, sp)
		if !ok {
			continue
		}
		for _, e := range c.entries {
			if int32(e.PodPort) == port && e.Protocol == want {
				members = append(members, lbmodel.Member{IP: e.NodeIP, Port: int32(e.NodePort), Enabled: c.enabled})
			}
		}
	}
	return members
}

// clusterIPMembers: for each candidate, its Pod IP and the resolved targetPort.
func (b *backends) clusterIPMembers(sp corev1.ServicePort) []lbmodel.Member {
	members := make([]lbmodel.Member, 0, len(b.candidates))
	for _, c := range b.candidates {
		if port, ok := b.resolve(c.pod, sp); ok {
			members = append(members, lbmodel.Member{IP: c.ip, Port: port, Enabled: c.enabled})
		}
	}
	return members
}

// nodePortMembers: every usable node's address and the port's nodePort.
func (b *backends) nodePortMembers(sp corev1.ServicePort) []lbmodel.Member {
	if sp.NodePort == 0 {
		b.r.Warnings = append(b.r.Warnings, fmt.Sprintf("port %s has no nodePort: no members", portName(sp)))
		return []lbmodel.Member{}
	}
	local := b.svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	var onNode map[string]bool // node name -> whether a Pod there serves
	if local {
		onNode = make(map[string]bool, len(b.candidates))
		for _, c := range b.candidates {
			onNode[c.pod.Spec.NodeName] = onNode[c.pod.Spec.NodeName] || c.enabled
		}
	}
	members := make([]lbmodel.Member, 0, len(b.nodes))
	for _, n := range b.nodes {
		enabled := true
		if local {
			// kube-proxy drops traffic on nodes without a local endpoint.
			serving, ok := onNode[n.Name]
			if !ok {
				continue
			}
			enabled = serving
		}
		members = append(members, lbmodel.Member{IP: nodeIP(n, b.family), Port: sp.NodePort, Enabled: enabled})
	}
	return members
}

func (b *backends) resolve(pod *corev1.Pod, sp corev1.ServicePort) (int32, bool) {
	port, ok := contract.ResolveTargetPort(pod, sp)
	if !ok {
		b.skipPod(pod, fmt.Sprintf("targetPort %s of port %s does not resolve", sp.TargetPort.String(), portName(sp)))
	}
	return port, ok
}

// usableNodes are the Ready, schedulable nodes not excluded from load
// balancers that have an InternalIP of the family.
func (b *backends) usableNodes(nodes []*corev1.Node) []*corev1.Node {
	out := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		if n == nil || n.DeletionTimestamp != nil || n.Spec.Unschedulable || !nodeReady(n) {
			continue
		}
		if _, excluded := n.Labels[corev1.LabelNodeExcludeBalancers]; excluded {
			continue
		}
		if nodeIP(n, b.family) == "" {
			continue
		}
		out = append(out, n)
	}
	return out
}

// podReady reports whether a Pod may receive traffic: its Ready condition is
// True, or all that holds it back is our own readiness gate
// npl.io/lb-registered while its containers are ready. That gate turns True
// only once the Pod is a member of its pools, so membership cannot wait for
// it (as the AWS Load Balancer Controller registers such targets).
func podReady(pod *corev1.Pod) bool {
	status := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range pod.Status.Conditions {
		status[c.Type] = c.Status
	}
	if status[corev1.PodReady] == corev1.ConditionTrue {
		return true
	}
	gated := false
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == contract.RegisteredReadinessGate {
			gated = true
		} else if status[g.ConditionType] != corev1.ConditionTrue {
			return false
		}
	}
	return gated && status[corev1.ContainersReady] == corev1.ConditionTrue
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeIP returns the node's first InternalIP of the family, canonical, or "".
func nodeIP(n *corev1.Node, family contract.Family) string {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip := ofFamily(a.Address, family); ip != "" {
			return ip
		}
	}
	return ""
}

// podIP returns the Pod's IP of the family, canonical, or "".
func podIP(pod *corev1.Pod, family contract.Family) string {
	for _, p := range pod.Status.PodIPs {
		if ip := ofFamily(p.IP, family); ip != "" {
			return ip
		}
	}
	return ofFamily(pod.Status.PodIP, family)
}

// ofFamily returns s in canonical form when it is an address of the family.
func ofFamily(s string, family contract.Family) string {
	addr, err := netip.ParseAddr(s)
	if err != nil || addr.Zone() != "" {
		return ""
	}
	if contract.FamilyOf(addr) != family {
		return ""
	}
	return addr.Unmap().String()
}
