package avi

import (
	"fmt"
	"net/url"

	"github.com/vmware/alb-sdk/go/models"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Taking a load balancer over from the name npl-lbsync 0.x gave it
// (lbmodel.LegacyName), when none holds its name yet: the objects of the
// old name become the current ones, and the apply that follows renames
// each in place (a PUT on its uuid), so that the VsVip keeps its VIP and
// the virtual service its uuid. The old name was ambiguous (the Services
// team-a/x and team/a-x both had c1--team-a-x): objects whose markers
// record another owner are left alone.

// takeOverL4 fills cur, the objects of the L4 load balancer lb's new
// name (none: neither virtual service nor VsVip), with those of its old
// name when they record lb's Service: the VsVip, policy set and virtual
// service, and each pool as the pool of its listener; an old pool of no
// listener any more is stale.
func (p *Provider) takeOverL4(s *aviSession, log klog.Logger, lb *lbmodel.LoadBalancer, want *layout, cur *current) error {
	legacy := lbmodel.LegacyName(p.cfg.ClusterName, lb)
	if legacy == "" || cur.vs != nil || cur.vsvip != nil {
		return nil
	}
	oldName := lbmodel.Shorten(legacy, maxNameLength)
	if found, err := p.holdsName(s, oldName); err != nil || !found {
		return err
	}
	old, err := p.read(s, oldName, nil)
	if err != nil {
		return fmt.Errorf("read the old name %s: %w", oldName, err)
	}
	if owner := markersOfAny(old.vs, old.policy, old.vsvip, nil); owner.Service != lb.Service || !ownVsVip(p, old.vsvip) {
		log.Info("Not taking over a load balancer of another owner under the old name", "oldName", oldName, "owner", owner.Service)
		return nil
	}
	cur.vs, cur.policy, cur.vsvip = old.vs, old.policy, old.vsvip
	byListener := map[string]string{}
	for _, r := range want.policy.Rules {
		byListener[fmt.Sprintf("%s-%d", r.Protocol, r.Port)] = r.Pool
	}
	for _, o := range old.stale {
		if m := trailingListener.FindStringSubmatch(deref(o.Name)); m != nil {
			if n := byListener[m[1]+"-"+m[2]]; n != "" && cur.pools[n] == nil {
				cur.pools[n] = o
				continue
			}
		}
		cur.stale = append(cur.stale, o)
	}
	log.Info("Taking a load balancer over from its old name", "oldName", oldName)
	return nil
}

// takeOverL7 fills cur, the objects of the L7 load balancer lb's new name
// (none: no virtual service nor VsVip), with those of its old name when
// they record lb's Ingress or Gateway: the VsVip, the virtual services and
// policy sets become the current ones (renamed by the apply), the old
// pools, pool groups and certificates are stale, deleted once the new
// ones are in use.
func (p *Provider) takeOverL7(s *aviSession, log klog.Logger, lb *lbmodel.LoadBalancer, wantGroups map[string]bool, cur *l7Current) error {
	legacy := lbmodel.LegacyName(p.cfg.ClusterName, lb)
	if legacy == "" || cur.vs != nil || cur.vsvip != nil || cur.l4vs != nil {
		return nil
	}
	oldName := lbmodel.Shorten(legacy, maxNameLength)
	if found, err := p.holdsName(s, oldName); err != nil || !found {
		return err
	}
	var groups map[string]bool
	if wantGroups != nil {
		groups = map[string]bool{}
	}
	old, err := p.readL7(s, legacy, oldName, nil, nil, groups)
	if err != nil {
		return fmt.Errorf("read the old name %s: %w", oldName, err)
	}
	var owner markers
	switch {
	case old.vs != nil:
		owner = markersOf(old.vs.Markers)
	case old.l4vs != nil:
		owner = markersOf(old.l4vs.Markers)
	case old.vsvip != nil:
		owner = markersOf(old.vsvip.Markers)
	default:
		return nil
	}
	if owner.Ingress != lb.Ingress || owner.Gateway != lb.Gateway || !ownVsVip(p, old.vsvip) {
		log.Info("Not taking over a load balancer of another owner under the old name", "oldName", oldName,
			"ingress", owner.Ingress, "gateway", owner.Gateway)
		return nil
	}
	cur.vs, cur.policy, cur.vsvip, cur.l4vs, cur.l4policy = old.vs, old.policy, old.vsvip, old.l4vs, old.l4policy
	cur.stalePools = append(cur.stalePools, old.stalePools...)
	cur.staleCerts = append(cur.staleCerts, old.staleCerts...)
	cur.staleGroups = append(cur.staleGroups, old.staleGroups...)
	log.Info("Taking a load balancer over from its old name", "oldName", oldName)
	return nil
}

// ownVsVip reports whether a VsVip (nil: none) is marked as this
// cluster's: one made by hand under the name is not taken over.
func ownVsVip(p *Provider, o *models.VsVip) bool {
	return o == nil || vsvipKind.owner(o) == p.cfg.ClusterName
}

// holdsName reports whether a virtual service or a VsVip has the Avi name
// name: two reads, so that a load balancer with nothing under its old
// name (a new one) costs no more.
func (p *Provider) holdsName(s *aviSession, name string) (bool, error) {
	vs, err := getByName[models.VirtualService](s, vsKind.typ, name, url.Values{"created_by": {p.owner}})
	if err != nil || vs != nil {
		return vs != nil, err
	}
	vsvip, err := getByName[models.VsVip](s, vsvipKind.typ, name, nil)
	return vsvip != nil, err
}
