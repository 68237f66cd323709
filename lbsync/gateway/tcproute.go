package gateway

import (
	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
)

// addStreamRoute gives the TCP or UDP listeners a TCPRoute or UDPRoute
// (udproute.go) attaches to its pool, unless an older route has: Gateway
// API sends a listener's connections to one route, the oldest
// (tcproute-multiple-routes-attachment), while every attached route is
// Accepted. The pool holds the members of the route's one rule, weighted
// by the backendRefs' weights, from Service ports of the listener's
// protocol; a route whose backendRefs are all invalid gives a pool without
// members, which refuses connections. Invalid backendRefs beside valid ones
// have no share (a connection cannot be answered 500): the valid ones take
// every connection.
func (b *build) addStreamRoute(at *attachment) {
	rt := at.route
	proto := corev1.ProtocolTCP
	if rt.kind == KindUDPRoute {
		proto = corev1.ProtocolUDP
	}
	for _, on := range at.on {
		l := on.l
		if l.pool != nil {
			continue
		}
		p := b.backendPool(rt, 0, lbmodel.PoolName(b.lbName, lbmodel.Protocol(l.spec.Protocol), l.spec.Port), proto)
		l.pool = &p.Pool
	}
}
