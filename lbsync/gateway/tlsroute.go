package gateway

import (
	"slices"

	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
)

// addTLSRoute adds the SNI routes of a TLSRoute to the TLS listeners it
// attaches to: one per effective host (the route's hostnames intersected
// with the listener's), to the pool of the route's one rule. An older
// route keeps a host another route also names. A route whose backendRefs
// are all invalid gets a pool without members: its connections are
// refused. Invalid backendRefs beside valid ones have no share, as on TCP
// routes.
func (b *build) addTLSRoute(at *attachment) {
	rt := at.route
	name := lbmodel.GatewayRoutePoolName(b.lbName, rt.kind, rt.meta.Namespace, rt.meta.Name, 0)
	// The plain stream of a Terminate listener goes to the pool: no TLS to
	// the Pods (backendTLS).
	b.terminated[rt.id()] = slices.ContainsFunc(at.on, func(o listenerHosts) bool { return o.l.terminate })
	for _, on := range at.on {
		port := on.l.spec.Port
		for _, h := range on.hosts {
			if slices.ContainsFunc(b.sni[port], func(s lbmodel.SNIRoute) bool { return s.Host == h }) {
				continue // an older route has it
			}
			if _, ok := b.pools[name]; !ok {
				p := b.backendPool(rt, 0, name, corev1.ProtocolTCP)
				b.pools[name] = &p.Pool
			}
			b.sni[port] = append(b.sni[port], lbmodel.SNIRoute{Host: h, Pool: name})
		}
	}
}
