package bigip

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// An L7 load balancer is, on BIG-IP: one pool per model pool (as L4 pools);
// an LTM policy named like the load balancer whose first-match rules test
// the HTTP host and URI path and forward to a pool (a Gateway's: one policy
// per HTTP(S) listener, named like its virtual, with the rules of its port,
// and TCP and UDP listeners as virtuals with their own pools, see
// docs/bigip.md); per TLS Secret a
// certificate and a key (sys/file ssl-cert and ssl-key, uploaded, named
// after their content so that a new certificate never meets the old key)
// and a client-ssl profile using them; and one virtual server per listener
// on the VIP with the tcp and http profiles, the client-ssl profiles on
// HTTPS ones, the policy, and the default pool as its pool. Policies are
// changed as BIG-IP 12.1 and later require: a draft, then publish.
//
// This file plans and orchestrates; pool.go, virtual.go, policy.go and
// ssl.go hold each kind of object, object.go the sequences they share.

type l7Plan struct {
	pools     []listenerPlan // the name, monitor and members of each pool
	virtuals  []l7VirtualPlan
	policies  []policyPlan
	certs     []certPlan
	requested netip.Addr
	// objects are the monitors and persistence profiles of the pools'
	// traffic policies.
	objects policyObjects
}

type l7VirtualPlan struct {
	name     string
	port     int32
	protocol lbmodel.Protocol
	// policy is the LTM policy of an HTTP or HTTPS virtual.
	policy string
	// pool is the full path of the virtual's pool: the inline pool of a
	// TCP or UDP listener, the default pool of an HTTP or HTTPS one, or "".
	pool string
	// profiles are the client-ssl profiles of an HTTPS virtual.
	profiles []string
	// persist is the full path of its persistence profile, "" for none.
	persist string
}

type policyPlan struct {
	name  string
	rules []ruleBody
}

type certPlan struct {
	profile string // the client-ssl profile's name
	file    string // the ssl-cert's and ssl-key's name
	cert    lbmodel.TLSCert
	// sniDefault marks the profile that serves clients without SNI, when a
	// virtual has several.
	sniDefault bool
	serverName string
}

