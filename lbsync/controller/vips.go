package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Reasons of a VIP a model may not have: the Service's condition and the
// Warning Event say which.
const (
	// reasonVIPNotAllowed: the requested VIP lies outside the ranges the
	// operator allows (allowedVIPs, else vipPool).
	reasonVIPNotAllowed = "VIPNotAllowed"
	// reasonVIPInUse: another load balancer serves the requested VIP on a
	// port the model listens on.
	reasonVIPInUse = "VIPInUse"
)

// vipGuard decides, before any provider call, whether a model may have the
// VIP it requests: the address lies in a range the operator allows, and no
// other load balancer this npl-lbsync applied (or is applying) serves it on
// one of the model's ports. What no load balancer may take at all
// (loopback, unspecified, ...) is lbmodel.Normalize's rule. Across
// installations and clusters the providers refuse a taken VIP themselves
// (npl-edge compares every cluster's load balancers).
type vipGuard struct {
	allowed []netip.Prefix

	mu sync.Mutex
	// served holds, per key, the VIPs and ports of its load balancer as
	// last applied; pending those of a model being applied, so that two
	// syncs at once cannot both take a VIP.
	served, pending map[queueKey]vipPorts
}

// vipPorts are the VIPs of a load balancer and the ports it listens on.
type vipPorts struct {
	vips  []netip.Addr
	ports []listenPort
}

// listenPort is a port of a load balancer: UDP ports are apart from those
// of every other protocol, which share TCP's.
type listenPort struct {
	port int32
	udp  bool
}

func (p listenPort) String() string {
	if p.udp {
		return fmt.Sprintf("UDP/%d", p.port)
	}
	return fmt.Sprintf("TCP/%d", p.port)
}

func newVIPGuard(allowed []netip.Prefix) *vipGuard {
	return &vipGuard{allowed: allowed, served: map[queueKey]vipPorts{}, pending: map[queueKey]vipPorts{}}
}

// portsOf returns the ports lb listens on.
func portsOf(lb *lbmodel.LoadBalancer) []listenPort {
	out := make([]listenPort, 0, len(lb.Listeners))
	for _, l := range lb.Listeners {
		out = append(out, listenPort{port: l.Port, udp: l.Protocol == lbmodel.UDP})
	}
	return out
}

// claim checks the VIP lb requests for key and, when it may have it,
// holds it as pending until applied or released. It returns the failure
// when it may not; a model that requests none passes.
func (g *vipGuard) claim(key queueKey, lb *lbmodel.LoadBalancer) *failure {
	if lb.RequestedVIP == "" {
		return nil
	}
	vip, err := netip.ParseAddr(lb.RequestedVIP)
	if err != nil {
		return nil // Normalize refuses it, with the model's other rules
	}
	vip = vip.Unmap()
	if !slices.ContainsFunc(g.allowed, func(p netip.Prefix) bool { return p.Contains(vip) }) {
		msg := fmt.Sprintf("requested VIP %s is not in the ranges the operator allows %v (allowedVIPs, else vipPool); "+
			"the load balancer is left as it is", vip, g.allowed)
		if len(g.allowed) == 0 {
			msg = fmt.Sprintf("requested VIP %s: no range allows requested VIPs (allowedVIPs, vipPool); "+
				"the load balancer is left as it is", vip)
		}
		return &failure{reason: reasonVIPNotAllowed, message: msg, refused: true}
	}
	ports := portsOf(lb)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, held := range []map[queueKey]vipPorts{g.served, g.pending} {
		for k, other := range held {
			if k == key || !slices.Contains(other.vips, vip) {
				continue
			}
			for _, p := range ports {
				if slices.Contains(other.ports, p) {
					return &failure{reason: reasonVIPInUse, refused: true, message: fmt.Sprintf(
						"requested VIP %s is already served on %s for another load balancer; the load balancer is left as it is", vip, p)}
				}
			}
		}
	}
	g.pending[key] = vipPorts{vips: []netip.Addr{vip}, ports: ports}
	return nil
}

// applied records the VIPs and ports key's load balancer serves on now.
func (g *vipGuard) applied(key queueKey, vips []string, lb *lbmodel.LoadBalancer) {
	served := vipPorts{ports: portsOf(lb)}
	for _, v := range vips {
		if a, err := netip.ParseAddr(v); err == nil {
			served.vips = append(served.vips, a.Unmap())
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pending, key)
	g.served[key] = served
}

// release drops what a model of key that was not applied held.
func (g *vipGuard) release(key queueKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pending, key)
}

// forget drops what key's load balancer served: it is deleted.
func (g *vipGuard) forget(key queueKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pending, key)
	delete(g.served, key)
}
