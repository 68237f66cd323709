package haproxy

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/nodeportlocal/npl/lbmodel"
)

// The load balancer model as HAProxy's proxies, and back: ProxiesOf turns
// the load balancers an edge serves into frontends and backends,
// LoadBalancers reads the running configuration and its servers' states
// back into the model.

// Served reports whether HAProxy serves listeners of protocol p: TCP,
// HTTP, HTTPS and TLS; UDP it cannot.
func Served(p lbmodel.Protocol) bool {
	return p == lbmodel.TCP || p == lbmodel.HTTP || p == lbmodel.HTTPS || p == lbmodel.TLS
}

// Desired is a load balancer HAProxy is to serve, of cluster, on its one
// VIP (lb.VIPs[0]).
type Desired struct {
	Cluster string
	LB      *lbmodel.LoadBalancer
}

// Files name the edge's files the configuration refers to.
type Files struct {
	// Cert names the file of a certificate and its key by fingerprint.
	Cert func(fingerprint string) string
	// CA names the file of CA certificates (PEM) by their data.
	CA func(pemData string) string
}

// backend is the backend of pool p of load balancer lb of cluster, served
// on vip.
func (f Files) backend(cluster string, lb *lbmodel.LoadBalancer, vip netip.Addr, p lbmodel.Pool, http bool) Backend {
	b := Backend{Name: p.Name, Cluster: cluster, LoadBalancer: lb.Name, HTTP: http, Members: p.Members, Policy: p.Policy,
		IPv6: vip.Is6()}
	if http {
		b.InvalidWeight, b.AppProtocol = p.InvalidWeight, p.AppProtocol
	}
	if http && p.Policy != nil && p.Policy.BackendTLS != nil && !p.Policy.BackendTLS.SystemCAs {
		b.CAFile = f.CA(p.Policy.BackendTLS.CACertPEM)
	}
	return b
}