// planL7 turns an L7 load balancer, a model that passed
// lbmodel.Normalize and served, into BIG-IP objects; it checks what only
// BIG-IP requires (names). An Ingress's load balancer has one policy that
// every virtual uses; a Gateway's has one per HTTP and HTTPS listener, with
// the rules that serve its port, and may have TCP and UDP listeners, each a
// virtual with its own pool.
func (p *provider) planL7(lb *lbmodel.LoadBalancer) (*l7Plan, error) {
	if !lbmodel.OwnedBy(p.cfg.common.ClusterName, lb.Name) {
		return nil, fmt.Errorf("name does not start with the cluster name %s and --", p.cfg.common.ClusterName)
	}
	if !validName(lb.Name) {
		return nil, fmt.Errorf("name %q is not a valid BIG-IP name (letters, digits, '.', '_', '-')", lb.Name)
	}
	plan := &l7Plan{}
	if lb.RequestedVIP != "" {
		a, err := netip.ParseAddr(lb.RequestedVIP)
		if err != nil {
			return nil, fmt.Errorf("requested VIP %q: %w", lb.RequestedVIP, err)
		}
		plan.requested = a
	}
	names := map[string]string{} // BIG-IP name -> what uses it
	claim := func(name, what string) error {
		if !validName(name) {
			return fmt.Errorf("%s: %q is not a valid BIG-IP name (letters, digits, '.', '_', '-')", what, name)
		}
		if other, taken := names[name]; taken {
			return fmt.Errorf("%s and %s are both named %s", other, what, name)
		}
		names[name] = what
		return nil
	}
	addPool := func(pl lbmodel.Pool, monitor string) (poolPolicy, error) {
		members, err := p.memberBodies(pl.Name, pl.Members)
		if err != nil {
			return poolPolicy{}, err
		}
		pp := p.poolPolicy(&plan.objects, pl, monitor)
		plan.pools = append(plan.pools, listenerPlan{name: pl.Name, monitor: pp.monitor, lbMode: pp.lbMode(pl.Members),
			members: members, policy: pp})
		return pp, nil
	}
	var httpPolicies []poolPolicy
	for _, pl := range lb.Pools {
		if err := claim(pl.Name, "pool "+pl.Name); err != nil {
			return nil, err
		}
		pp, err := addPool(pl, "/Common/tcp")
		if err != nil {
			return nil, err
		}
		httpPolicies = append(httpPolicies, pp)
	}
	httpPersist := p.httpPersistence(&plan.objects, lb.Pools, httpPolicies)
	defaultPool := ""
	if lb.HTTP.DefaultPool != "" {
		defaultPool = fullPath(p.cfg.Partition, lb.HTTP.DefaultPool)
	}
	rules := slices.Clone(lb.HTTP.Rules)
	lbmodel.SortRules(rules)
	if lb.Gateway == "" {
		plan.policies = append(plan.policies, policyPlan{name: lb.Name, rules: policyRules(rules, listenerRef{}, p.cfg.Partition)})
	}
	for _, l := range lb.Listeners {
		what := fmt.Sprintf("listener %s/%d", l.Protocol, l.Port)
		v := l7VirtualPlan{name: lbmodel.ListenerName(lb.Name, l.Protocol, l.Port), port: l.Port, protocol: l.Protocol}
		if err := claim(v.name, what); err != nil {
			return nil, err
		}
		switch l.Protocol {
		case lbmodel.TCP, lbmodel.UDP:
			if l.Pool.Name != v.name {
				if err := claim(l.Pool.Name, what+" pool"); err != nil {
					return nil, err
				}
			}
			_, monitor, _ := protocolParts(l.Protocol)
			pp, err := addPool(l.Pool, monitor)
			if err != nil {
				return nil, err
			}
			if pp.persist != nil {
				plan.objects.add(*pp.persist)
			}
			v.pool, v.persist = fullPath(p.cfg.Partition, l.Pool.Name), pp.persistPath
		default:
			v.pool, v.persist = defaultPool, httpPersist
			v.policy = lb.Name
			if lb.Gateway != "" {
				v.policy = v.name
				plan.policies = append(plan.policies, policyPlan{name: v.name,
					rules: policyRules(rules, listenerRef{protocol: l.Protocol, port: l.Port}, p.cfg.Partition)})
			}
		}
		plan.virtuals = append(plan.virtuals, v)
	}
	for _, c := range lb.HTTP.TLS {
		profile := lbmodel.CertificateName(lb.Name, c.Secret)
		if err := claim(profile, "TLS Secret "+c.Secret); err != nil {
			return nil, err
		}
		for i, v := range plan.virtuals {
			if v.protocol == lbmodel.HTTPS && (len(c.Ports) == 0 || slices.Contains(c.Ports, v.port)) {
				plan.virtuals[i].profiles = append(plan.virtuals[i].profiles, profile)
			}
		}
	}
	err := sniDefaults(lb, func(c lbmodel.TLSCert, sniDefault bool) {
		profile := lbmodel.CertificateName(lb.Name, c.Secret)
		cp := certPlan{profile: profile, file: profile + "-" + c.Fingerprint[:fingerprintInName], cert: c, sniDefault: sniDefault}
		if len(lb.HTTP.TLS) > 1 && len(c.Hosts) > 0 {
			// With several certificates, SNI picks by server name (BIG-IP
			// also matches the certificate's names).
			cp.serverName = c.Hosts[0]
		}
		plan.certs = append(plan.certs, cp)
	})
	if err != nil {
		return nil, err
	}
	return plan, nil
}

func (p *provider) l7Tag(lb *lbmodel.LoadBalancer) ownerTag {
	return ownerTag{Owner: ownerName, Cluster: p.cfg.common.ClusterName, LB: lb.Name, L7: true, Ingress: lb.Ingress, Gateway: lb.Gateway}
}

