package bigip

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Taking a load balancer over from the name npl-lbsync 0.x gave it
// (lbmodel.LegacyName), when no virtual holds its name yet. BIG-IP cannot
// rename an object, and holds one virtual per destination and protocol: the
// new pools, policies and profiles are made first, then each old virtual is
// swapped for the new one on its destination in one transaction (no moment
// without a virtual on the VIP), then the rest of the old objects are
// deleted. The new pools get the members with the states the model gives
// them (draining ones disabled), as any Ensure writes them. The old name
// was ambiguous (the Services team-a/x and team/a-x both had c1--team-a-x):
// virtuals whose tag records another owner are left alone.

// takeover is the load balancer an Ensure takes over: its old name and its
// virtuals not swapped yet.
type takeover struct {
	legacy   string
	virtuals map[string]*virtualState
}

// takeOver returns what lb takes over from its old name, nil when nothing:
// lb has virtuals of its own (have), or the old name has none, or they
// record another owner.
func (p *provider) takeOver(ctx context.Context, lb *lbmodel.LoadBalancer, have map[string]*virtualState) (*takeover, error) {
	legacy := lbmodel.LegacyName(p.cfg.common.ClusterName, lb)
	if legacy == "" || len(have) > 0 {
		return nil, nil
	}
	names, _ := p.inv.objectsOf(legacy)
	if len(names) == 0 {
		return nil, nil
	}
	virtuals, err := readOwned(ctx, p, &virtualKind, legacy, names, nil)
	if err != nil || len(virtuals) == 0 {
		return nil, err
	}
	for name, v := range virtuals {
		tag, _ := parseOwner(v.Description, p.cfg.common.ClusterName)
		if tag.L7 != lb.IsL7() || tag.Service != lb.Service || tag.Ingress != lb.Ingress || tag.Gateway != lb.Gateway {
			klog.FromContext(ctx).Info("Not taking over a load balancer of another owner under the old name", "oldName", legacy,
				"virtual", name, "service", tag.Service, "ingress", tag.Ingress, "gateway", tag.Gateway)
			return nil, nil
		}
	}
	klog.FromContext(ctx).Info("Taking a load balancer over from its old name", "oldName", legacy)
	return &takeover{legacy: legacy, virtuals: virtuals}, nil
}

// currentVirtuals are the virtuals whose VIP the load balancer keeps: its
// own, or those it takes over.
func (t *takeover) currentVirtuals(own map[string]*virtualState) map[string]*virtualState {
	if t == nil || len(own) > 0 {
		return own
	}
	return t.virtuals
}

// createVirtual creates the virtual name of load balancer lb on vip as
// want says: in the same transaction as the deletion of the old virtual
// on its destination and protocol, when t takes one over; as ensureVirtual
// does otherwise.
func (p *provider) createVirtual(ctx context.Context, t *takeover, lb, name string, vip netip.Addr, want virtualBody) error {
	old := ""
	if t != nil {
		for n, v := range t.virtuals {
			if v.Destination == want.Destination && v.IPProtocol == want.IPProtocol {
				old = n
			}
		}
	}
	if old == "" {
		return p.ensureVirtual(ctx, lb, name, vip, want, nil)
	}
	create := want
	create.Name, create.Partition = name, p.cfg.Partition
	err := p.api.transaction(ctx, []txnCall{
		{http.MethodDelete, objectPath(virtualKind.collection, p.cfg.Partition, old), nil},
		{http.MethodPost, virtualKind.collection, create},
	})
	if err != nil {
		return fmt.Errorf("swap virtual server %s for %s: %w", fullPath(p.cfg.Partition, old), fullPath(p.cfg.Partition, name), err)
	}
	delete(t.virtuals, old)
	p.inv.removeVirtual(old)
	p.inv.setVirtual(name, lb, vip)
	klog.FromContext(ctx).V(2).Info("Swapped BIG-IP virtual servers in one transaction", "old", fullPath(p.cfg.Partition, old),
		"name", fullPath(p.cfg.Partition, name), "destination", want.Destination)
	return nil
}

// finish deletes what is left of the load balancer taken over: its other
// virtuals, its policies and profiles (L7), its pools.
func (t *takeover) finish(ctx context.Context, p *provider, l7 bool) error {
	if t == nil {
		return nil
	}
	if err := p.deleteObjectsOf(ctx, t.legacy, l7); err != nil {
		return fmt.Errorf("delete the rest of %s: %w", t.legacy, err)
	}
	p.inv.forget(t.legacy)
	return nil
}
