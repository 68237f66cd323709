package ingress

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
)

// Ports of the listeners of every L7 load balancer.
const (
	HTTPPort  = 80
	HTTPSPort = 443
)

// Input is everything Build reads. Build does not modify it.
type Input struct {
	// ClusterName prefixes the load balancer's name.
	ClusterName string
	// ServiceType and Family are as for builder.Input: what a pool member
	// is, and the IP family of members.
	ServiceType string
	Family      string
	// Ingresses are the Ingresses to build one load balancer for: exactly
	// one, unless SharedVIP.
	Ingresses []*networkingv1.Ingress
	// SharedVIP builds the one load balancer that all Ingresses of
	// IngressClass share: their rules on one VIP. Ingresses are then all of
	// them; on a conflict (the same host and path, two default backends)
	// the oldest Ingress wins.
	SharedVIP    bool
	IngressClass string
	// Services, Pods, Nodes and Secrets are candidates, for
	// example those of the Ingresses' namespaces; Build matches namespaces
	// and names itself. Nodes are as for builder.Input.
	Services []*corev1.Service
	Pods     []*corev1.Pod
	Nodes    []*corev1.Node
	Secrets  []*corev1.Secret
	// EndpointSlices are the hand-written slices of the backend Services:
	// they choose the Pods of a Service without a selector.
	EndpointSlices []*discoveryv1.EndpointSlice
	// AgentPorts is as for builder.Input: which annotation entries may be
	// members (Nodes are then the Pods' nodes).
	AgentPorts contract.PortRange
}

// LoadBalancerName returns the name of the load balancer that serves ing:
// its own, or with sharedVIP the one of its class.
func LoadBalancerName(clusterName string, ing *networkingv1.Ingress, sharedVIP bool, class string) string {
	if sharedVIP {
		return lbmodel.SharedIngressLoadBalancerName(clusterName, class)
	}
	return lbmodel.IngressLoadBalancerName(clusterName, ing.Namespace, ing.Name)
}

// Build returns the L7 load balancer model of in.Ingresses and a report. The
// model is nil when the input cannot give one (no Ingress, several without
// SharedVIP, an unknown service type or family); the reason is in
// Report.Errors. Otherwise:
//
//   - every rule path becomes a Rule to the pool of its backend Service
//     port, one pool per (namespace, Service, port) whose members are built
//     exactly as for a LoadBalancer Service; Exact paths stay exact,
//     Prefix and ImplementationSpecific paths are prefixes;
//   - the default backend becomes the default pool;
//   - the listener HTTP/80 always exists, HTTPS/443 when at least one TLS
//     Secret gave a certificate. A TLS entry whose Secret is missing or
//     invalid is left out and reported as an error: its hosts are served
//     on HTTP only until the Secret is fixed, since a load balancer cannot
//     serve HTTPS without a certificate;
//   - a backend that cannot give members (missing Service or port, a
//     NodePort Service in NodePortLocal mode) keeps its rule with an empty
//     pool, so its requests are refused rather than sent to another rule.
func Build(in Input) (*lbmodel.LoadBalancer, builder.Report) {
	var r builder.Report
	switch {
	case len(in.Ingresses) == 0:
		r.Errors = append(r.Errors, "no Ingress to build from")
		return nil, r
	case len(in.Ingresses) > 1 && !in.SharedVIP:
		r.Errors = append(r.Errors, fmt.Sprintf("%d Ingresses without a shared VIP: build each on its own", len(in.Ingresses)))
		return nil, r
	case in.SharedVIP && in.IngressClass == "":
		r.Errors = append(r.Errors, "a shared VIP needs the IngressClass name")
		return nil, r
	case slices.Contains(in.Ingresses, nil):
		r.Errors = append(r.Errors, "a nil Ingress")
		return nil, r
	}
	mode, _, err := builder.Settings(in.ServiceType, in.Family)
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return nil, r
	}

	ingresses := slices.Clone(in.Ingresses)
	slices.SortStableFunc(ingresses, olderFirst)
	lb, refused := buildFrom(in, mode, ingresses, &r)
	if len(refused) == 0 {
		return lb, r
	}
	// An Ingress that would make the shared model invalid or too large is
	// left out whole, and the others are built again without it.
	var kept []*networkingv1.Ingress
	var r2 builder.Report
	for _, ing := range ingresses {
		if why, out := refused[ing]; out {
			r2.Errors = append(r2.Errors, fmt.Sprintf("ingress %s/%s: left out of the shared load balancer: %s", ing.Namespace, ing.Name, why))
		} else {
			kept = append(kept, ing)
		}
	}
	if len(kept) == 0 {
		return nil, r2
	}
	lb, _ = buildFrom(in, mode, kept, &r2)
	return lb, r2
}