// ensureL7 makes the objects of an L7 load balancer match it, writing only
// what differs: pools, certificates and keys, client-ssl profiles, the
// policy, virtuals; then it deletes the virtuals, profiles, certificates and
// pools no longer wanted.
func (p *provider) ensureL7(ctx context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
	plan, err := p.planL7(lb)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("lb", lb.Name))
	tag := p.l7Tag(lb)
	var virtualNames, poolNames, profiles []string
	for _, c := range plan.certs {
		profiles = append(profiles, c.profile)
	}
	for _, v := range plan.virtuals {
		virtualNames = append(virtualNames, v.name)
	}
	for _, pl := range plan.pools {
		poolNames = append(poolNames, pl.name)
	}
	virtuals, pools, err := p.readObjects(ctx, lb.Name, virtualNames, poolNames)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	t, err := p.takeOver(ctx, lb, virtuals)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	keep := plan.objects.names()
	p.notePolicyRefs(keep, pools, virtuals)
	defer p.holds.Hold(keep)()
	if err := p.ensureSharedObjects(ctx, &plan.objects); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	vip, err := p.chooseVIP(lb.Name, plan.requested, t.currentVirtuals(virtuals))
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	for _, pl := range plan.pools {
		if err := p.ensurePool(ctx, tag, pl, pools[pl.name]); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}
	var oldFiles []string // certificate files the profiles no longer use
	for _, c := range plan.certs {
		old, err := p.ensureCert(ctx, tag, c)
		if err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
		oldFiles = append(oldFiles, old...)
	}
	policyNames, gone := map[string]bool{}, map[string]bool{}
	for _, pol := range plan.policies {
		policyNames[pol.name] = true
		if err := p.ensurePolicy(ctx, tag, pol.name, pol.rules); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}
	for _, v := range plan.virtuals {
		vtag := tag
		vtag.Persist = v.persist != ""
		want := virtualBody{
			Description: vtag.String(), Destination: fullPath(p.cfg.Partition, memberName(vip, v.port)), IPProtocol: "tcp",
			Pool: v.pool, SourceAddressTranslation: addressTranslation{Type: automap}, Persist: persistOf(v.persist, virtuals[v.name]),
		}
		switch v.protocol {
		case lbmodel.TCP, lbmodel.UDP:
			ipProtocol, _, profile := protocolParts(v.protocol)
			want.IPProtocol = ipProtocol
			want.Profiles = []profileRef{{Name: profile, Partition: commonPartitionName, Context: "all"}}
		default:
			want.Profiles = p.l7Profiles(v.protocol == lbmodel.HTTPS, v.profiles)
			want.Policies = []profileRef{{Name: v.policy, Partition: p.cfg.Partition}}
		}
		if virtuals[v.name] == nil {
			// A listener whose protocol changed on its port: BIG-IP holds
			// one virtual per address, port and IP protocol, so the old
			// one goes first.
			if err := p.deleteSamePort(ctx, lb.Name, virtuals, nameSet(virtualNames), gone, v.port, want.IPProtocol); err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
		if virtuals[v.name] == nil {
			err = p.createVirtual(ctx, t, tag.LB, v.name, vip, want)
		} else {
			err = p.ensureVirtual(ctx, tag.LB, v.name, vip, want, virtuals[v.name])
		}
		if err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}
	if err := t.finish(ctx, p, true); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}

	keepVirtuals := nameSet(virtualNames)
	for name := range gone {
		keepVirtuals[name] = true // deleted already
	}
	if err := deleteUnwanted(ctx, p, &virtualKind, sortedKeys(virtuals), keepVirtuals, lb.Name); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	// The policies and client-ssl profiles the virtuals used.
	used, usedPolicies := map[string]bool{}, false
	for _, v := range virtuals {
		for _, pr := range v.ProfilesReference.Items {
			if pr.Partition == p.cfg.Partition {
				used[pr.Name] = true
			}
		}
		for _, pr := range v.PoliciesReference.Items {
			if pr.Partition == p.cfg.Partition && !policyNames[pr.Name] {
				usedPolicies = true
			}
		}
	}
	if usedPolicies {
		if err := p.deletePolicies(ctx, lb.Name, policyNames); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}
	if err := deleteUnwanted(ctx, p, &clientSSLKind, sortedKeys(used), nameSet(profiles), lb.Name); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	for _, f := range oldFiles {
		if err := p.deleteFiles(ctx, f); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}
	if err := deleteUnwanted(ctx, p, &poolKind, sortedKeys(pools), nameSet(poolNames), lb.Name); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	if err := p.sweep(ctx, keep); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	return providers.Status{VIPs: []string{vip.String()}, Warnings: plan.objects.warnings}, nil
}

