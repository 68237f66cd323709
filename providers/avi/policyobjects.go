package avi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/vmware/alb-sdk/go/models"
	"github.com/vmware/alb-sdk/go/session"
	"k8s.io/klog/v2"
)

// Writing and collecting npl's monitors and persistence profiles
// (trafficpolicy.go). They are shared between load balancers, so no load
// balancer's delete can delete them: the sweep deletes those no pool
// refers to (refers_to), after an apply that left a pool without one of
// them, after every delete, and again after a failed sweep until one
// succeeds. The controller refuses to delete an object still referred to
// ("Cannot delete, object is referred by"): one a pool started to use since
// is kept.

// ensurePolicyObjects makes the monitors and persistence profiles of o
// exist as planned: two reads, and a write for each one missing or
// changed by hand.
func (p *Provider) ensurePolicyObjects(s *aviSession, log klog.Logger, o *policyObjects) error {
	if len(o.monitors) > 0 {
		cur, err := listMarked(p, s, monitorKind.typ, monitorNamePart, monitorMarkers)
		if err != nil {
			return err
		}
		byName := map[string]*models.HealthMonitor{}
		for _, m := range cur {
			byName[deref(m.Name)] = m
		}
		for _, spec := range o.monitors {
			sum := checksum(spec)
			if _, err := apply(s, p, log, monitorKind, spec.Name, byName[spec.Name],
				func(*models.HealthMonitor) *models.HealthMonitor { return p.monitorModel(spec) },
				func(m *models.HealthMonitor) bool { return checksum(monitorSpecOf(m)) == sum }); err != nil {
				return err
			}
		}
	}
	if len(o.persistence) > 0 {
		cur, err := listMarked(p, s, persistenceKind.typ, persistenceNamePart, persistenceMarkers)
		if err != nil {
			return err
		}
		byName := map[string]*persistenceProfile{}
		for _, m := range cur {
			byName[deref(m.Name)] = m
		}
		for _, spec := range o.persistence {
			sum := checksum(spec)
			if _, err := apply(s, p, log, persistenceKind, spec.Name, byName[spec.Name],
				func(*persistenceProfile) *persistenceProfile { return p.persistenceModel(spec) },
				func(m *persistenceProfile) bool { return checksum(persistenceSpecOf(m)) == sum }); err != nil {
				return err
			}
		}
	}
	return nil
}

func monitorMarkers(o *models.HealthMonitor) []*models.RoleFilterMatchLabel { return o.Markers }

func persistenceMarkers(o *persistenceProfile) []*models.RoleFilterMatchLabel {
	return o.Markers
}

// listMarked reads npl's objects of typ (named <cluster><part>…): those
// marked with the cluster. Another cluster's are left alone.
func listMarked[T any](p *Provider, s *aviSession, typ, part string, labels func(*T) []*models.RoleFilterMatchLabel) ([]*T, error) {
	found, err := list[T](s, typ, url.Values{"name.contains": {p.cfg.ClusterName + part}})
	if err != nil {
		return nil, fmt.Errorf("read %ss: %w", typ, err)
	}
	var out []*T
	for _, o := range found {
		if markersOf(labels(o)).Cluster == p.cfg.ClusterName {
			out = append(out, o)
		}
	}
	return out, nil
}

// notePolicyRefs marks a sweep as due when one of pools (read before an
// apply or a delete) uses one of npl's monitors or persistence profiles
// that keep does not hold: after the apply, nothing may use it.
func (p *Provider) notePolicyRefs(keep map[string]bool, pools ...*models.Pool) {
	owned := func(name string) bool {
		return strings.HasPrefix(name, p.cfg.ClusterName+monitorNamePart) ||
			strings.HasPrefix(name, p.cfg.ClusterName+persistenceNamePart)
	}
	for _, o := range pools {
		if o == nil {
			continue
		}
		refs := []string{refName(o.ApplicationPersistenceProfileRef)}
		for _, r := range o.HealthMonitorRefs {
			refs = append(refs, refName(&r))
		}
		for _, n := range refs {
			if owned(n) && !keep[n] {
				p.sweepDue.Store(true)
				return
			}
		}
	}
}

// referred reports whether a pool refers to the object typ uuid.
func referred(s *aviSession, typ, uuid string) (bool, error) {
	q := url.Values{"refers_to": {typ + ":" + uuid}, "page_size": {"1"}}
	var res session.AviCollectionResult
	err := s.call(func(sess *session.AviSession) (err error) {
		res, err = sess.GetCollectionRaw("api/" + poolKind.typ + "?" + q.Encode())
		return err
	})
	return res.Count > 0, err
}

// sweep deletes npl's monitors and persistence profiles that no pool uses
// when one is due. The controller refuses to delete one still in use: it
// is kept. Those keep names are in use by the caller's pools.
func (p *Provider) sweep(s *aviSession, log klog.Logger, keep map[string]bool) error {
	if !p.sweepDue.Load() {
		return nil
	}
	monitors, err := listMarked(p, s, monitorKind.typ, monitorNamePart, monitorMarkers)
	if err != nil {
		return err
	}
	profiles, err := listMarked(p, s, persistenceKind.typ, persistenceNamePart, persistenceMarkers)
	if err != nil {
		return err
	}
	var victims []victim
	for _, o := range monitors {
		victims = append(victims, victim{monitorKind.typ, deref(o.Name), deref(o.UUID)})
	}
	for _, o := range profiles {
		victims = append(victims, victim{persistenceKind.typ, deref(o.Name), deref(o.UUID)})
	}
	for _, v := range victims {
		if keep[v.name] {
			continue
		}
		used, err := referred(s, v.typ, v.uuid)
		if err != nil {
			return fmt.Errorf("read the pools that use %s %s: %w", v.typ, v.name, err)
		}
		if used {
			continue
		}
		err = p.holds.UnlessHeld(v.name, func() error { return remove(s, v.typ, v.uuid) })
		switch {
		case err == nil:
			log.V(2).Info("Deleted Avi object no pool uses", "type", v.typ, "name", v.name)
		case statusOf(err) == http.StatusBadRequest && strings.Contains(err.Error(), "referred by"):
			// Another load balancer's pools use it.
		default:
			return fmt.Errorf("delete %s %s: %w", v.typ, v.name, err)
		}
	}
	p.sweepDue.Store(false)
	return nil
}
