package avi

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/vmware/alb-sdk/go/models"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbmodel"
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
}

func (l *l7Layout) poolNames() map[string]bool {
	out := make(map[string]bool, len(l.pools))
	for _, p := range l.pools {
		out[p.Name] = true
	}
	return out
}

func (l *l7Layout) groupNames() map[string]bool {
	out := make(map[string]bool, len(l.groups))
	for _, g := range l.groups {
		out[g.Name] = true
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
		l.pools = append(l.pools, poolSpec{Name: poolName, Cloud: p.cfg.Cloud, Monitors: []string{monitorTCP},
			Members: pl.Members, Graceful: gracefulDisableTimeout, Markers: pmk})
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
		s.Fingerprint = lbmodel.CertFingerprint([]byte(deref(o.Certificate.Certificate)))
	}
	return s
}

// httpRulesOf reads the request rules of a policy set in index order. A
// match or action the provider does not make reads as a rule no model
// gives (Foreign), so that it is rewritten.
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
		var foreign []string
		if r.Enable != nil && !*r.Enable {
			rs.Name += " (disabled)"
			foreign = append(foreign, "disabled")
		}
		if m := r.Match; m != nil {
			readMatch(&rs, m, &foreign)
		}
		if sw := r.SwitchingAction; sw != nil {
			switch deref(sw.Action) {
			case "HTTP_SWITCHING_SELECT_POOL":
				rs.Pool = refName(sw.PoolRef)
			case "HTTP_SWITCHING_SELECT_POOLGROUP":
				rs.PoolGroup = refName(sw.PoolGroupRef)
			case "HTTP_SWITCHING_SELECT_LOCAL":
				rs.Local = deref(sw.StatusCode)
				if sw.File != nil {
					foreign = append(foreign, "file")
				}
			default:
				foreign = append(foreign, "switching "+deref(sw.Action))
			}
		}
		for _, a := range r.HdrAction {
			if a == nil || a.Hdr == nil || a.Cookie != nil || (a.Hdr.Value != nil && a.Hdr.Value.Var != nil) {
				foreign = append(foreign, "hdr_action")
				continue
			}
			ha := hdrActionSpec{Action: deref(a.Action), Name: deref(a.Hdr.Name)}
			if a.Hdr.Value != nil {
				ha.Value = deref(a.Hdr.Value.Val)
			}
			rs.HdrActions = append(rs.HdrActions, ha)
		}
		if w := r.RewriteURLAction; w != nil {
			rs.Rewrite = &rewriteSpec{Host: constantParam(w.HostHdr, &foreign), Path: constantParam(w.Path, &foreign)}
			if w.Query == nil || w.Query.KeepQuery == nil || !*w.Query.KeepQuery || w.Query.AddString != nil {
				foreign = append(foreign, "rewrite query")
			}
		}
		if d := r.RedirectAction; d != nil {
			rs.Redirect = &redirectSpec{Protocol: deref(d.Protocol), Host: constantParam(d.Host, &foreign),
				Path: constantParam(d.Path, &foreign), Status: deref(d.StatusCode)}
			if d.Port != nil {
				rs.Redirect.Port = *d.Port
			}
			if d.KeepQuery == nil || !*d.KeepQuery {
				foreign = append(foreign, "redirect drops the query")
			}
		}
		rs.Foreign = strings.Join(foreign, ", ")
		out = append(out, rs)
	}
	return out
}

// readMatch reads the host, path, port, method and header tests of a rule.
func readMatch(rs *httpRuleSpec, m *models.MatchTarget, foreign *[]string) {
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
	if vp := m.VsPort; vp != nil {
		if deref(vp.MatchCriteria) != "IS_IN" {
			*foreign = append(*foreign, "vs_port "+deref(vp.MatchCriteria))
		}
		for _, p := range vp.Ports {
			rs.Ports = append(rs.Ports, int32(p))
		}
	}
	if mm := m.Method; mm != nil {
		if deref(mm.MatchCriteria) != "IS_IN" || len(mm.Methods) != 1 {
			*foreign = append(*foreign, fmt.Sprintf("method %s %v", deref(mm.MatchCriteria), mm.Methods))
		} else {
			rs.Method = mm.Methods[0]
		}
	}
	for _, h := range m.Hdrs {
		if h == nil || deref(h.MatchCriteria) != "HDR_EQUALS" || deref(h.MatchCase) != "SENSITIVE" || len(h.Value) != 1 {
			*foreign = append(*foreign, "a header test")
			continue
		}
		rs.Headers = append(rs.Headers, lbmodel.ValueMatch{Name: deref(h.Hdr), Value: h.Value[0]})
	}
	if m.Query != nil || m.Cookie != nil || m.ClientIP != nil || m.Protocol != nil || m.Version != nil || m.IPReputationType != nil {
		*foreign = append(*foreign, "a test of query, cookie, client, protocol or version")
	}
}

