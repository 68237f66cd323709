package avi

import (
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

// Reading, writing and deleting the objects of one L7 load balancer.

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
	// Part names start with the load balancer's name (then "-" or "_"), as
	// far as a shortened name keeps it; the markers say whose they are.
	prefix := lbName
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

// ensureL7 makes the objects of L7 load balancer lb match want, its plan:
// VsVip, pools, certificates, HTTP policy set, virtual service, then it
// deletes the certificates and pools no longer wanted.
func (p *Provider) ensureL7(s *aviSession, log klog.Logger, lb *lbmodel.LoadBalancer, want *l7Layout) (providers.Status, error) {
	var wantGroups map[string]bool
	if lb.Gateway != "" {
		wantGroups = want.groupNames()
	}
	cur, err := p.readL7(s, lb.Name, want.name, want.poolNames(), want.certNames(), wantGroups)
	if err != nil {
		return providers.Status{}, err
	}
	if err := p.takeOverL7(s, log, lb, wantGroups, cur); err != nil {
		return providers.Status{}, err
	}
	keep := want.objects.names()
	p.notePolicyRefs(keep, slices.Collect(maps.Values(cur.pools))...)
	p.notePolicyRefs(keep, cur.stalePools...)
	defer p.holds.Hold(keep)()
	if addressMoves(want.vsvip, cur.vsvip) {
		if err := p.dropVsVip(s, log, cur.vsvip, cur.vs, cur.l4vs); err != nil {
			return providers.Status{}, err
		}
		cur.vsvip, cur.vs, cur.l4vs = nil, nil, nil
	}
	vsvip, err := p.applyVsVip(s, log, want.vsvip, cur.vsvip)
	if err != nil {
		return providers.Status{}, err
	}
	if err := p.ensurePolicyObjects(s, log, &want.objects); err != nil {
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
	if err := p.sweep(s, log, keep); err != nil {
		return providers.Status{}, err
	}
	return providers.Status{VIPs: vipsOf(vsvip), Warnings: want.objects.warnings}, nil
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
