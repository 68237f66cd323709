package avi

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/vmware/alb-sdk/go/models"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/providers"
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
// path test, and the pool it switches to.
type httpRuleSpec struct {
	Name   string `json:"name"`
	Host   string `json:"host,omitempty"`
	Path   string `json:"path"`
	Prefix bool   `json:"prefix,omitempty"`
	Pool   string `json:"pool"`
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
	// tls holds the certificate and key of each certificate, by Avi name.
	tls map[string]providers.TLSCert
}

func (l *l7Layout) poolNames() map[string]bool {
	out := make(map[string]bool, len(l.pools))
	for _, p := range l.pools {
		out[p.Name] = true
	}
	return out
}

func (l *l7Layout) certNames() map[string]bool {
	out := make(map[string]bool, len(l.certs))
	for _, c := range l.certs {
		out[c.Name] = true
	}
	return out
}

// planL7 lays an L7 load balancer out, a model that passed
// providers.Normalize. It makes no call.
func (p *Provider) planL7(lb *providers.LoadBalancer) (*l7Layout, error) {
	if !providers.OwnedBy(p.cfg.ClusterName, lb.Name) {
		return nil, fmt.Errorf("name %q does not start with the cluster name %q and --", lb.Name, p.cfg.ClusterName)
	}
	name := providers.Shorten(lb.Name, maxNameLength)
	mk := markers{Cluster: p.cfg.ClusterName, Ingress: lb.Ingress, LB: lb.Name}
	l := &l7Layout{name: name, tls: map[string]providers.TLSCert{}}

	l.vsvip = vsvipSpec{Name: name, Cloud: p.cfg.Cloud, Network: p.cfg.VIPNetwork, Markers: mk}
	if lb.RequestedVIP != "" {
		l.vsvip.Network, l.vsvip.Address = "", lb.RequestedVIP
	}

	aviPool := map[string]string{} // model name -> Avi name
	for _, pl := range lb.Pools {
		poolName := providers.Shorten(pl.Name, maxNameLength)
		if slices.ContainsFunc(l.pools, func(ps poolSpec) bool { return ps.Name == poolName }) {
			return nil, fmt.Errorf("pools %s: two shorten to one name", pl.Name)
		}
		pmk := mk
		if poolName != pl.Name {
			pmk.Name = pl.Name
		}
		aviPool[pl.Name] = poolName
		l.pools = append(l.pools, poolSpec{Name: poolName, Cloud: p.cfg.Cloud, Monitors: []string{monitorTCP},
			Members: pl.Members, Graceful: gracefulDisableTimeout, Markers: pmk})
	}
	slices.SortFunc(l.pools, func(a, b poolSpec) int { return cmp.Compare(a.Name, b.Name) })

	algorithms := map[string]string{}
	for _, c := range lb.HTTP.TLS {
		certName := providers.Shorten(providers.CertificateName(lb.Name, c.Secret), maxNameLength)
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
	for i, r := range lb.HTTP.Rules { // sorted by providers.Normalize
		for j, m := range r.PathMatches() {
			l.policy.Rules = append(l.policy.Rules, httpRuleSpec{
				Name: fmt.Sprintf("rule-%d.%d", i, j), Host: r.Host, Path: m.Path, Prefix: m.Prefix, Pool: aviPool[r.Pool],
			})
		}
	}

	l.vs = vsSpec{
		Name: name, Cloud: p.cfg.Cloud, ServiceEngineGroup: p.cfg.ServiceEngineGroup,
		VsVip: name, HTTPPolicySet: name, ApplicationProfile: applicationProfileHTTP, NetworkProfile: profileTCPProxy,
		DefaultPool: aviPool[lb.HTTP.DefaultPool], Markers: mk,
	}
	if len(l.certs) > 0 {
		l.vs.ApplicationProfile, l.vs.SSLProfile = applicationProfileHTTPS, sslProfile
		for _, c := range l.certs {
			l.vs.Certificates = append(l.vs.Certificates, c.Name)
		}
	}
	for _, ln := range lb.Listeners {
		l.vs.Services = append(l.vs.Services, serviceSpec{Port: ln.Port, SSL: ln.Protocol == providers.HTTPS})
	}
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

var (
	certKind = objKind[models.SSLKeyAndCertificate]{
		typ:   "sslkeyandcertificate",
		meta:  func(o *models.SSLKeyAndCertificate) (**string, **string) { return &o.UUID, &o.LastModified },
		owner: func(o *models.SSLKeyAndCertificate) string { return deref(o.CreatedBy) },
	}
	httpPolicyKind = objKind[models.HTTPPolicySet]{
		typ:   "httppolicyset",
		meta:  func(o *models.HTTPPolicySet) (**string, **string) { return &o.UUID, &o.LastModified },
		owner: func(o *models.HTTPPolicySet) string { return deref(o.CreatedBy) },
	}
)

// Reading specs back.

// certSpecOf reads a certificate back: the controller shows the certificate,
// never the key, which the certificate binds.
func certSpecOf(o *models.SSLKeyAndCertificate) certSpec {
	s := certSpec{Name: deref(o.Name), Markers: markersOf(o.Markers)}
	if o.Certificate != nil {
		s.Fingerprint = providers.CertFingerprint([]byte(deref(o.Certificate.Certificate)))
	}
	return s
}

// httpRulesOf reads the request rules of a policy set in index order. A
// match the provider does not make reads as a rule no model gives, so that
// it is rewritten.
func httpRulesOf(o *models.HTTPPolicySet) []httpRuleSpec {
	if o.HTTPRequestPolicy == nil {
		return []httpRuleSpec{}
	}
	rules := slices.Clone(o.HTTPRequestPolicy.Rules)
	rules = slices.DeleteFunc(rules, func(r *models.HTTPRequestRule) bool { return r == nil })
	slices.SortStableFunc(rules, func(a, b *models.HTTPRequestRule) int {
		return cmp.Compare(derefInt(a.Index), derefInt(b.Index))
	})
	out := make([]httpRuleSpec, 0, len(rules))
	for _, r := range rules {
		rs := httpRuleSpec{Name: deref(r.Name)}
		if r.Enable != nil && !*r.Enable {
			rs.Name += " (disabled)"
		}
		if m := r.Match; m != nil {
			if h := m.HostHdr; h != nil {
				switch v := h.Value; {
				case deref(h.MatchCriteria) == "HDR_EQUALS" && len(v) == 1:
					rs.Host = v[0]
				case deref(h.MatchCriteria) == "HDR_ENDS_WITH" && len(v) == 1 && strings.HasPrefix(v[0], "."):
					rs.Host = "*" + v[0]
				default:
					rs.Host = fmt.Sprintf("%s %v", deref(h.MatchCriteria), v)
				}
			}
			if pm := m.Path; pm != nil {
				switch c := deref(pm.MatchCriteria); {
				case len(pm.MatchStr) != 1 || len(pm.StringGroupRefs) > 0 || (c != "EQUALS" && c != "BEGINS_WITH"):
					rs.Path = fmt.Sprintf("%s %v", c, pm.MatchStr)
				default:
					rs.Path, rs.Prefix = pm.MatchStr[0], c == "BEGINS_WITH"
				}
			}
		}
		if sw := r.SwitchingAction; sw != nil && deref(sw.Action) == "HTTP_SWITCHING_SELECT_POOL" {
			rs.Pool = refName(sw.PoolRef)
		}
		out = append(out, rs)
	}
	return out
}

func httpPolicySpecOf(o *models.HTTPPolicySet) httpPolicySpec {
	return httpPolicySpec{Name: deref(o.Name), Rules: httpRulesOf(o), Markers: markersOf(o.Markers)}
}

func derefInt(i *int32) int32 {
	if i == nil {
		return 0
	}
	return *i
}

// Building the objects to send.

func (p *Provider) certModel(s certSpec, c providers.TLSCert) *models.SSLKeyAndCertificate {
	return &models.SSLKeyAndCertificate{
		Name:        ptr(s.Name),
		Type:        ptr("SSL_CERTIFICATE_TYPE_VIRTUALSERVICE"),
		Certificate: &models.SSLCertificate{Certificate: ptr(string(c.CertPEM))},
		Key:         ptr(string(c.KeyPEM)),
		CreatedBy:   ptr(p.owner),
		Markers:     markerLabels(s.Markers),
	}
}

func (p *Provider) httpPolicyModel(s httpPolicySpec, poolURLs map[string]*string) *models.HTTPPolicySet {
	o := &models.HTTPPolicySet{
		Name:              ptr(s.Name),
		CreatedBy:         ptr(p.owner),
		Markers:           markerLabels(s.Markers),
		CloudConfigCksum:  ptr(checksum(s)),
		HTTPRequestPolicy: &models.HTTPRequestPolicy{},
	}
	for i, r := range s.Rules {
		match := &models.MatchTarget{Path: &models.PathMatch{
			MatchCriteria: ptr("EQUALS"), MatchCase: ptr("SENSITIVE"), MatchStr: []string{r.Path},
		}}
		if r.Prefix {
			match.Path.MatchCriteria = ptr("BEGINS_WITH")
		}
		switch {
		case strings.HasPrefix(r.Host, "*."):
			match.HostHdr = &models.HostHdrMatch{MatchCriteria: ptr("HDR_ENDS_WITH"), MatchCase: ptr("INSENSITIVE"),
				Value: []string{r.Host[1:]}}
		case r.Host != "":
			match.HostHdr = &models.HostHdrMatch{MatchCriteria: ptr("HDR_EQUALS"), MatchCase: ptr("INSENSITIVE"),
				Value: []string{r.Host}}
		}
		o.HTTPRequestPolicy.Rules = append(o.HTTPRequestPolicy.Rules, &models.HTTPRequestRule{
			Name:   ptr(r.Name),
			Index:  ptr(int32(i + 1)),
			Enable: ptr(true),
			Match:  match,
			SwitchingAction: &models.HttpswitchingAction{
				Action:  ptr("HTTP_SWITCHING_SELECT_POOL"),
				PoolRef: objectRef(poolURLs[r.Pool]),
			},
		})
	}
	return o
}

// l7Current is what the controller holds for one L7 load balancer.
type l7Current struct {
	vsvip  *models.VsVip
	policy *models.HTTPPolicySet
	vs     *models.VirtualService
	// pools and certs are ours and wanted, by name; the stale ones are ours,
	// of this load balancer, and no longer wanted.
	pools      map[string]*models.Pool
	stalePools []*models.Pool
	certs      map[string]*models.SSLKeyAndCertificate
	staleCerts []*models.SSLKeyAndCertificate
}

// readL7 fetches the objects of the L7 load balancer lbName (Avi name
// aviName) in five reads, more when shortened names are wanted.
func (p *Provider) readL7(s *aviSession, lbName, aviName string, wantPools, wantCerts map[string]bool) (*l7Current, error) {
	ours := url.Values{"created_by": {p.owner}}
	cur := &l7Current{pools: map[string]*models.Pool{}, certs: map[string]*models.SSLKeyAndCertificate{}}
	var err error
	if cur.vs, err = getByName[models.VirtualService](s, vsKind.typ, aviName, ours); err != nil {
		return nil, fmt.Errorf("read virtualservice %s: %w", aviName, err)
	}
	if cur.policy, err = getByName[models.HTTPPolicySet](s, httpPolicyKind.typ, aviName, ours); err != nil {
		return nil, fmt.Errorf("read httppolicyset %s: %w", aviName, err)
	}
	if cur.vsvip, err = getByName[models.VsVip](s, vsvipKind.typ, aviName, nil); err != nil {
		return nil, fmt.Errorf("read vsvip %s: %w", aviName, err)
	}
	// Part names start with the load balancer's name and "-", as far as a
	// shortened name keeps it.
	prefix := lbName + "-"
	if keep := maxNameLength - shortenedSuffixLength; len(prefix) > keep {
		prefix = prefix[:keep]
	}
	byLB := url.Values{"name.contains": {prefix}, "created_by": {p.owner}}
	if cur.pools, cur.stalePools, err = readParts(s, poolKind, lbName, byLB, wantPools,
		func(o *models.Pool) (string, markers) { return deref(o.Name), markersOf(o.Markers) }); err != nil {
		return nil, err
	}
	if cur.certs, cur.staleCerts, err = readParts(s, certKind, lbName, byLB, wantCerts,
		func(o *models.SSLKeyAndCertificate) (string, markers) { return deref(o.Name), markersOf(o.Markers) }); err != nil {
		return nil, err
	}
	return cur, nil
}

// readParts reads the objects of typ that belong to the L7 load balancer
// lbName: those named like it, sorted into wanted and stale (marked as its
// own), and the wanted ones whose shortened names are not like it.
func readParts[T any](s *aviSession, k objKind[T], lbName string, query url.Values, wanted map[string]bool,
	describe func(*T) (string, markers)) (map[string]*T, []*T, error) {
	found, err := list[T](s, k.typ, query)
	if err != nil {
		return nil, nil, fmt.Errorf("read %ss of %s: %w", k.typ, lbName, err)
	}
	current := map[string]*T{}
	var stale []*T
	for _, o := range found {
		n, mk := describe(o)
		switch {
		case wanted[n]:
			current[n] = o
		case mk.LB == lbName:
			stale = append(stale, o)
		}
	}
	prefix := query.Get("name.contains")
	for n := range wanted {
		if current[n] != nil || strings.Contains(n, prefix) {
			continue
		}
		o, err := getByName[T](s, k.typ, n, url.Values{"created_by": query["created_by"]})
		if err != nil {
			return nil, nil, fmt.Errorf("read %s %s: %w", k.typ, n, err)
		}
		if o != nil {
			current[n] = o
		}
	}
	return current, stale, nil
}

// ensureL7 makes the controller's objects match an L7 load balancer: VsVip,
// pools, certificates, HTTP policy set, virtual service, then it deletes the
// certificates and pools no longer wanted. Objects in sync cost no write.
func (p *Provider) ensureL7(ctx context.Context, lb *providers.LoadBalancer) (providers.Status, error) {
	want, err := p.planL7(lb)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure %s: %w", lb.Name, err)
	}
	s, err := p.acquire(ctx)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure %s: %w", lb.Name, err)
	}
	defer p.release(s)
	defer s.auth.bind(ctx)()
	log := klog.FromContext(ctx).WithValues("loadBalancer", lb.Name)

	cur, err := p.readL7(s, lb.Name, want.name, want.poolNames(), want.certNames())
	if err != nil {
		return providers.Status{}, err
	}
	vsvip, err := p.applyVsVip(s, log, want.vsvip, cur.vsvip)
	if err != nil {
		return providers.Status{}, err
	}
	poolURLs, err := p.applyPools(s, log, want.pools, cur.pools)
	if err != nil {
		return providers.Status{}, err
	}
	var certURLs []*string
	for _, spec := range want.certs {
		sum := checksum(spec)
		cert, err := apply(s, p, log, certKind, spec.Name, cur.certs[spec.Name],
			func(*models.SSLKeyAndCertificate) *models.SSLKeyAndCertificate {
				return p.certModel(spec, want.tls[spec.Name])
			},
			func(o *models.SSLKeyAndCertificate) bool { return checksum(certSpecOf(o)) == sum })
		if err != nil {
			return providers.Status{}, err
		}
		certURLs = append(certURLs, cert.URL)
	}
	policySum := checksum(want.policy)
	policy, err := apply(s, p, log, httpPolicyKind, want.name, cur.policy,
		func(*models.HTTPPolicySet) *models.HTTPPolicySet { return p.httpPolicyModel(want.policy, poolURLs) },
		func(o *models.HTTPPolicySet) bool {
			return deref(o.CloudConfigCksum) == policySum && checksum(httpPolicySpecOf(o)) == policySum
		})
	if err != nil {
		return providers.Status{}, err
	}
	refs := vsRefs{vsvip: vsvip.URL, httpPolicy: policy.URL, certificates: certURLs}
	if want.vs.DefaultPool != "" {
		refs.defaultPool = poolURLs[want.vs.DefaultPool]
	}
	vsSum := checksum(want.vs)
	if _, err := apply(s, p, log, vsKind, want.name, cur.vs,
		func(*models.VirtualService) *models.VirtualService { return p.vsModel(want.vs, refs) },
		func(o *models.VirtualService) bool {
			return deref(o.CloudConfigCksum) == vsSum && checksum(vsSpecOf(o)) == vsSum
		}); err != nil {
		return providers.Status{}, err
	}
	for _, o := range cur.staleCerts {
		if err := remove(s, certKind.typ, deref(o.UUID)); err != nil {
			return providers.Status{}, fmt.Errorf("delete sslkeyandcertificate %s: %w", deref(o.Name), err)
		}
		log.V(2).Info("Deleted Avi object", "type", certKind.typ, "name", deref(o.Name))
	}
	if err := removePools(s, log, cur.stalePools); err != nil {
		return providers.Status{}, err
	}
	return providers.Status{VIPs: vipsOf(vsvip)}, nil
}