// deleteSamePort deletes the virtuals of load balancer lb that wanted does
// not hold and that listen on port with ipProtocol, and adds them to gone.
// The policies and profiles they used are deleted with the others'.
func (p *provider) deleteSamePort(ctx context.Context, lb string, virtuals map[string]*virtualState, wanted, gone map[string]bool,
	port int32, ipProtocol string) error {
	for _, name := range sortedKeys(virtuals) {
		cur := virtuals[name]
		_, at, err := parseEndpoint(cur.Destination)
		if wanted[name] || gone[name] || err != nil || at != port || cur.IPProtocol != ipProtocol {
			continue
		}
		if err := deleteObject(ctx, p, &virtualKind, name, lb); err != nil {
			return err
		}
		gone[name] = true
	}
	return nil
}

// l7Profiles are the profiles of an L7 virtual: tcp and http, and on HTTPS
// the client-ssl profiles, client side.
func (p *provider) l7Profiles(https bool, sslProfiles []string) []profileRef {
	out := []profileRef{
		{Name: "tcp", Partition: commonPartitionName, Context: "all"},
		{Name: "http", Partition: commonPartitionName, Context: "all"},
	}
	if https {
		for _, n := range sslProfiles {
			out = append(out, profileRef{Name: n, Partition: p.cfg.Partition, Context: "clientside"})
		}
	}
	return out
}

// listL7 adds to the load balancers List found (by name) what only L7 ones
// have: policy rules and certificates. get returns the load balancer of a
// tag, made when List has not met it yet.
func (p *provider) listL7(ctx context.Context, byLB map[string]*lbmodel.LoadBalancer, get func(ownerTag) *lbmodel.LoadBalancer) error {
	cluster := p.cfg.common.ClusterName
	policies, err := listObjects(ctx, p, &policyKind, true)
	if err != nil {
		return err
	}
	profiles, err := listObjects(ctx, p, &clientSSLKind, false)
	if err != nil {
		return err
	}
	rulesOf := map[string][][]ruleBody{} // load balancer -> the rules of each policy
	for i := range policies {
		pol := &policies[i]
		tag, owned := parseOwner(pol.Description, cluster)
		if !owned || pol.Status == "draft" || strings.Contains(pol.FullPath, "/Drafts/") {
			continue
		}
		get(tag)
		rulesOf[tag.LB] = append(rulesOf[tag.LB], bodiesOf(pol))
	}
	for name, rules := range rulesOf {
		byLB[name].HTTP.Rules = modelRules(rules, p.cfg.Partition)
	}
	for _, pr := range profiles {
		tag, owned := parseOwner(pr.Description, cluster)
		if !owned || tag.TLS == nil {
			continue
		}
		lb := get(tag)
		lb.HTTP.TLS = append(lb.HTTP.TLS, lbmodel.TLSCert{Secret: tag.TLS.Secret, Hosts: tag.TLS.Hosts, Fingerprint: tag.TLS.Fingerprint,
			Ports: tag.TLS.Ports})
	}
	for _, lb := range byLB {
		if lb.HTTP != nil {
			// The pools of TCP and UDP listeners are theirs, not shared.
			lb.Pools = slices.DeleteFunc(lb.Pools, func(pl lbmodel.Pool) bool {
				return slices.ContainsFunc(lb.Listeners, func(l lbmodel.Listener) bool { return l.Pool.Name == pl.Name })
			})
			slices.SortFunc(lb.HTTP.TLS, func(a, b lbmodel.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
			lbmodel.SortPools(lb.Pools)
		}
	}
	return nil
}

// markL7 makes lb an L7 load balancer when tag says it is one.
func markL7(lb *lbmodel.LoadBalancer, tag ownerTag) {
	if !tag.L7 {
		return
	}
	lb.Kind = lbmodel.L7
	lb.Ingress = cmp.Or(lb.Ingress, tag.Ingress)
	lb.Gateway = cmp.Or(lb.Gateway, tag.Gateway)
	if lb.HTTP == nil {
		lb.HTTP = &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}
	}
}
