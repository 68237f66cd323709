package bigip

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/providers"
)

// An L7 load balancer is, on BIG-IP: one pool per model pool (as L4 pools);
// an LTM policy named like the load balancer whose first-match rules test
// the HTTP host and URI path and forward to a pool; per TLS Secret a
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
	pools    []listenerPlan // the name, monitor and members of each pool
	virtuals []l7VirtualPlan
	policy   []policyRule
	certs    []certPlan
	// defaultPool is the full path of the default pool, or "".
	defaultPool string
	requested   netip.Addr
}

type l7VirtualPlan struct {
	name  string
	port  int32
	https bool
}

type certPlan struct {
	profile string // the client-ssl profile's name
	file    string // the ssl-cert's and ssl-key's name
	cert    providers.TLSCert
	// sniDefault marks the profile that serves clients without SNI, when a
	// virtual has several.
	sniDefault bool
	serverName string
}

// planL7 turns an L7 load balancer, a model that passed
// providers.Normalize, into BIG-IP objects; it checks what only BIG-IP
// requires (names).
func (p *provider) planL7(lb *providers.LoadBalancer) (*l7Plan, error) {
	if !providers.OwnedBy(p.cfg.common.ClusterName, lb.Name) {
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
	for _, pl := range lb.Pools {
		if err := claim(pl.Name, "pool "+pl.Name); err != nil {
			return nil, err
		}
		members, err := p.memberBodies(pl.Name, pl.Members)
		if err != nil {
			return nil, err
		}
		plan.pools = append(plan.pools, listenerPlan{name: pl.Name, monitor: "/Common/tcp", members: members})
	}
	for _, l := range lb.Listeners {
		name := providers.ListenerName(lb.Name, l.Protocol, l.Port)
		if err := claim(name, fmt.Sprintf("listener %s/%d", l.Protocol, l.Port)); err != nil {
			return nil, err
		}
		plan.virtuals = append(plan.virtuals, l7VirtualPlan{name: name, port: l.Port, https: l.Protocol == providers.HTTPS})
	}
	if lb.HTTP.DefaultPool != "" {
		plan.defaultPool = fullPath(p.cfg.Partition, lb.HTTP.DefaultPool)
	}
	rules := slices.Clone(lb.HTTP.Rules)
	providers.SortRules(rules)
	for i, r := range rules {
		for j, m := range r.PathMatches() {
			plan.policy = append(plan.policy, policyRule{Name: fmt.Sprintf("rule-%d.%d", i, j), Host: r.Host,
				Path: m.Path, Prefix: m.Prefix, Pool: fullPath(p.cfg.Partition, r.Pool)})
		}
	}
	for i, c := range lb.HTTP.TLS {
		profile := providers.CertificateName(lb.Name, c.Secret)
		if err := claim(profile, "TLS Secret "+c.Secret); err != nil {
			return nil, err
		}
		cp := certPlan{profile: profile, file: profile + "-" + c.Fingerprint[:fingerprintInName], cert: c, sniDefault: i == 0}
		if len(lb.HTTP.TLS) > 1 && len(c.Hosts) > 0 {
			// With several certificates, SNI picks by server name (BIG-IP
			// also matches the certificate's names).
			cp.serverName = c.Hosts[0]
		}
		plan.certs = append(plan.certs, cp)
	}
	return plan, nil
}

func (p *provider) l7Tag(lb *providers.LoadBalancer) ownerTag {
	return ownerTag{Owner: ownerName, Cluster: p.cfg.common.ClusterName, LB: lb.Name, L7: true, Ingress: lb.Ingress}
}

// ensureL7 makes the objects of an L7 load balancer match it, writing only
// what differs: pools, certificates and keys, client-ssl profiles, the
// policy, virtuals; then it deletes the virtuals, profiles, certificates and
// pools no longer wanted.
func (p *provider) ensureL7(ctx context.Context, lb *providers.LoadBalancer) (providers.Status, error) {
	plan, err := p.planL7(lb)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("lb", lb.Name))
	tag := p.l7Tag(lb)
	var virtualNames, poolNames []string
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
	vip, err := p.chooseVIP(lb.Name, plan.requested, virtuals)
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
	if err := p.ensurePolicy(ctx, tag, plan.policy); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	profiles := make([]string, 0, len(plan.certs))
	for _, c := range plan.certs {
		profiles = append(profiles, c.profile)
	}
	for _, v := range plan.virtuals {
		want := virtualBody{
			Description: tag.String(), Destination: fullPath(p.cfg.Partition, memberName(vip, v.port)), IPProtocol: "tcp",
			Pool: plan.defaultPool, SourceAddressTranslation: addressTranslation{Type: automap},
			Profiles: p.l7Profiles(v.https, profiles),
			Policies: []profileRef{{Name: tag.LB, Partition: p.cfg.Partition}},
		}
		if err := p.ensureVirtual(ctx, tag.LB, v.name, vip, want, virtuals[v.name]); err != nil {
			return providers.Status{}, p.fail(lb.Name, err)
		}
	}

	if err := deleteUnwanted(ctx, p, &virtualKind, sortedKeys(virtuals), nameSet(virtualNames), lb.Name); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	// The client-ssl profiles the virtuals used.
	used := map[string]bool{}
	for _, v := range virtuals {
		for _, pr := range v.ProfilesReference.Items {
			if pr.Partition == p.cfg.Partition {
				used[pr.Name] = true
			}
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
	return providers.Status{VIPs: []string{vip.String()}}, nil
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
func (p *provider) listL7(ctx context.Context, byLB map[string]*providers.LoadBalancer, get func(ownerTag) *providers.LoadBalancer) error {
	cluster := p.cfg.common.ClusterName
	policies, err := listObjects(ctx, p, &policyKind, true)
	if err != nil {
		return err
	}
	profiles, err := listObjects(ctx, p, &clientSSLKind, false)
	if err != nil {
		return err
	}
	for i := range policies {
		pol := &policies[i]
		tag, owned := parseOwner(pol.Description, cluster)
		if !owned || pol.Status == "draft" || strings.Contains(pol.FullPath, "/Drafts/") {
			continue
		}
		lb := get(tag)
		lb.HTTP.Rules = modelRules(rulesOf(pol), p.cfg.Partition)
	}
	for _, pr := range profiles {
		tag, owned := parseOwner(pr.Description, cluster)
		if !owned || tag.TLS == nil {
			continue
		}
		lb := get(tag)
		lb.HTTP.TLS = append(lb.HTTP.TLS, providers.TLSCert{Secret: tag.TLS.Secret, Hosts: tag.TLS.Hosts, Fingerprint: tag.TLS.Fingerprint})
	}
	for _, lb := range byLB {
		if lb.HTTP != nil {
			slices.SortFunc(lb.HTTP.TLS, func(a, b providers.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
			providers.SortPools(lb.Pools)
		}
	}
	return nil
}

// markL7 makes lb an L7 load balancer when tag says it is one.
func markL7(lb *providers.LoadBalancer, tag ownerTag) {
	if !tag.L7 {
		return
	}
	lb.Kind = providers.L7
	lb.Ingress = cmp.Or(lb.Ingress, tag.Ingress)
	if lb.HTTP == nil {
		lb.HTTP = &providers.HTTPRoutes{Rules: []providers.Rule{}}
	}
}