// l7Victims lists, in delete order, the objects of the L7 load balancer
// lbName: virtual service, HTTP policy set, certificates, pools, VsVip.
func (p *Provider) l7Victims(s *aviSession, lbName string) ([]victim, error) {
	aviName := providers.Shorten(lbName, maxNameLength)
	cur, err := p.readL7(s, lbName, aviName, nil, nil)
	if err != nil {
		return nil, err
	}
	var out []victim
	if cur.vs != nil {
		out = append(out, victim{vsKind.typ, aviName, deref(cur.vs.UUID)})
	}
	if cur.policy != nil {
		out = append(out, victim{httpPolicyKind.typ, aviName, deref(cur.policy.UUID)})
	}
	for _, o := range cur.staleCerts {
		out = append(out, victim{certKind.typ, deref(o.Name), deref(o.UUID)})
	}
	for _, o := range cur.stalePools {
		out = append(out, victim{poolKind.typ, deref(o.Name), deref(o.UUID)})
	}
	if cur.vsvip != nil && vsvipKind.owner(cur.vsvip) == p.cfg.ClusterName {
		out = append(out, victim{vsvipKind.typ, aviName, deref(cur.vsvip.UUID)})
	}
	return out, nil
}

// l7Parts are the objects of one L7 load balancer that List found.
type l7Parts struct {
	vs     *models.VirtualService
	policy *models.HTTPPolicySet
	vsvip  *models.VsVip
	pools  []*models.Pool
	certs  []*models.SSLKeyAndCertificate
}