// buildFrom builds the model of ingresses, oldest first, into r, and
// returns, on a shared VIP, the Ingresses to leave out and why: one that
// adds more than lbmodel.MaxObjectRules rules, one that would take the
// model over lbmodel.MaxModelBytes, or one whose model alone breaks
// lbmodel's rules when the whole does.
func buildFrom(in Input, mode string, ingresses []*networkingv1.Ingress, r *builder.Report) (*lbmodel.LoadBalancer, map[*networkingv1.Ingress]string) {
	b := &build{in: in, mode: mode, r: r, pools: map[string]*lbmodel.Pool{}, certs: map[string]*lbmodel.TLSCert{},
		rules: map[ruleKey]ruleOrigin{}}
	b.index()
	lb := &lbmodel.LoadBalancer{Kind: lbmodel.L7, HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}}
	if in.SharedVIP {
		lb.Name = lbmodel.SharedIngressLoadBalancerName(in.ClusterName, in.IngressClass)
		for _, ing := range ingresses {
			if v := ing.Annotations[contract.LoadBalancerIPKey]; v != "" {
				b.warnf(ing, "annotation %s ignored: the Ingresses of class %s share one VIP", contract.LoadBalancerIPKey, in.IngressClass)
			}
		}
	} else {
		ing := ingresses[0]
		lb.Name = lbmodel.IngressLoadBalancerName(in.ClusterName, ing.Namespace, ing.Name)
		lb.Ingress = ing.Namespace + "/" + ing.Name
		lb.RequestedVIP = requestedVIP(ing, b.r)
	}
	b.lbName = lb.Name
	if in.SharedVIP {
		b.claimHosts(ingresses)
	}
	refused := map[*networkingv1.Ingress]string{}
	size := 0
	for _, ing := range ingresses {
		rules, pools := len(lb.HTTP.Rules), len(b.poolOrder)
		b.add(ing, lb)
		added := lb.HTTP.Rules[rules:]
		n := lbmodel.JSONSize(added) + b.certBytes[ing]
		for _, name := range b.poolOrder[pools:] {
			n += lbmodel.JSONSize(b.pools[name])
		}
		// The Ingresses refused here are built again without: they take
		// no room from the newer ones.
		switch {
		case !in.SharedVIP:
		case len(added) > lbmodel.MaxObjectRules:
			refused[ing] = fmt.Sprintf("it adds %d rules, more than %d", len(added), lbmodel.MaxObjectRules)
		case size+n > lbmodel.MaxModelBytes:
			refused[ing] = fmt.Sprintf("with its %d bytes the model would take more than %d: the older Ingresses fill it", n, lbmodel.MaxModelBytes)
		default:
			size += n
		}
	}

	lb.Listeners = []lbmodel.Listener{{Port: HTTPPort, Protocol: lbmodel.HTTP}}
	for _, c := range b.certs {
		slices.Sort(c.Hosts)
		c.Hosts = slices.Compact(c.Hosts)
		lb.HTTP.TLS = append(lb.HTTP.TLS, *c)
	}
	if len(lb.HTTP.TLS) > 0 {
		lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: HTTPSPort, Protocol: lbmodel.HTTPS})
		slices.SortFunc(lb.HTTP.TLS, func(a, b lbmodel.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
	}
	lbmodel.SortListeners(lb.Listeners)
	for _, p := range b.pools {
		lb.Pools = append(lb.Pools, *p)
		for _, m := range p.Members {
			if m.Enabled {
				b.r.ReadyBackends++
			}
		}
	}
	lbmodel.SortPools(lb.Pools)
	lbmodel.SortRules(lb.HTTP.Rules)
	if in.SharedVIP && len(refused) == 0 && len(ingresses) > 1 {
		if _, err := lbmodel.Normalize(lb); err != nil {
			for _, ing := range ingresses {
				var alone builder.Report
				one, _ := buildFrom(in, mode, []*networkingv1.Ingress{ing}, &alone)
				if _, err := lbmodel.Normalize(one); err != nil {
					refused[ing] = err.Error()
				}
			}
		}
	}
	return lb, refused
}

