// Package providers holds the load balancer model that npl-lbsync builds from
// Kubernetes objects, the Provider interface that makes a load balancer match
// it, and the naming scheme of load balancer objects. It imports nothing from
// lbsync or agent: data flows one way, objects -> model -> provider.
package providers

import (
	"cmp"
	"context"
	"net/netip"
	"slices"
)

// Protocol of a listener, as Kubernetes spells it.
type Protocol string

const (
	// TCP is a TCP listener.
	TCP Protocol = "TCP"
	// UDP is a UDP listener.
	UDP Protocol = "UDP"
)

// LoadBalancer is one load balancer: desired when built by npl-lbsync,
// actual when returned by Provider.List.
type LoadBalancer struct {
	// Name is the virtual service name, from LoadBalancerName.
	Name string `json:"name"`
	// Service is the owning Service as "namespace/name".
	Service string `json:"service"`
	// RequestedVIP is the address the Service asks for (spec.loadBalancerIP or
	// the npl.io/load-balancer-ip annotation); empty lets the provider choose.
	RequestedVIP string `json:"requestedVIP,omitempty"`
	// VIPs are the addresses the load balancer serves on. Set by List only.
	VIPs []string `json:"vips,omitempty"`
	// Listeners are sorted by protocol then port.
	Listeners []Listener `json:"listeners"`
}

// Listener is one frontend port and the pool it forwards to.
type Listener struct {
	Port     int32    `json:"port"`
	Protocol Protocol `json:"protocol"`
	Pool     Pool     `json:"pool"`
}

// Pool is a named set of backend members.
type Pool struct {
	// Name is the pool name, from PoolName.
	Name string `json:"name"`
	// Members are sorted by IP then port (SortMembers).
	Members []Member `json:"members"`
}

// Member is one backend: nodeIP:nodePort in NodePortLocal mode.
type Member struct {
	IP   string `json:"ip"`
	Port int32  `json:"port"`
	// Enabled is false for a member that drains (its Pod is terminating).
	Enabled bool `json:"enabled"`
}

// Status is what Ensure reports about a load balancer it applied.
type Status struct {
	// VIPs are the addresses to write into the Service's status.
	VIPs []string
}

// Provider makes a load balancer match the model. A provider owns only the
// objects tagged with its cluster name, computes its own minimal diff (no
// write when nothing changed) and is safe to call again after any failure.
// It never deletes members because of an error.
type Provider interface {
	// Ensure creates or updates everything for lb so that it matches exactly.
	Ensure(ctx context.Context, lb *LoadBalancer) (Status, error)
	// Delete removes everything created for the load balancer name. Deleting
	// something that does not exist is not an error.
	Delete(ctx context.Context, name string) error
	// List returns every load balancer of this cluster with its actual pools.
	List(ctx context.Context) ([]LoadBalancer, error)
}

// Common is the part of npl-lbsync's configuration every provider sees.
type Common struct {
	// ClusterName prefixes every object name and marks ownership.
	ClusterName string
	// VIPPool holds the ranges to take VIPs from, for providers that do not
	// allocate them themselves.
	VIPPool []netip.Prefix
}

// Config is a provider's decoded and validated configuration section.
type Config interface {
	// Open builds the provider, connecting to the load balancer if needed.
	Open(ctx context.Context) (Provider, error)
}

// ParseFunc decodes a provider's configuration section strictly (unknown keys
// are errors), checks it (named files exist), and returns it.
type ParseFunc func(common Common, section []byte) (Config, error)

// SortMembers sorts members by IP (numerically) then port, and drops
// duplicates; an enabled duplicate wins over a disabled one.
func SortMembers(members []Member) []Member {
	slices.SortFunc(members, compareMembers)
	out := members[:0]
	for _, m := range members {
		if n := len(out); n > 0 && out[n-1].IP == m.IP && out[n-1].Port == m.Port {
			out[n-1].Enabled = out[n-1].Enabled || m.Enabled
			continue
		}
		out = append(out, m)
	}
	return out
}

func compareMembers(a, b Member) int {
	if c := compareIP(a.IP, b.IP); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

func compareIP(a, b string) int {
	x, errA := netip.ParseAddr(a)
	y, errB := netip.ParseAddr(b)
	if errA != nil || errB != nil {
		return cmp.Compare(a, b)
	}
	return x.Compare(y)
}

// SortListeners sorts listeners by protocol then port.
func SortListeners(ls []Listener) {
	slices.SortFunc(ls, func(a, b Listener) int {
		if c := cmp.Compare(a.Protocol, b.Protocol); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	})
}
