package avi

import (
	"cmp"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"fmt"
	"slices"

	"github.com/nodeportlocal/npl/lbmodel"
)

// An L7 load balancer is, on the controller: its VsVip, one Pool per model
// pool, one SSLKeyAndCertificate per TLS Secret, an HTTPPolicySet whose
// request rules match host and path and switch to a pool, and a virtual
// service with the HTTP application profile (System-Secure-HTTP with TLS)
// whose services are the listeners (SSL on HTTPS ones) and whose pool is the
// default pool. Every object carries the loadbalancer marker, so List finds
// them all.

// The controller's system objects an L7 load balancer uses.
const (
	applicationProfileHTTP  = "System-HTTP"
	applicationProfileHTTPS = "System-Secure-HTTP"
	sslProfile              = "System-Standard"
)

type certSpec struct {
	Name        string  `json:"name"`
	Fingerprint string  `json:"fingerprint"`
	Markers     markers `json:"markers"`
}

// httpRuleSpec is one request rule: a host (empty: any; *.x: a suffix), a
// path test, and the pool it switches to. The fields after Pool are a
// Gateway's (gateway.go), omitted when empty so that the checksums of
// Ingress rules stay as they were.
type httpRuleSpec struct {
	Name   string `json:"name"`
	Host   string `json:"host,omitempty"`
	Path   string `json:"path"`
	Prefix bool   `json:"prefix,omitempty"`
	Pool   string `json:"pool"`
	// PoolGroup is the pool group the rule switches to.
	PoolGroup string `json:"poolGroup,omitempty"`
	// Ports are the listener ports matched (vs_port IS_IN).
	Ports []int32 `json:"ports,omitempty"`
	// Method is the method matched, as Avi spells it (HTTP_METHOD_GET).
	Method string `json:"method,omitempty"`
	// Headers must all be present with exactly these values.
	Headers    []lbmodel.ValueMatch `json:"headers,omitempty"`
	HdrActions []hdrActionSpec      `json:"hdrActions,omitempty"`
	Rewrite    *rewriteSpec         `json:"rewrite,omitempty"`
	Redirect   *redirectSpec        `json:"redirect,omitempty"`
	// Local is the status code of a local response.
	Local string `json:"local,omitempty"`
	// Foreign describes what the controller holds that the provider never
	// makes, so that such a rule reads as different and is rewritten.
	Foreign string `json:"foreign,omitempty"`
}

// hdrActionSpec replaces, adds or removes a request header.
type hdrActionSpec struct {
	Action string `json:"action"`
	Name   string `json:"name"`
	Value  string `json:"value,omitempty"`
}

// rewriteSpec sets the host header and the path (without its leading /)
// of the request sent to the pool; empty keeps them.
type rewriteSpec struct {
	Host string `json:"host,omitempty"`
	Path string `json:"path,omitempty"`
}

// redirectSpec is a redirect: protocol and port always, host and path
// (without its leading /) when they change, and the status code.
type redirectSpec struct {
	Protocol string `json:"protocol"`
	Host     string `json:"host,omitempty"`
	Port     int32  `json:"port"`
	Path     string `json:"path,omitempty"`
	Status   string `json:"status"`
}

type httpPolicySpec struct {
	Name    string         `json:"name"`
	Rules   []httpRuleSpec `json:"rules"`
	Markers markers        `json:"markers"`
}

// l7Layout is every Avi object of one L7 load balancer, as desired.
type l7Layout struct {
	name   string
	vsvip  vsvipSpec
	pools  []poolSpec // sorted by name
	certs  []certSpec // sorted by name
	policy httpPolicySpec
	vs     vsSpec
	// groups are the pool groups of a Gateway's load balancer, sorted by
	// name.
	groups []poolGroupSpec
	// noHTTP is set for a Gateway's load balancer without HTTP and HTTPS
	// listeners: it has no HTTP policy set nor HTTP virtual service.
	noHTTP bool
	// l4 is the L4 virtual service of a Gateway's TCP and UDP listeners;
	// nil when it has none.
	l4 *gatewayL4
	// tls holds the certificate and key of each certificate, by Avi name.
	tls map[string]lbmodel.TLSCert
	// objects are the monitors and persistence profiles of the pools'
	// policies.
	objects policyObjects
}

func (l *l7Layout) poolNames() map[string]bool {
	return nameSet(l.pools, func(s poolSpec) string { return s.Name })
}

func (l *l7Layout) groupNames() map[string]bool {
	return nameSet(l.groups, func(s poolGroupSpec) string { return s.Name })
}

func (l *l7Layout) certNames() map[string]bool {
	return nameSet(l.certs, func(s certSpec) string { return s.Name })
}