// groupL7 assembles L7 load balancers from the objects marked with one, and
// returns the objects left for the L4 grouping.
func (p *Provider) groupL7(vss []*models.VirtualService, policies []*models.HTTPPolicySet, pools []*models.Pool,
	certs []*models.SSLKeyAndCertificate, vsvips []*models.VsVip) (
	out []providers.LoadBalancer, restVSs []*models.VirtualService, restPools []*models.Pool, restVsVips []*models.VsVip) {
	byLB := map[string]*l7Parts{}
	get := func(name string) *l7Parts {
		if byLB[name] == nil {
			byLB[name] = &l7Parts{}
		}
		return byLB[name]
	}
	for _, o := range vss {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).vs = o
		} else {
			restVSs = append(restVSs, o)
		}
	}
	for _, o := range policies {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).policy = o
		}
	}
	for _, o := range pools {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).pools = append(get(lb).pools, o)
		} else {
			restPools = append(restPools, o)
		}
	}
	for _, o := range certs {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).certs = append(get(lb).certs, o)
		}
	}
	for _, o := range vsvips {
		mk := markersOf(o.Markers)
		switch {
		case mk.Cluster != p.cfg.ClusterName:
		case mk.LB != "":
			get(mk.LB).vsvip = o
		default:
			restVsVips = append(restVsVips, o)
		}
	}
	for name, pt := range byLB {
		out = append(out, l7Model(name, pt))
	}
	return out, restVSs, restPools, restVsVips
}

