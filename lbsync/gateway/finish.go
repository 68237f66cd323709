package gateway

import (
	"cmp"
	"slices"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// The model's listeners, certificates, pools and rule order, once every
// route is in.

// finish sets the listeners, certificates, pools, rule order and ports of
// the model.
func (b *build) finish(lb *lbmodel.LoadBalancer, ls []*listener) {
	served := map[portKey]bool{}
	certs := map[string]*lbmodel.TLSCert{}
	for _, l := range ls {
		if !l.served() {
			continue
		}
		port := l.spec.Port
		key := portKey{port, l.spec.Protocol == gatewayv1.UDPProtocolType}
		if !served[key] {
			served[key] = true
			lb.Listeners = append(lb.Listeners, b.modelListener(l))
		}
		for _, c := range l.certs {
			if have := certs[c.Secret]; have != nil {
				have.Ports = append(have.Ports, c.Ports...)
				have.Hosts = append(have.Hosts, c.Hosts...)
				continue
			}
			c := c
			certs[c.Secret] = &c
		}
	}
	lbmodel.SortListeners(lb.Listeners)
	misdirectedHostnames(lb, ls)
	for _, c := range certs {
		slices.Sort(c.Ports)
		c.Ports = slices.Compact(c.Ports)
		slices.Sort(c.Hosts)
		c.Hosts = slices.Compact(c.Hosts)
		lb.HTTP.TLS = append(lb.HTTP.TLS, *c)
	}
	slices.SortFunc(lb.HTTP.TLS, func(a, b lbmodel.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })

	// Order: the position of (route, rule index) among all; routes come
	// oldest first and rules by index, so first seen is first.
	rank := map[ruleOrigin]int32{}
	for _, o := range b.origins {
		if _, ok := rank[o]; !ok {
			rank[o] = int32(len(rank))
		}
	}
	rules := lb.HTTP.Rules[:0]
	seen := map[string]bool{}
	for i, r := range lb.HTTP.Rules {
		r.Order = rank[b.origins[i]]
		if seen[r.MatchKey()] {
			continue // an older rule matches the same requests
		}
		seen[r.MatchKey()] = true
		rules = append(rules, r)
	}
	for _, r := range isolation(ls) {
		if !seen[r.MatchKey()] {
			seen[r.MatchKey()] = true
			rules = append(rules, r)
		}
	}
	lb.HTTP.Rules = rules
	for _, p := range b.pools {
		lb.Pools = append(lb.Pools, *p)
		b.countReady(*p)
	}
	for _, l := range lb.Listeners {
		b.countReady(l.Pool)
	}
	lbmodel.SortPools(lb.Pools)
	lbmodel.SortRules(lb.HTTP.Rules)
}

// misdirectedHostnames gives each HTTPS listener of lb whose port serves
// Gateway listeners of two or more hostnames ("" for none) those hostnames,
// so that a request whose Host another listener takes than the one its TLS
// server name selected is answered 421 (Gateway API's misdirected
// requests, lbmodel.Listener.Hostnames).
func misdirectedHostnames(lb *lbmodel.LoadBalancer, ls []*listener) {
	hosts := map[int32][]string{}
	for _, l := range ls {
		if l.served() && l.spec.Protocol == gatewayv1.HTTPSProtocolType && !slices.Contains(hosts[l.spec.Port], l.hostname) {
			hosts[l.spec.Port] = append(hosts[l.spec.Port], l.hostname)
		}
	}
	for i := range lb.Listeners {
		if h := hosts[lb.Listeners[i].Port]; lb.Listeners[i].Protocol == lbmodel.HTTPS && len(h) > 1 {
			lbmodel.SortHostnames(h)
			lb.Listeners[i].Hostnames = h
		}
	}
}

// modelListener is the model's listener of a served listener (the first
// of its port): HTTP and HTTPS without pool (HTTPS with its port's client
// validation), TCP and UDP with the pool of
// their oldest route (none attached: a pool without members), TLS with
// the SNI routes of its port.
func (b *build) modelListener(l *listener) lbmodel.Listener {
	port := l.spec.Port
	switch l.spec.Protocol {
	case gatewayv1.HTTPSProtocolType:
		return lbmodel.Listener{Port: port, Protocol: lbmodel.HTTPS, ClientValidation: l.clientValidation}
	case gatewayv1.TCPProtocolType, gatewayv1.UDPProtocolType:
		proto := lbmodel.Protocol(l.spec.Protocol)
		pool := lbmodel.Pool{Name: lbmodel.PoolName(b.lbName, proto, port), Members: []lbmodel.Member{}}
		if l.pool != nil {
			pool = *l.pool
		}
		return lbmodel.Listener{Port: port, Protocol: proto, Pool: pool}
	case gatewayv1.TLSProtocolType:
		sni := b.sni[port]
		lbmodel.SortSNI(sni)
		return lbmodel.Listener{Port: port, Protocol: lbmodel.TLS, SNI: sni, Terminate: l.terminate}
	}
	return lbmodel.Listener{Port: port, Protocol: lbmodel.HTTP}
}

func (b *build) countReady(p lbmodel.Pool) {
	for _, m := range p.Members {
		if m.Enabled {
			b.r.ReadyBackends++
		}
	}
}