// olderFirst orders Ingresses by age, then namespace and name, so that the
// oldest wins a conflict, as other Ingress controllers decide.
func olderFirst(a, b *networkingv1.Ingress) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

type ruleKey struct {
	host, path string
	typ        lbmodel.PathType
}

type ruleOrigin struct {
	ingress string
	pool    string
}

// build holds the state of one Build.
type build struct {
	in       Input
	mode     string
	r        *builder.Report
	lbName   string
	services map[string]*corev1.Service // namespace/name
	secrets  map[string]*corev1.Secret  // namespace/name
	pools    map[string]*lbmodel.Pool   // by name
	// poolOrder are the names of pools in the order they were made.
	poolOrder []string
	certs     map[string]*lbmodel.TLSCert
	// certBytes are the PEM bytes of the certificates each Ingress added.
	certBytes map[*networkingv1.Ingress]int
	rules     map[ruleKey]ruleOrigin
	// defaultFrom is the Ingress whose default backend is the default pool.
	defaultFrom string
	// owners holds, on a shared VIP, the namespace that owns each host
	// (ownership.go); nil otherwise.
	owners map[string]string
}

func (b *build) index() {
	b.services = make(map[string]*corev1.Service, len(b.in.Services))
	for _, s := range b.in.Services {
		if s != nil {
			b.services[s.Namespace+"/"+s.Name] = s
		}
	}
	b.secrets = make(map[string]*corev1.Secret, len(b.in.Secrets))
	for _, s := range b.in.Secrets {
		if s != nil {
			b.secrets[s.Namespace+"/"+s.Name] = s
		}
	}
}

func (b *build) errorf(ing *networkingv1.Ingress, format string, args ...any) {
	b.r.Errors = append(b.r.Errors, "ingress "+ing.Namespace+"/"+ing.Name+": "+fmt.Sprintf(format, args...))
}

func (b *build) warnf(ing *networkingv1.Ingress, format string, args ...any) {
	b.r.Warnings = append(b.r.Warnings, "ingress "+ing.Namespace+"/"+ing.Name+": "+fmt.Sprintf(format, args...))
}

// add adds the rules, default backend and certificates of one Ingress.
func (b *build) add(ing *networkingv1.Ingress, lb *lbmodel.LoadBalancer) {
	id := ing.Namespace + "/" + ing.Name
	if len(ing.Spec.Rules) == 0 && ing.Spec.DefaultBackend == nil {
		b.warnf(ing, "no rules and no default backend: it routes nothing")
	}
	if d := ing.Spec.DefaultBackend; d != nil {
		if ref, ok := b.resolve(ing, d, "the default backend"); ok {
			switch {
			case b.defaultFrom == "":
				lb.HTTP.DefaultPool, b.defaultFrom = ref.pool, id
				b.use(ing, ref)
			case lb.HTTP.DefaultPool != ref.pool:
				b.errorf(ing, "default backend ignored: the VIP's default backend is that of ingress %s", b.defaultFrom)
			}
		}
	}
	for _, rule := range ing.Spec.Rules {
		host := strings.ToLower(rule.Host)
		if rule.HTTP == nil {
			b.warnf(ing, "rule for host %q has no paths: ignored", rule.Host)
			continue
		}
		if !b.owns(ing, host) {
			continue
		}
		for i := range rule.HTTP.Paths {
			p := &rule.HTTP.Paths[i]
			what := fmt.Sprintf("path %s%s", rule.Host, p.Path)
			path, typ, ok := normalizePath(p)
			if !ok {
				b.errorf(ing, "%s: a path must start with /: ignored", what)
				continue
			}
			ref, ok := b.resolve(ing, &p.Backend, what)
			if !ok {
				continue
			}
			key := ruleKey{host: host, path: path, typ: typ}
			if prev, dup := b.rules[key]; dup {
				if prev.pool != ref.pool {
					b.errorf(ing, "%s (%s) ignored: ingress %s routes it already", what, typ, prev.ingress)
				}
				continue
			}
			r := lbmodel.Rule{Host: host, Path: path, PathType: typ, Pool: ref.pool}
			// Checked alone, so that a value the API server lets through
			// (a control character in a path) does not make the whole
			// model invalid.
			if err := lbmodel.CheckRule(r, &lbmodel.Pool{Name: ref.pool}); err != nil {
				// Quoted: the path may hold the very control character.
				if inner := errors.Unwrap(err); inner != nil {
					err = inner // without "rule <host><path> (<type>):"
				}
				b.errorf(ing, "path %q of host %q (%s) ignored: %v", p.Path, rule.Host, typ, err)
				continue
			}
			b.use(ing, ref)
			b.rules[key] = ruleOrigin{ingress: id, pool: ref.pool}
			lb.HTTP.Rules = append(lb.HTTP.Rules, r)
		}
	}
	for _, t := range ing.Spec.TLS {
		b.addCert(ing, t)
	}
}

