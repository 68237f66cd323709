package bigip

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/klog/v2"
)

// Writing and collecting npl's monitors and persistence profiles
// (trafficpolicy.go). They are shared between load balancers, so no load
// balancer's delete deletes them: the sweep deletes those no pool and no
// virtual of the partition uses, after an apply that left a pool or a
// virtual without one of them, after every delete, and after a failed
// sweep until one succeeds. BIG-IP refuses to delete a monitor or profile
// in use; one an apply in flight is about to use is held (providers.Holds).

// ensureSharedObjects makes the monitors and persistence profiles of o
// exist as planned: a read of each, and a write for one missing or changed
// by hand.
func (p *provider) ensureSharedObjects(ctx context.Context, o *policyObjects) error {
	desc := p.sharedTag()
	for _, s := range o.objects {
		cur, err := readObject(ctx, p, s.kind, s.name)
		if err != nil {
			return err
		}
		body := map[string]any{"name": s.name, "partition": p.cfg.Partition, "description": desc}
		for k, v := range s.settings {
			body[k] = v
		}
		if err := ensureObject(ctx, p, s.kind, desired[sharedState, map[string]any]{
			name: s.name, body: body,
			diff: func(cur *sharedState) map[string]any {
				fields := map[string]any{}
				if cur.Description != desc {
					fields["description"] = desc
				}
				for k, v := range s.settings {
					if !sameSetting(k, cur.props[k], v) {
						fields[k] = v
					}
				}
				return fields
			},
		}, cur); err != nil {
			return err
		}
	}
	return nil
}

// ownedRef reports whether ref (a pool's monitor rule, a persist item's
// full path) names one of npl's monitors or persistence profiles.
func (p *provider) ownedRef(ref string) (string, bool) {
	name, found := strings.CutPrefix(strings.TrimSpace(ref), "/"+p.cfg.Partition+"/")
	if !found {
		return "", false
	}
	return name, strings.HasPrefix(name, p.cfg.common.ClusterName+monitorNamePart) ||
		strings.HasPrefix(name, p.cfg.common.ClusterName+persistenceNamePart)
}

// notePolicyRefs marks a sweep as due when a pool or virtual (read before
// an apply) uses one of npl's monitors or persistence profiles that keep
// does not hold: after the apply, nothing of the load balancer uses it.
func (p *provider) notePolicyRefs(keep map[string]bool, pools map[string]*poolState, virtuals map[string]*virtualState) {
	var refs []string
	for _, pl := range pools {
		refs = append(refs, pl.Monitor)
	}
	for _, v := range virtuals {
		for _, r := range v.Persist {
			refs = append(refs, fullPath(r.Partition, r.Name))
		}
	}
	for _, r := range refs {
		if name, owned := p.ownedRef(r); owned && !keep[name] {
			p.sweepDue.Store(true)
			return
		}
	}
}

// sweep deletes, when one is due, npl's monitors and persistence profiles
// that no pool or virtual of the partition uses, but those keep names.
func (p *provider) sweep(ctx context.Context, keep map[string]bool) error {
	if !p.sweepDue.Load() {
		return nil
	}
	virtuals, pools, err := p.readPartition(ctx, false)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	used := map[string]bool{}
	for _, pl := range pools {
		if name, owned := p.ownedRef(pl.Monitor); owned {
			used[name] = true
		}
	}
	for _, v := range virtuals {
		for _, r := range v.Persist {
			if r.Partition == p.cfg.Partition {
				used[r.Name] = true
			}
		}
	}
	for _, k := range sharedKinds {
		objects, err := listObjects(ctx, p, k, false)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		for _, o := range objects {
			if keep[o.Name] || used[o.Name] || !p.ownsShared(o.Description) {
				continue
			}
			err := p.holds.UnlessHeld(o.Name, func() error { return deleteObject(ctx, p, k, o.Name, "") })
			switch {
			case err == nil:
			case statusOf(err) == 400 && strings.Contains(err.Error(), "in use"):
				// A pool or virtual started to use it since the read.
				klog.FromContext(ctx).V(2).Info("Kept a BIG-IP object in use", "kind", k.what, "name", o.Name)
			default:
				return fmt.Errorf("sweep: %w", err)
			}
		}
	}
	p.sweepDue.Store(false)
	return nil
}