// constantParam reads a URI parameter made of one constant string; any
// other reads as foreign.
func constantParam(p *models.URIParam, foreign *[]string) string {
	if p == nil {
		return ""
	}
	if deref(p.Type) != "URI_PARAM_TYPE_TOKENIZED" || len(p.Tokens) != 1 || p.Tokens[0] == nil ||
		deref(p.Tokens[0].Type) != "URI_TOKEN_TYPE_STRING" {
		*foreign = append(*foreign, "a URI parameter")
		return ""
	}
	return deref(p.Tokens[0].StrValue)
}

// uriConstant is a URI parameter of one constant string, nil for "".
func uriConstant(v string) *models.URIParam {
	if v == "" {
		return nil
	}
	return &models.URIParam{Type: ptr("URI_PARAM_TYPE_TOKENIZED"),
		Tokens: []*models.URIParamToken{{Type: ptr("URI_TOKEN_TYPE_STRING"), StrValue: ptr(v)}}}
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

func (p *Provider) certModel(s certSpec, c lbmodel.TLSCert) *models.SSLKeyAndCertificate {
	return &models.SSLKeyAndCertificate{
		Name:        ptr(s.Name),
		Type:        ptr("SSL_CERTIFICATE_TYPE_VIRTUALSERVICE"),
		Certificate: &models.SSLCertificate{Certificate: ptr(string(c.CertPEM))},
		Key:         ptr(string(c.KeyPEM)),
		CreatedBy:   ptr(p.owner),
		Markers:     markerLabels(s.Markers),
	}
}

func (p *Provider) httpPolicyModel(s httpPolicySpec, poolURLs, groupURLs map[string]*string) *models.HTTPPolicySet {
	o := &models.HTTPPolicySet{
		Name:              ptr(s.Name),
		CreatedBy:         ptr(p.owner),
		Markers:           markerLabels(s.Markers),
		CloudConfigCksum:  ptr(checksum(s)),
		HTTPRequestPolicy: &models.HTTPRequestPolicy{},
	}
	for i, r := range s.Rules {
		o.HTTPRequestPolicy.Rules = append(o.HTTPRequestPolicy.Rules, requestRule(i, r, poolURLs, groupURLs))
	}
	return o
}

// requestRule is the request rule of index i+1 that r describes.
func requestRule(i int, r httpRuleSpec, poolURLs, groupURLs map[string]*string) *models.HTTPRequestRule {
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
	if len(r.Ports) > 0 {
		match.VsPort = &models.PortMatch{MatchCriteria: ptr("IS_IN")}
		for _, p := range r.Ports {
			match.VsPort.Ports = append(match.VsPort.Ports, int64(p))
		}
	}
	if r.Method != "" {
		match.Method = &models.MethodMatch{MatchCriteria: ptr("IS_IN"), Methods: []string{r.Method}}
	}
	for _, h := range r.Headers {
		match.Hdrs = append(match.Hdrs, &models.HdrMatch{Hdr: ptr(h.Name), MatchCriteria: ptr("HDR_EQUALS"),
			MatchCase: ptr("SENSITIVE"), Value: []string{h.Value}})
	}
	out := &models.HTTPRequestRule{
		Name:   ptr(r.Name),
		Index:  ptr(int32(i + 1)),
		Enable: ptr(true),
		Match:  match,
	}
	switch {
	case r.PoolGroup != "":
		out.SwitchingAction = &models.HttpswitchingAction{
			Action: ptr("HTTP_SWITCHING_SELECT_POOLGROUP"), PoolGroupRef: objectRef(groupURLs[r.PoolGroup])}
	case r.Local != "":
		out.SwitchingAction = &models.HttpswitchingAction{Action: ptr("HTTP_SWITCHING_SELECT_LOCAL"), StatusCode: ptr(r.Local)}
	case r.Redirect != nil:
		d := r.Redirect
		out.RedirectAction = &models.HTTPRedirectAction{Protocol: ptr(d.Protocol), Port: ptr(d.Port),
			Host: uriConstant(d.Host), Path: uriConstant(d.Path), StatusCode: ptr(d.Status), KeepQuery: ptr(true)}
	default:
		out.SwitchingAction = &models.HttpswitchingAction{
			Action: ptr("HTTP_SWITCHING_SELECT_POOL"), PoolRef: objectRef(poolURLs[r.Pool])}
	}
	for _, a := range r.HdrActions {
		ha := &models.HTTPHdrAction{Action: ptr(a.Action), Hdr: &models.HTTPHdrData{Name: ptr(a.Name)}}
		if a.Action != hdrRemove {
			ha.Hdr.Value = &models.HTTPHdrValue{Val: ptr(a.Value)}
		}
		out.HdrAction = append(out.HdrAction, ha)
	}
	if w := r.Rewrite; w != nil {
		out.RewriteURLAction = &models.HTTPRewriteURLAction{HostHdr: uriConstant(w.Host), Path: uriConstant(w.Path),
			Query: &models.URIParamQuery{KeepQuery: ptr(true)}}
	}
	return out
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
	// groups and staleGroups are the pool groups of a Gateway's load
	// balancer, read only when wanted (wantGroups not nil).
	groups      map[string]*models.PoolGroup
	staleGroups []*models.PoolGroup
	// l4vs and l4policy are the L4 virtual service and policy set of a
	// Gateway's TCP and UDP listeners, read with the pool groups.
	l4vs     *models.VirtualService
	l4policy *models.L4PolicySet
}

// readL7 fetches the objects of the L7 load balancer lbName (Avi name
// aviName) in five reads, six with pool groups (wantGroups not nil), more
// when shortened names are wanted.
func (p *Provider) readL7(s *aviSession, lbName, aviName string, wantPools, wantCerts, wantGroups map[string]bool) (*l7Current, error) {
	ours := url.Values{"created_by": {p.owner}}
	cur := &l7Current{pools: map[string]*models.Pool{}, certs: map[string]*models.SSLKeyAndCertificate{},
		groups: map[string]*models.PoolGroup{}}
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
	if wantGroups != nil {
		if cur.groups, cur.staleGroups, err = readParts(s, poolGroupKind, lbName, byLB, wantGroups,
			func(o *models.PoolGroup) (string, markers) { return deref(o.Name), markersOf(o.Markers) }); err != nil {
			return nil, err
		}
		l4Name := lbmodel.Shorten(lbName+l4Suffix, maxNameLength)
		if cur.l4vs, err = getByName[models.VirtualService](s, vsKind.typ, l4Name, ours); err != nil {
			return nil, fmt.Errorf("read virtualservice %s: %w", l4Name, err)
		}
		if cur.l4policy, err = getByName[models.L4PolicySet](s, policyKind.typ, l4Name, ours); err != nil {
			return nil, fmt.Errorf("read l4policyset %s: %w", l4Name, err)
		}
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
func (p *Provider) ensureL7(ctx context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
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

	var wantGroups map[string]bool
	if lb.Gateway != "" {
		wantGroups = want.groupNames()
	}
	cur, err := p.readL7(s, lb.Name, want.name, want.poolNames(), want.certNames(), wantGroups)
	if err != nil {
		return providers.Status{}, err
	}
	vsvip, err := p.applyVsVip(s, log, want.vsvip, cur.vsvip)
	if err != nil {
		return providers.Status{}, err
	}
	// A member must never be in none of the pools, not even when a write
	// fails: pools that lose members are written last (stagePools).
	first, second := stagePools(want.pools, cur.pools)
	poolURLs, err := p.applyPools(s, log, first, cur.pools)
	if err != nil {
		return providers.Status{}, err
	}
	for _, spec := range second {
		poolURLs[spec.Name] = cur.pools[spec.Name].URL
	}
	groupURLs := make(map[string]*string, len(want.groups))
	for _, spec := range want.groups {
		sum := checksum(spec)
		group, err := apply(s, p, log, poolGroupKind, spec.Name, cur.groups[spec.Name],
			func(*models.PoolGroup) *models.PoolGroup { return p.poolGroupModel(spec, poolURLs) },
			func(o *models.PoolGroup) bool {
				return deref(o.CloudConfigCksum) == sum && checksum(poolGroupSpecOf(o)) == sum
			})
		if err != nil {
			return providers.Status{}, err
		}
		groupURLs[spec.Name] = group.URL
	}
	if _, err := p.applyPools(s, log, second, cur.pools); err != nil {
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
	if !want.noHTTP {
		if err := p.applyHTTP(s, log, want, cur, vsRefs{vsvip: vsvip.URL, certificates: certURLs}, poolURLs, groupURLs); err != nil {
			return providers.Status{}, err
		}
	}
	if want.l4 != nil {
		if err := p.applyGatewayL4(s, log, want.l4, cur, vsvip.URL, groupURLs); err != nil {
			return providers.Status{}, err
		}
	}
	// Virtual services and policy sets no longer wanted: the HTTP ones of a
	// Gateway left with TCP and UDP listeners only, the L4 ones of a Gateway
	// without them.
	var gone []victim
	if want.noHTTP && cur.vs != nil {
		gone = append(gone, victim{vsKind.typ, want.name, deref(cur.vs.UUID)})
	}
	if want.l4 == nil && cur.l4vs != nil {
		gone = append(gone, victim{vsKind.typ, deref(cur.l4vs.Name), deref(cur.l4vs.UUID)})
	}
	if want.noHTTP && cur.policy != nil {
		gone = append(gone, victim{httpPolicyKind.typ, want.name, deref(cur.policy.UUID)})
	}
	if want.l4 == nil && cur.l4policy != nil {
		gone = append(gone, victim{policyKind.typ, deref(cur.l4policy.Name), deref(cur.l4policy.UUID)})
	}
	for _, v := range gone {
		if err := remove(s, v.typ, v.uuid); err != nil {
			return providers.Status{}, fmt.Errorf("delete %s %s: %w", v.typ, v.name, err)
		}
		log.V(2).Info("Deleted Avi object", "type", v.typ, "name", v.name)
	}
	for _, o := range cur.staleCerts {
		if err := remove(s, certKind.typ, deref(o.UUID)); err != nil {
			return providers.Status{}, fmt.Errorf("delete sslkeyandcertificate %s: %w", deref(o.Name), err)
		}
		log.V(2).Info("Deleted Avi object", "type", certKind.typ, "name", deref(o.Name))
	}
	for _, o := range cur.staleGroups {
		if err := remove(s, poolGroupKind.typ, deref(o.UUID)); err != nil {
			return providers.Status{}, fmt.Errorf("delete poolgroup %s: %w", deref(o.Name), err)
		}
		log.V(2).Info("Deleted Avi object", "type", poolGroupKind.typ, "name", deref(o.Name))
	}
	if err := removePools(s, log, cur.stalePools); err != nil {
		return providers.Status{}, err
	}
	return providers.Status{VIPs: vipsOf(vsvip)}, nil
}

// applyHTTP makes the HTTP policy set and the HTTP virtual service of an L7
// load balancer match want; refs holds the VsVip and certificates.
func (p *Provider) applyHTTP(s *aviSession, log klog.Logger, want *l7Layout, cur *l7Current, refs vsRefs,
	poolURLs, groupURLs map[string]*string) error {
	policySum := checksum(want.policy)
	policy, err := apply(s, p, log, httpPolicyKind, want.name, cur.policy,
		func(*models.HTTPPolicySet) *models.HTTPPolicySet {
			return p.httpPolicyModel(want.policy, poolURLs, groupURLs)
		},
		func(o *models.HTTPPolicySet) bool {
			return deref(o.CloudConfigCksum) == policySum && checksum(httpPolicySpecOf(o)) == policySum
		})
	if err != nil {
		return err
	}
	refs.httpPolicy = policy.URL
	if want.vs.DefaultPool != "" {
		refs.defaultPool = poolURLs[want.vs.DefaultPool]
	}
	if want.vs.DefaultPoolGroup != "" {
		refs.defaultPoolGroup = groupURLs[want.vs.DefaultPoolGroup]
	}
	vsSum := checksum(want.vs)
	_, err = apply(s, p, log, vsKind, want.name, cur.vs,
		func(*models.VirtualService) *models.VirtualService { return p.vsModel(want.vs, refs) },
		func(o *models.VirtualService) bool {
			return deref(o.CloudConfigCksum) == vsSum && checksum(vsSpecOf(o)) == vsSum
		})
	return err
}

// applyGatewayL4 makes the L4 policy set and virtual service of a Gateway's
// TCP and UDP listeners match want, on the load balancer's VsVip.
func (p *Provider) applyGatewayL4(s *aviSession, log klog.Logger, want *gatewayL4, cur *l7Current, vsvip *string,
	groupURLs map[string]*string) error {
	policySum := checksum(want.policy)
	policy, err := apply(s, p, log, policyKind, want.name, cur.l4policy,
		func(*models.L4PolicySet) *models.L4PolicySet { return p.policyModel(want.policy, nil, groupURLs) },
		func(o *models.L4PolicySet) bool { return checksum(policySpecOf(o)) == policySum })
	if err != nil {
		return err
	}
	vsSum := checksum(want.vs)
	_, err = apply(s, p, log, vsKind, want.name, cur.l4vs,
		func(*models.VirtualService) *models.VirtualService {
			return p.vsModel(want.vs, vsRefs{vsvip: vsvip, l4Policy: policy.URL})
		},
		func(o *models.VirtualService) bool {
			return deref(o.CloudConfigCksum) == vsSum && checksum(vsSpecOf(o)) == vsSum
		})
	return err
}

// l7Victims lists, in delete order, the objects of the L7 load balancer
// lbName: virtual services (a Gateway's L4 one too), policy sets,
// certificates, pool groups (of a Gateway's), pools, VsVip.
func (p *Provider) l7Victims(s *aviSession, lbName string) ([]victim, error) {
	aviName := lbmodel.Shorten(lbName, maxNameLength)
	// Pool groups are read whatever the owner: names do not tell a
	// Gateway's load balancer from an Ingress's.
	cur, err := p.readL7(s, lbName, aviName, nil, nil, map[string]bool{})
	if err != nil {
		return nil, err
	}
	var out []victim
	if cur.vs != nil {
		out = append(out, victim{vsKind.typ, aviName, deref(cur.vs.UUID)})
	}
	if cur.l4vs != nil {
		out = append(out, victim{vsKind.typ, deref(cur.l4vs.Name), deref(cur.l4vs.UUID)})
	}
	if cur.policy != nil {
		out = append(out, victim{httpPolicyKind.typ, aviName, deref(cur.policy.UUID)})
	}
	if cur.l4policy != nil {
		out = append(out, victim{policyKind.typ, deref(cur.l4policy.Name), deref(cur.l4policy.UUID)})
	}
	for _, o := range cur.staleCerts {
		out = append(out, victim{certKind.typ, deref(o.Name), deref(o.UUID)})
	}
	for _, o := range cur.staleGroups {
		out = append(out, victim{poolGroupKind.typ, deref(o.Name), deref(o.UUID)})
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
	groups []*models.PoolGroup
	// l4vs and l4policy are a Gateway's L4 virtual service and policy set.
	l4vs     *models.VirtualService
	l4policy *models.L4PolicySet
}

// groupL7 assembles L7 load balancers from the objects marked with one, and
// returns the objects left for the L4 grouping. A virtual service or L4
// policy set named <lb>-L4 is the L4 part of a Gateway's load balancer.
func (p *Provider) groupL7(vss []*models.VirtualService, policies []*models.HTTPPolicySet, l4Policies []*models.L4PolicySet,
	pools []*models.Pool, groups []*models.PoolGroup, certs []*models.SSLKeyAndCertificate, vsvips []*models.VsVip) (
	out []lbmodel.LoadBalancer, restVSs []*models.VirtualService, restL4Policies []*models.L4PolicySet,
	restPools []*models.Pool, restVsVips []*models.VsVip) {
	byLB := map[string]*l7Parts{}
	get := func(name string) *l7Parts {
		if byLB[name] == nil {
			byLB[name] = &l7Parts{}
		}
		return byLB[name]
	}
	isL4 := func(lb string, name *string) bool {
		return deref(name) == lbmodel.Shorten(lb+l4Suffix, maxNameLength)
	}
	for _, o := range vss {
		switch lb := markersOf(o.Markers).LB; {
		case lb == "":
			restVSs = append(restVSs, o)
		case isL4(lb, o.Name):
			get(lb).l4vs = o
		default:
			get(lb).vs = o
		}
	}
	for _, o := range l4Policies {
		if lb := markersOf(o.Markers).LB; lb != "" && isL4(lb, o.Name) {
			get(lb).l4policy = o
		} else {
			restL4Policies = append(restL4Policies, o)
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
	for _, o := range groups {
		if lb := markersOf(o.Markers).LB; lb != "" {
			get(lb).groups = append(get(lb).groups, o)
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
	return out, restVSs, restL4Policies, restPools, restVsVips
}

// l7Model is the load balancer that the objects pt hold.
func l7Model(name string, pt *l7Parts) lbmodel.LoadBalancer {
	lb := lbmodel.LoadBalancer{Name: name, Kind: lbmodel.L7, Listeners: []lbmodel.Listener{},
		VIPs: vipsOf(pt.vsvip), HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}}
	modelPool := map[string]string{} // Avi name of a pool or pool group -> model name
	for _, o := range pt.pools {
		mk := markersOf(o.Markers)
		n := cmp.Or(mk.Name, deref(o.Name))
		modelPool[deref(o.Name)] = n
		lb.Ingress = cmp.Or(lb.Ingress, mk.Ingress)
		lb.Gateway = cmp.Or(lb.Gateway, mk.Gateway)
		if mk.Gateway == "" {
			lb.Pools = append(lb.Pools, lbmodel.Pool{Name: n, Members: membersOf(o)})
		}
	}
	for _, o := range pt.groups {
		mk := markersOf(o.Markers)
		modelPool[deref(o.Name)] = cmp.Or(mk.Name, deref(o.Name))
		lb.Gateway = cmp.Or(lb.Gateway, mk.Gateway)
	}
	if len(pt.groups) > 0 {
		// The pool groups the L4 rules select are listener pools.
		byGroup := map[string]lbmodel.Pool{}
		for i, pl := range gatewayPools(pt.groups, pt.pools) {
			byGroup[deref(pt.groups[i].Name)] = pl
		}
		listenerPools := map[string]bool{}
		if pt.l4policy != nil {
			lb.Gateway = cmp.Or(lb.Gateway, markersOf(pt.l4policy.Markers).Gateway)
			for _, r := range rulesOf(pt.l4policy) {
				pl, ok := byGroup[r.PoolGroup]
				if !ok {
					pl = lbmodel.Pool{Name: r.PoolGroup, Members: []lbmodel.Member{}}
				}
				listenerPools[r.PoolGroup] = true
				lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: r.Port, Protocol: r.Protocol, Pool: pl})
			}
		}
		for _, g := range pt.groups {
			if !listenerPools[deref(g.Name)] {
				lb.Pools = append(lb.Pools, byGroup[deref(g.Name)])
			}
		}
	}
	lbmodel.SortPools(lb.Pools)
	poolName := func(avi string) string { return cmp.Or(modelPool[avi], avi) }
	var https []int32
	if pt.vs != nil {
		mk := markersOf(pt.vs.Markers)
		lb.Ingress = cmp.Or(mk.Ingress, lb.Ingress)
		lb.Gateway = cmp.Or(mk.Gateway, lb.Gateway)
		for _, svc := range pt.vs.Services {
			if svc == nil || svc.Port == nil {
				continue
			}
			proto := lbmodel.HTTP
			if svc.EnableSsl != nil && *svc.EnableSsl {
				proto = lbmodel.HTTPS
				https = append(https, *svc.Port)
			}
			lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: *svc.Port, Protocol: proto})
		}
		slices.Sort(https)
		if d := cmp.Or(refName(pt.vs.PoolRef), refName(pt.vs.PoolGroupRef)); d != "" {
			lb.HTTP.DefaultPool = poolName(d)
		}
	}
	lbmodel.SortListeners(lb.Listeners)
	if pt.l4vs != nil {
		lb.Gateway = cmp.Or(lb.Gateway, markersOf(pt.l4vs.Markers).Gateway)
	}
	if pt.policy != nil {
		lb.HTTP.Rules = rulesFromPolicy(httpRulesOf(pt.policy), poolName)
	}
	for _, o := range pt.certs {
		s := certSpecOf(o)
		c := lbmodel.TLSCert{Secret: s.Markers.Secret, Hosts: s.Markers.Hosts, Fingerprint: s.Fingerprint}
		if lb.Gateway != "" {
			// A virtual service serves its certificates on every SSL port.
			c.Ports = slices.Clone(https)
		}
		lb.HTTP.TLS = append(lb.HTTP.TLS, c)
	}
	slices.SortFunc(lb.HTTP.TLS, func(a, b lbmodel.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
	return lb
}

// rulesFromPolicy turns request rules back into model rules: the rules
// rule-<i>.<j>[/...] of one i are the path tests (and, for a redirect that
// keeps the scheme, the listener ports) of one model rule.
func rulesFromPolicy(specs []httpRuleSpec, poolName func(string) string) []lbmodel.Rule {
	type group struct {
		first   httpRuleSpec
		flags   ruleFlags
		indexes []string
		matches []lbmodel.PathMatch
		ports   []int32
		bad     bool
	}
	var order []string
	groups := map[string]*group{}
	for _, r := range specs {
		if r.Name == noMatchRule.Name {
			continue // the answer to what no rule matches, not a model rule
		}
		f := parseRuleName(r.Name)
		g := groups[f.group]
		if g == nil {
			g = &group{first: r, flags: f}
			groups[f.group] = g
			order = append(order, f.group)
		}
		g.bad = g.bad || r.Foreign != ""
		g.ports = append(g.ports, r.Ports...)
		if !slices.Contains(g.indexes, f.index) {
			g.indexes = append(g.indexes, f.index)
			g.matches = append(g.matches, lbmodel.PathMatch{Path: r.Path, Prefix: r.Prefix})
		}
	}
	rules := []lbmodel.Rule{}
	for _, key := range order {
		g := groups[key]
		path, typ, ok := lbmodel.PathOf(g.matches)
		if !ok || g.bad {
			continue // not a rule the provider makes; Ensure rewrites it
		}
		slices.Sort(g.ports)
		r := lbmodel.Rule{Host: g.first.Host, Path: path, PathType: typ, Ports: slices.Compact(g.ports)}
		if pool := cmp.Or(g.first.Pool, g.first.PoolGroup); pool != "" {
			r.Pool = poolName(pool)
		}
		gatewayRule(&r, g.first, g.flags)
		rules = append(rules, r)
	}
	lbmodel.SortRules(rules)
	return rules
}

// stagePools orders the writes of the pool specs so that no member is ever
// in none of the load balancer's pools, whichever write fails. The first
// stage, before the pool groups, writes the new pools, those that gain
// members or keep their membership, and those that lose a member another
// pool gains (a Gateway member whose weight changed moves from one weight's
// pool to another's; two that swap weights make each pool gain and lose
// one): these keep the leaving member until the second stage. The second
// stage, after the pool groups, writes the pools that only lose members
// and the final membership of those the first stage kept a member in.
func stagePools(specs []poolSpec, cur map[string]*models.Pool) (first, second []poolSpec) {
	key := func(m lbmodel.Member) string { return net.JoinHostPort(m.IP, strconv.Itoa(int(m.Port))) }
	had := make(map[string]map[string]lbmodel.Member, len(specs))
	gained := map[string]bool{}
	for _, spec := range specs {
		had[spec.Name] = map[string]lbmodel.Member{}
		if c := cur[spec.Name]; c != nil {
			for _, m := range membersOf(c) {
				had[spec.Name][key(m)] = m
			}
		}
		for _, m := range spec.Members {
			if _, ok := had[spec.Name][key(m)]; !ok {
				gained[key(m)] = true
			}
		}
	}
	for _, spec := range specs {
		if cur[spec.Name] == nil {
			first = append(first, spec)
			continue
		}
		keep := maps.Clone(had[spec.Name])
		gains := false
		for _, m := range spec.Members {
			if _, ok := keep[key(m)]; !ok {
				gains = true
			}
			delete(keep, key(m))
		}
		var moving []lbmodel.Member
		for k, m := range keep {
			if gained[k] {
				moving = append(moving, m)
			}
		}
		switch {
		case len(keep) == 0:
			first = append(first, spec)
		case len(moving) > 0:
			bridge := spec
			bridge.Members = lbmodel.SortMembers(append(slices.Clone(spec.Members), moving...))
			first = append(first, bridge)
			second = append(second, spec)
		case gains:
			first = append(first, spec)
		default:
			second = append(second, spec)
		}
	}
	return first, second
}