// normalizePath returns the model path and type of an Ingress path: Exact
// stays exact; Prefix and ImplementationSpecific are element-wise prefixes
// without a trailing "/" (Kubernetes ignores it), an empty path being "/".
func normalizePath(p *networkingv1.HTTPIngressPath) (string, lbmodel.PathType, bool) {
	path := p.Path
	if p.PathType != nil && *p.PathType == networkingv1.PathTypeExact {
		return path, lbmodel.PathExact, strings.HasPrefix(path, "/")
	}
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(path, "/") {
		return "", "", false
	}
	if trimmed := strings.TrimRight(path, "/"); trimmed != "" {
		path = trimmed
	} else {
		path = "/"
	}
	return path, lbmodel.PathPrefix, true
}

// backendRef is a Service port that a backend names, resolved as far as the
// Services allow.
type backendRef struct {
	svcID string
	svc   *corev1.Service     // nil when not found
	port  *corev1.ServicePort // nil when not found
	// portKey is the port's number, or the name the backend gives when the
	// Service does not resolve it.
	portKey string
	pool    string
}

// resolve names the pool of a backend. ok is false for a backend that is
// not a Service: its rule is left out.
func (b *build) resolve(ing *networkingv1.Ingress, be *networkingv1.IngressBackend, what string) (backendRef, bool) {
	if be.Service == nil || be.Service.Name == "" {
		b.errorf(ing, "%s: only Service backends are supported: ignored", what)
		return backendRef{}, false
	}
	ref := backendRef{svcID: ing.Namespace + "/" + be.Service.Name}
	ref.svc = b.services[ref.svcID]
	ref.portKey = be.Service.Port.Name
	if ref.portKey == "" {
		ref.portKey = strconv.Itoa(int(be.Service.Port.Number))
	}
	if ref.svc != nil {
		i := slices.IndexFunc(ref.svc.Spec.Ports, func(sp corev1.ServicePort) bool {
			if be.Service.Port.Name != "" {
				return sp.Name == be.Service.Port.Name
			}
			return sp.Port == be.Service.Port.Number
		})
		if i >= 0 {
			ref.port = &ref.svc.Spec.Ports[i]
			// Named or numbered, a Service port has one pool.
			ref.portKey = strconv.Itoa(int(ref.port.Port))
		}
	}
	ref.pool = lbmodel.IngressPoolName(b.lbName, ing.Namespace, be.Service.Name, ref.portKey)
	return ref, true
}

// use builds the pool of ref the first time a rule uses it. A Service that
// gives no members still has its (empty) pool.
func (b *build) use(ing *networkingv1.Ingress, ref backendRef) {
	if _, built := b.pools[ref.pool]; built {
		return
	}
	b.r.AddPoolBackend(ref.pool, ref.svcID)
	b.pools[ref.pool] = &lbmodel.Pool{Name: ref.pool, Members: b.members(ing, ref)}
	b.poolOrder = append(b.poolOrder, ref.pool)
}

