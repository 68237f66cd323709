package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nodeportlocal/npl/contract"
)

// Target is one Pod port the agent must publish on the node: the unit of
// allocation, one per (podPort, protocol, IP family).
type Target struct {
	PodPort  int32
	Protocol contract.Protocol
	Family   contract.Family
	// HostPort, when set, is published as is: the container already has
	// a hostPort for this port and protocol, so no rule or socket is needed.
	HostPort int32
}

// Skip is a Service port the agent cannot map, for an Event on the Service.
type Skip struct {
	Service *corev1.Service
	Port    corev1.ServicePort
	Reason  string
}

// ServiceCounts reports whether a Service opts its Pods in: the annotation is
// exactly "true" and the type is ClusterIP or LoadBalancer (an empty type is
// ClusterIP). Which Pods it chooses is contract.Chooses: its selector, or,
// without one, its EndpointSlices' targetRefs.
func ServiceCounts(svc *corev1.Service) bool {
	if !contract.ServiceEnabled(svc.Annotations) {
		return false
	}
	switch svc.Spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeLoadBalancer:
		return true
	}
	return false
}

// Selects reports whether svc counts and chooses pod (contract.Chooses: its
// selector, or for a Service without one, a targetRef of its EndpointSlices,
// which eps holds).
func Selects(svc *corev1.Service, pod *corev1.Pod, eps []*discoveryv1.EndpointSlice) bool {
	return ServiceCounts(svc) && contract.Chooses(svc, pod, eps)
}

// PodIPs returns the Pod's IPs by family. A Pod without an IP has none.
func PodIPs(pod *corev1.Pod) map[contract.Family]netip.Addr {
	out := map[contract.Family]netip.Addr{}
	add := func(s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		if fam := contract.FamilyOf(ip); out[fam] == (netip.Addr{}) {
			out[fam] = ip.Unmap()
		}
	}
	for _, p := range pod.Status.PodIPs {
		add(p.IP)
	}
	add(pod.Status.PodIP)
	return out
}

// PodMappable reports whether the agent maps ports of pod at all: it is not
// terminal, not on the host network, and has an IP.
func PodMappable(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if pod.Spec.HostNetwork {
		return false
	}
	return len(PodIPs(pod)) > 0
}

// Targets computes the ports to publish for pod from the Services that
// choose it (eps are the hand-written EndpointSlices of pod's namespace,
// which choose Pods for Services without a selector), for the families both the Pod and the node have and the Service
// asks for (spec.ipFamilies, as Antrea does: an IPv6-only Service publishes
// no IPv4 node port; a Service without ipFamilies asks for every family).
// It is a pure function of its inputs; Skips name the Service ports it
// cannot map.
func Targets(pod *corev1.Pod, services []*corev1.Service, eps []*discoveryv1.EndpointSlice, nodeFamilies []contract.Family) ([]Target, []Skip) {
	if !PodMappable(pod) {
		return nil, nil
	}
	podIPs := PodIPs(pod)
	var families []contract.Family
	for _, f := range nodeFamilies {
		if _, ok := podIPs[f]; ok {
			families = append(families, f)
		}
	}
	seen := map[Target]bool{}
	var out []Target
	var skips []Skip
	for _, svc := range services {
		if !Selects(svc, pod, eps) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			proto, ok := contract.ProtocolOf(sp.Protocol)
			if !ok {
				skips = append(skips, Skip{Service: svc, Port: sp, Reason: fmt.Sprintf("protocol %s is not supported by NodePortLocal", sp.Protocol)})
				continue
			}
			port, ok := contract.ResolveTargetPort(pod, sp)
			if !ok {
				skips = append(skips, Skip{Service: svc, Port: sp, Reason: fmt.Sprintf("targetPort %q does not resolve on Pod %s/%s", sp.TargetPort.String(), pod.Namespace, pod.Name)})
				continue
			}
			hostPort := contract.HostPort(pod, port, proto.Kubernetes())
			for _, fam := range families {
				if !servesFamily(svc, fam) {
					continue
				}
				t := Target{PodPort: port, Protocol: proto, Family: fam, HostPort: hostPort}
				if !seen[t] {
					seen[t] = true
					out = append(out, t)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Target) int {
		if a.Family != b.Family {
			return strings.Compare(string(a.Family), string(b.Family))
		}
		if a.Protocol != b.Protocol {
			return strings.Compare(string(a.Protocol), string(b.Protocol))
		}
		return int(a.PodPort - b.PodPort)
	})
	return out, skips
}

// servesFamily reports whether a Service asks for family: it lists it in
// spec.ipFamilies, or lists none (the apiserver always fills the field; an
// object without it predates dual-stack and asked for nothing in particular).
func servesFamily(svc *corev1.Service, family contract.Family) bool {
	if len(svc.Spec.IPFamilies) == 0 {
		return true
	}
	return slices.Contains(svc.Spec.IPFamilies, corev1.IPFamily(family))
}