// planL7 lays an L7 load balancer out, a model that passed
// lbmodel.Normalize. It makes no call.
func (p *Provider) planL7(lb *lbmodel.LoadBalancer) (*l7Layout, error) {
	if !lbmodel.OwnedBy(p.cfg.ClusterName, lb.Name) {
		return nil, fmt.Errorf("name %q does not start with the cluster name %q and --", lb.Name, p.cfg.ClusterName)
	}
	name := lbmodel.Shorten(lb.Name, maxNameLength)
	mk := markers{Cluster: p.cfg.ClusterName, Ingress: lb.Ingress, LB: lb.Name, Gateway: lb.Gateway}
	l := &l7Layout{name: name, tls: map[string]lbmodel.TLSCert{}}

	l.vsvip = vsvipSpec{Name: name, Cloud: p.cfg.Cloud, Network: p.cfg.VIPNetwork, Markers: mk}
	if lb.RequestedVIP != "" {
		l.vsvip.Network, l.vsvip.Address = "", lb.RequestedVIP
	}

	aviPool := map[string]string{} // model name -> Avi name
	var aviGroup map[string]string // model name -> Avi pool group name (a Gateway's)
	if lb.Gateway != "" {
		var err error
		if aviGroup, err = p.planGatewayPools(l, lb, mk); err != nil {
			return nil, err
		}
		if err := p.planGatewayL4(l, lb, mk); err != nil {
			return nil, err
		}
	}
	ingressPools := lb.Pools
	if lb.Gateway != "" {
		ingressPools = nil // laid out as pool groups above
	}
	for _, pl := range ingressPools {
		poolName := lbmodel.Shorten(pl.Name, maxNameLength)
		if slices.ContainsFunc(l.pools, func(ps poolSpec) bool { return ps.Name == poolName }) {
			return nil, fmt.Errorf("pools %s: two shorten to one name", pl.Name)
		}
		pmk := mk
		if poolName != pl.Name {
			pmk.Name = pl.Name
		}
		aviPool[pl.Name] = poolName
		spec := poolSpec{Name: poolName, Cloud: p.cfg.Cloud, Members: pl.Members, Markers: pmk}
		p.poolPolicy(&l.objects, &spec, pl, monitorTCP, 1)
		l.pools = append(l.pools, spec)
	}
	slices.SortFunc(l.pools, func(a, b poolSpec) int { return cmp.Compare(a.Name, b.Name) })

	algorithms := map[string]string{}
	for _, c := range lb.HTTP.TLS {
		certName := lbmodel.Shorten(lbmodel.CertificateName(lb.Name, c.Secret), maxNameLength)
		pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("TLS Secret %s: %w", c.Secret, err)
		}
		// The controller serves one RSA and one EC certificate per virtual
		// service; more would need SNI child virtual services.
		alg := keyAlgorithm(pair.PrivateKey)
		if other, taken := algorithms[alg]; taken {
			return nil, fmt.Errorf("TLS Secrets %s and %s both hold %s keys: an Avi virtual service serves one RSA and one EC certificate",
				other, c.Secret, alg)
		}
		algorithms[alg] = c.Secret
		cmk := mk
		cmk.Secret, cmk.Hosts = c.Secret, slices.Clone(c.Hosts)
		l.certs = append(l.certs, certSpec{Name: certName, Fingerprint: c.Fingerprint, Markers: cmk})
		l.tls[certName] = c
	}
	slices.SortFunc(l.certs, func(a, b certSpec) int { return cmp.Compare(a.Name, b.Name) })

	l.policy = httpPolicySpec{Name: name, Rules: []httpRuleSpec{}, Markers: mk}
	listeners := map[int32]lbmodel.Protocol{}
	for _, ln := range lb.Listeners {
		listeners[ln.Port] = ln.Protocol
	}
	for i, r := range lb.HTTP.Rules { // sorted by lbmodel.Normalize
		if lb.Gateway != "" {
			l.policy.Rules = append(l.policy.Rules, gatewayRules(i, r, listeners, aviGroup)...)
			continue
		}
		for j, m := range r.PathMatches() {
			l.policy.Rules = append(l.policy.Rules, httpRuleSpec{
				Name: fmt.Sprintf("rule-%d.%d", i, j), Host: r.Host, Path: m.Path, Prefix: m.Prefix, Pool: aviPool[r.Pool],
			})
		}
	}
	if lb.Gateway != "" && lb.HTTP.DefaultPool == "" {
		l.policy.Rules = append(l.policy.Rules, noMatchRule)
	}

	l.vs = vsSpec{
		Name: name, Cloud: p.cfg.Cloud, ServiceEngineGroup: p.cfg.ServiceEngineGroup,
		VsVip: name, HTTPPolicySet: name, ApplicationProfile: applicationProfileHTTP, NetworkProfile: profileTCPProxy,
		DefaultPool: aviPool[lb.HTTP.DefaultPool], DefaultPoolGroup: aviGroup[lb.HTTP.DefaultPool], Markers: mk,
	}
	if len(l.certs) > 0 {
		l.vs.ApplicationProfile, l.vs.SSLProfile = applicationProfileHTTPS, sslProfile
		for _, c := range l.certs {
			l.vs.Certificates = append(l.vs.Certificates, c.Name)
		}
	}
	for _, ln := range lb.Listeners {
		if ln.Protocol == lbmodel.HTTP || ln.Protocol == lbmodel.HTTPS {
			l.vs.Services = append(l.vs.Services, serviceSpec{Port: ln.Port, SSL: ln.Protocol == lbmodel.HTTPS})
		}
	}
	l.noHTTP = lb.Gateway != "" && len(l.vs.Services) == 0
	sortServices(l.vs.Services)
	return l, nil
}

func keyAlgorithm(key any) string {
	switch key.(type) {
	case *rsa.PrivateKey:
		return "RSA"
	case *ecdsa.PrivateKey, ed25519.PrivateKey:
		return "EC"
	}
	return fmt.Sprintf("%T", key)
}