// ProxiesOf returns the frontends and backends that serve lbs, sorted by
// name: per L4 listener a TCP frontend and its pool's backend; per L7 load
// balancer those of addL7. Listeners HAProxy does not serve (Served) have
// none.
func ProxiesOf(lbs []Desired, files Files) Proxies {
	var out Proxies
	for _, d := range lbs {
		lb := d.LB
		vip := netip.MustParseAddr(lb.VIPs[0])
		if lb.IsL7() {
			out.addL7(d.Cluster, lb, vip, files)
			continue
		}
		for _, l := range lb.Listeners {
			if !Served(l.Protocol) {
				continue
			}
			out.Frontends = append(out.Frontends, Frontend{Name: l.Pool.Name, Cluster: d.Cluster, LoadBalancer: lb.Name,
				Service: lb.Service, VIP: vip, Port: l.Port, DefaultBackend: l.Pool.Name})
			out.Backends = append(out.Backends, files.backend(d.Cluster, lb, vip, l.Pool, false))
		}
	}
	slices.SortFunc(out.Frontends, func(a, b Frontend) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Backends, func(a, b Backend) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// addL7 adds the proxies of L7 load balancer lb of cluster on vip: an
// HTTP-mode frontend per HTTP and HTTPS listener, with its rules and
// certificates, and an HTTP-mode backend per pool; a TCP-mode frontend and
// backend per TCP listener (a Gateway's, as an L4 listener); a TCP-mode
// frontend per TLS listener, with its SNI routes, and a TCP-mode copy of
// each pool they name.
func (out *Proxies) addL7(cluster string, lb *lbmodel.LoadBalancer, vip netip.Addr, files Files) {
	front := func(l lbmodel.Listener) Frontend {
		return Frontend{Name: lbmodel.ListenerName(lb.Name, l.Protocol, l.Port),
			Cluster: cluster, LoadBalancer: lb.Name, Service: lb.Service, Ingress: lb.Ingress, Gateway: lb.Gateway,
			VIP: vip, Port: l.Port}
	}
	certs := func(f *Frontend) {
		for _, c := range lb.HTTP.TLS {
			if onPort(c.Ports, f.Port) {
				f.Certificates = append(f.Certificates, CertFile{Path: files.Cert(c.Fingerprint), Cert: c.WithoutKeys()})
			}
		}
	}
	tlsPools := map[string]bool{}
	for _, l := range lb.Listeners {
		f := front(l)
		switch l.Protocol {
		case lbmodel.HTTP, lbmodel.HTTPS:
			f.HTTP, f.DefaultBackend = true, lb.HTTP.DefaultPool
			for _, r := range lb.HTTP.Rules {
				if onPort(r.Ports, l.Port) {
					f.Rules = append(f.Rules, r)
				}
			}
			if l.Protocol == lbmodel.HTTPS {
				certs(&f)
				if v := l.ClientValidation; v != nil {
					f.ClientCA = &ClientCA{Path: files.CA(v.CACertPEM), Validation: *v}
				}
				f.Hostnames = l.Hostnames
			}
		case lbmodel.TCP:
			f.Listener, f.DefaultBackend = lbmodel.TCP, l.Pool.Name
			out.Backends = append(out.Backends, files.backend(cluster, lb, vip, l.Pool, false))
		case lbmodel.TLS:
			f.Listener, f.SNI = lbmodel.TLS, l.SNI
			if l.Terminate {
				certs(&f)
			}
			for _, r := range l.SNI {
				tlsPools[r.Pool] = true
			}
		default:
			continue // not served here (UDP)
		}
		out.Frontends = append(out.Frontends, f)
	}
	for _, p := range lb.Pools {
		out.Backends = append(out.Backends, files.backend(cluster, lb, vip, p, true))
		if tlsPools[p.Name] {
			b := files.backend(cluster, lb, vip, p, false)
			b.Name, b.Pool = TLSBackendName(p.Name), p.Name
			out.Backends = append(out.Backends, b)
		}
	}
}

// onPort reports whether a rule or certificate of ports (every listener
// when empty) serves the listener of port.
func onPort(ports []int32, port int32) bool {
	return len(ports) == 0 || slices.Contains(ports, port)
}

// LoadBalancers returns the load balancers of cluster that px, a
// configuration read back (Parse), serves, by name: its frontends and
// rules, with the members states (ShowServersState) holds now and the
// weight of each pool's invalid server (none when it is out of rotation).
// Listeners, pools and rules are in no order.
func LoadBalancers(px Proxies, states []ServerState, cluster string) map[string]*lbmodel.LoadBalancer {
	servers := map[string][]lbmodel.Member{}
	invalid := map[string]int32{}
	for _, s := range states {
		if s.Name == InvalidServer {
			if s.Enabled() {
				invalid[s.Backend] = int32(s.Weight)
			}
			continue
		}
		servers[s.Backend] = append(servers[s.Backend], lbmodel.Member{IP: s.IP.String(), Port: s.Port, Enabled: s.Enabled(),
			Weight: s.ModelWeight()})
	}
	policies := map[string]*lbmodel.Policy{}
	for _, b := range px.Backends {
		policies[b.Name] = b.Policy
	}
	pool := func(name, appProtocol string) lbmodel.Pool {
		members := lbmodel.SortMembers(servers[name])
		if members == nil {
			members = []lbmodel.Member{}
		}
		return lbmodel.Pool{Name: name, AppProtocol: appProtocol, Members: members, InvalidWeight: invalid[name], Policy: policies[name]}
	}
	lbs := map[string]*lbmodel.LoadBalancer{}
	seenRules := map[string]map[string]bool{} // load balancer -> rule MatchKeys
	for _, f := range px.Frontends {
		if f.Cluster != cluster {
			continue
		}
		lb := lbs[f.LoadBalancer]
		if lb == nil {
			lb = &lbmodel.LoadBalancer{Name: f.LoadBalancer, Service: f.Service, Ingress: f.Ingress, Gateway: f.Gateway}
			lbs[f.LoadBalancer] = lb
		}
		if vip := f.VIP.String(); !slices.Contains(lb.VIPs, vip) {
			lb.VIPs = append(lb.VIPs, vip)
		}
		if !f.HTTP && f.Listener == "" {
			lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: f.Port, Protocol: lbmodel.TCP, Pool: pool(f.DefaultBackend, "")})
			continue
		}
		// Each listener has the rules and certificates of its port: the
		// load balancer's are their union.
		lb.Kind = lbmodel.L7
		if lb.HTTP == nil {
			lb.HTTP = &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}
		}
		for _, c := range f.Certificates {
			if !slices.ContainsFunc(lb.HTTP.TLS, func(o lbmodel.TLSCert) bool { return o.Secret == c.Cert.Secret }) {
				lb.HTTP.TLS = append(lb.HTTP.TLS, c.Cert)
			}
		}
		switch f.Listener {
		case lbmodel.TCP:
			lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: f.Port, Protocol: lbmodel.TCP, Pool: pool(f.DefaultBackend, "")})
			continue
		case lbmodel.TLS:
			lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: f.Port, Protocol: lbmodel.TLS, SNI: f.SNI,
				Terminate: len(f.Certificates) > 0})
			continue
		}
		lb.HTTP.DefaultPool = f.DefaultBackend
		protocol := lbmodel.HTTP
		if len(f.Certificates) > 0 {
			protocol = lbmodel.HTTPS
		}
		l := lbmodel.Listener{Port: f.Port, Protocol: protocol, Hostnames: f.Hostnames}
		if f.ClientCA != nil {
			v := f.ClientCA.Validation
			l.ClientValidation = &v
		}
		lb.Listeners = append(lb.Listeners, l)
		seen := seenRules[lb.Name]
		if seen == nil {
			seen = map[string]bool{}
			seenRules[lb.Name] = seen
		}
		for _, r := range f.Rules {
			// A rule of several ports is on each of their frontends; two
			// rules of a load balancer never have the same MatchKey.
			if k := r.MatchKey(); !seen[k] {
				seen[k] = true
				lb.HTTP.Rules = append(lb.HTTP.Rules, r)
			}
		}
	}
	for _, b := range px.Backends {
		if lb := lbs[b.LoadBalancer]; b.Cluster == cluster && b.HTTP && lb != nil && lb.IsL7() {
			lb.Pools = append(lb.Pools, pool(b.Name, b.AppProtocol))
		}
	}
	return lbs
}

// Weight is HAProxy's weight of member m's server: the model's 0 is
// HAProxy's default, 1.
func Weight(m lbmodel.Member) int {
	if m.Weight == 0 {
		return 1
	}
	return int(m.Weight)
}

// ModelWeight is the model's weight of the server: HAProxy's default, 1,
// is the model's 0.
func (s ServerState) ModelWeight() int32 {
	if s.Weight == 1 {
		return 0
	}
	return int32(s.Weight)
}