// members builds the members of one Service port, or reports why it has
// none.
func (b *build) members(ing *networkingv1.Ingress, ref backendRef) []lbmodel.Member {
	svcID, svc, sp, port := ref.svcID, ref.svc, ref.port, ref.portKey
	none := []lbmodel.Member{}
	switch {
	case svc == nil:
		b.errorf(ing, "backend Service %s not found: its pool is empty", svcID)
		return none
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		b.errorf(ing, "backend Service %s is of type ExternalName, which has no Pods: its pool is empty", svcID)
		return none
	case sp == nil:
		b.errorf(ing, "backend Service %s has no port %s: its pool is empty", svcID, port)
		return none
	case sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP:
		b.errorf(ing, "backend Service %s port %s is %s, not TCP: its pool is empty", svcID, port, sp.Protocol)
		return none
	case svc.Spec.Type == corev1.ServiceTypeNodePort && b.mode == builder.ServiceTypeNodePortLocal:
		b.warnf(ing, "backend Service %s is of type NodePort: NodePortLocal does not map its Pods, its pool is empty; "+
			"make it a ClusterIP Service", svcID)
		return none
	}
	members, rep := builder.Members(builder.Input{
		ClusterName: b.in.ClusterName, ServiceType: b.in.ServiceType, Family: b.in.Family, Service: svc,
		Pods: b.in.Pods, Nodes: b.in.Nodes, EndpointSlices: b.in.EndpointSlices, AgentPorts: b.in.AgentPorts,
	}, *sp)
	b.r.AddBackend(svcID, rep)
	if members == nil {
		return none
	}
	return members
}

// addCert adds the certificate of one TLS entry, or reports why it cannot.
// On a shared VIP it serves only hosts its Ingress's namespace owns, and
// none at all when a name it holds meets a host another namespace owns
// (certAllowed): the load balancer picks a certificate by those names.
func (b *build) addCert(ing *networkingv1.Ingress, t networkingv1.IngressTLS) {
	hosts := make([]string, 0, len(t.Hosts))
	for _, h := range t.Hosts {
		h = strings.ToLower(h)
		if owner := b.owners[h]; b.owners != nil && owner != ing.Namespace {
			b.errorf(ing, "TLS host %s is not served over HTTPS with Secret %s/%s: namespace %s owns it (an older Ingress claims it)",
				h, ing.Namespace, t.SecretName, owner)
			continue
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 && len(t.Hosts) > 0 {
		return
	}
	if t.SecretName == "" {
		b.warnf(ing, "TLS entry for hosts %v has no secretName: they are not served over HTTPS", t.Hosts)
		return
	}
	id := ing.Namespace + "/" + t.SecretName
	if c := b.certs[id]; c != nil {
		c.Hosts = append(c.Hosts, hosts...)
		return
	}
	secret := b.secrets[id]
	if secret == nil {
		b.errorf(ing, "TLS Secret %s not found: hosts %v are not served over HTTPS", id, t.Hosts)
		return
	}
	cert, key := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	if len(cert) == 0 || len(key) == 0 {
		b.errorf(ing, "TLS Secret %s has no %s or %s: hosts %v are not served over HTTPS",
			id, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, t.Hosts)
		return
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		b.errorf(ing, "TLS Secret %s: %v: hosts %v are not served over HTTPS", id, err, t.Hosts)
		return
	}
	if err := b.certAllowed(ing, cert); err != nil {
		b.errorf(ing, "TLS Secret %s is not served: %v", id, err)
		return
	}
	if b.certBytes == nil {
		b.certBytes = map[*networkingv1.Ingress]int{}
	}
	b.certBytes[ing] += len(cert) + len(key)
	b.certs[id] = &lbmodel.TLSCert{
		Secret: id, Hosts: hosts, Fingerprint: lbmodel.CertFingerprint(cert),
		CertPEM: slices.Clone(cert), KeyPEM: slices.Clone(key),
	}
}

// requestedVIP returns the canonical address the annotation
// npl.io/load-balancer-ip of a dedicated Ingress asks for.
func requestedVIP(ing *networkingv1.Ingress, r *builder.Report) string {
	value := ing.Annotations[contract.LoadBalancerIPKey]
	if value == "" {
		return ""
	}
	addr, err := netip.ParseAddr(value)
	if err != nil || addr.Zone() != "" {
		r.Errors = append(r.Errors, fmt.Sprintf("ingress %s/%s: annotation %s %q is not an IP address: no VIP requested",
			ing.Namespace, ing.Name, contract.LoadBalancerIPKey, value))
		return ""
	}
	return addr.Unmap().String()
}