// l7Model is the load balancer that the objects pt hold.
func l7Model(name string, pt *l7Parts) providers.LoadBalancer {
	lb := providers.LoadBalancer{Name: name, Kind: providers.L7, Listeners: []providers.Listener{},
		VIPs: vipsOf(pt.vsvip), HTTP: &providers.HTTPRoutes{Rules: []providers.Rule{}}}
	modelPool := map[string]string{} // Avi name -> model name
	for _, o := range pt.pools {
		mk := markersOf(o.Markers)
		n := cmp.Or(mk.Name, deref(o.Name))
		modelPool[deref(o.Name)] = n
		lb.Pools = append(lb.Pools, providers.Pool{Name: n, Members: membersOf(o)})
		lb.Ingress = cmp.Or(lb.Ingress, mk.Ingress)
	}
	providers.SortPools(lb.Pools)
	poolName := func(avi string) string { return cmp.Or(modelPool[avi], avi) }
	if pt.vs != nil {
		lb.Ingress = cmp.Or(markersOf(pt.vs.Markers).Ingress, lb.Ingress)
		for _, svc := range pt.vs.Services {
			if svc == nil || svc.Port == nil {
				continue
			}
			proto := providers.HTTP
			if svc.EnableSsl != nil && *svc.EnableSsl {
				proto = providers.HTTPS
			}
			lb.Listeners = append(lb.Listeners, providers.Listener{Port: *svc.Port, Protocol: proto})
		}
		providers.SortListeners(lb.Listeners)
		if d := refName(pt.vs.PoolRef); d != "" {
			lb.HTTP.DefaultPool = poolName(d)
		}
	}
	if pt.policy != nil {
		lb.HTTP.Rules = rulesFromPolicy(httpRulesOf(pt.policy), poolName)
	}
	for _, o := range pt.certs {
		s := certSpecOf(o)
		lb.HTTP.TLS = append(lb.HTTP.TLS, providers.TLSCert{Secret: s.Markers.Secret, Hosts: s.Markers.Hosts,
			Fingerprint: s.Fingerprint})
	}
	slices.SortFunc(lb.HTTP.TLS, func(a, b providers.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
	return lb
}

// rulesFromPolicy turns request rules back into model rules: the rules
// rule-<i>.<j> of one i are the path tests of one model rule.
func rulesFromPolicy(specs []httpRuleSpec, poolName func(string) string) []providers.Rule {
	type group struct {
		host, pool string
		matches    []providers.PathMatch
	}
	var order []string
	groups := map[string]*group{}
	for _, r := range specs {
		key, _, _ := strings.Cut(strings.TrimPrefix(r.Name, "rule-"), ".")
		if _, err := strconv.Atoi(key); err != nil {
			key = r.Name
		}
		g := groups[key]
		if g == nil {
			g = &group{host: r.Host, pool: r.Pool}
			groups[key] = g
			order = append(order, key)
		}
		g.matches = append(g.matches, providers.PathMatch{Path: r.Path, Prefix: r.Prefix})
	}
	rules := []providers.Rule{}
	for _, key := range order {
		g := groups[key]
		path, typ, ok := providers.PathOf(g.matches)
		if !ok {
			continue // not a rule the provider makes; Ensure rewrites it
		}
		rules = append(rules, providers.Rule{Host: g.host, Path: path, PathType: typ, Pool: poolName(g.pool)})
	}
	providers.SortRules(rules)
	return rules
}
