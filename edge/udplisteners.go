package edge

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/edge/udp"
	"github.com/nodeportlocal/npl/lbmodel"
)

// The UDP listeners of the desired state (of Services and of Gateways) are
// served by the nftables table of package udp, the others by HAProxy.

// UDPNFTables and UDPOff are the values of api.Status.UDP.
const (
	UDPNFTables = "nftables"
	UDPOff      = "off"
)

// serves reports whether the edge serves listeners of protocol p.
func (e *Edge) serves(p lbmodel.Protocol) bool {
	return haproxy.Served(p) || (p == lbmodel.UDP && e.cfg.UDP != nil)
}

// conflicting reports whether two served listeners of protocols a and b on
// one VIP and port would take the same traffic: UDP only with UDP, the
// others (HAProxy's, over TCP) with each other.
func (e *Edge) conflicting(a, b lbmodel.Protocol) bool {
	if a == lbmodel.UDP || b == lbmodel.UDP {
		return a == b && e.serves(a)
	}
	return haproxy.Served(a) && haproxy.Served(b)
}

// unserved says why the edge does not serve a listener of protocol p on
// vip, "" when it does: no UDP at all, or none on the VIP's IP family
// (udp.Table.Unserved).
func (e *Edge) unserved(p lbmodel.Protocol, vip netip.Addr) string {
	switch {
	case haproxy.Served(p):
		return ""
	case p != lbmodel.UDP || e.cfg.UDP == nil:
		return api.ReasonNoUDP
	}
	return e.cfg.UDP.Unserved(vip)
}

func (e *Edge) udpMode() string {
	if e.cfg.UDP == nil {
		return UDPOff
	}
	return UDPNFTables
}

// udpListenersOf returns the UDP listeners of lb, a canonical model.
func udpListenersOf(lb *lbmodel.LoadBalancer) []udp.Listener {
	var out []udp.Listener
	vip := netip.MustParseAddr(lb.VIPs[0])
	for _, l := range lb.Listeners {
		if l.Protocol == lbmodel.UDP {
			out = append(out, udp.Listener{VIP: vip, Port: l.Port, Members: l.Pool.Members})
		}
	}
	return out
}

// checkUDP refuses UDP listeners the table cannot serve (members of the
// other IP family than the VIP).
func checkUDP(lb *lbmodel.LoadBalancer) error {
	if err := udp.Validate(udpListenersOf(lb)); err != nil {
		return fmt.Errorf("%w: load balancer %s: %v", ErrInvalid, lb.Name, err)
	}
	return nil
}

// convergeUDP makes the table serve the UDP listeners of the desired state,
// unless the change was refused (err is ErrRejected or ErrInvalid: the
// caller puts the previous desired state back). Called by converge, with
// e.mu held.
func (e *Edge) convergeUDP(ctx context.Context, changed *bool, err *error) {
	if e.cfg.UDP == nil || errors.Is(*err, ErrRejected) || errors.Is(*err, ErrInvalid) {
		return
	}
	// The table leaves out those it does not serve (udp.Table.Unserved),
	// which Put answers unsupported, with the reason.
	var listeners []udp.Listener
	for _, lb := range e.desired {
		listeners = append(listeners, udpListenersOf(lb)...)
	}
	c, uerr := e.cfg.UDP.Sync(ctx, listeners)
	if c {
		*changed = true
	}
	if uerr != nil {
		*err = errors.Join(*err, fmt.Errorf("UDP listeners: %w", uerr))
	}
}

// startUDP serves the UDP listeners of the saved state at once, whether or
// not HAProxy starts.
func (e *Edge) startUDP(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var changed bool
	var err error
	if e.convergeUDP(ctx, &changed, &err); err != nil {
		klog.FromContext(ctx).Error(err, "Serve the UDP listeners of the saved state")
	}
}

// listUDP adds to lbs the UDP listeners of cluster's load balancers as the
// table serves them: the VIP, port, members, weights and drain states read
// back from the kernel, the names and owners from the desired state (the
// table has no room for them). A listener the table does not serve is left
// out.
func (e *Edge) listUDP(ctx context.Context, cluster string, lbs map[string]*lbmodel.LoadBalancer) error {
	if e.cfg.UDP == nil {
		return nil
	}
	e.mu.Lock()
	var mine []*lbmodel.LoadBalancer // models are replaced, never changed
	for k, lb := range e.desired {
		if k.cluster == cluster {
			mine = append(mine, lb)
		}
	}
	e.mu.Unlock()
	served, err := e.cfg.UDP.Served(ctx)
	if err != nil {
		return fmt.Errorf("%w: read the UDP listeners back: %v", ErrUnavailable, err)
	}
	for _, d := range mine {
		vip := netip.MustParseAddr(d.VIPs[0])
		for _, l := range d.Listeners {
			members, ok := served[udp.Key{VIP: vip, Port: l.Port}]
			if l.Protocol != lbmodel.UDP || !ok {
				continue
			}
			lb := lbs[d.Name]
			if lb == nil {
				lb = &lbmodel.LoadBalancer{Name: d.Name, Service: d.Service, Ingress: d.Ingress, Gateway: d.Gateway,
					Kind: d.Kind, VIPs: []string{vip.String()}}
				if d.IsL7() {
					lb.HTTP = &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}
				}
				lbs[d.Name] = lb
			}
			lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: l.Port, Protocol: lbmodel.UDP,
				Pool: lbmodel.Pool{Name: l.Pool.Name, Members: members}})
		}
	}
	return nil
}

// registerUDP registers the metrics of the UDP listeners' table, when the
// edge serves UDP.
func (e *Edge) registerUDP(reg prometheus.Registerer) {
	t := e.cfg.UDP
	if t == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "npl_edge_udp_table_writes_total",
			Help: "nftables transactions that changed the UDP listeners' table."}, func() float64 { return float64(t.Writes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "npl_edge_udp_listeners",
			Help: "UDP listeners the nftables table serves, as last written."}, func() float64 { return float64(t.Listeners()) }),
	)
}
