package bigip

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"k8s.io/klog/v2"
)

// Every kind of object the provider manages (pools, virtual servers, the
// LTM policy, client-ssl profiles, certificate and key files) goes through
// the same two sequences, written once here: ensureObject (create when
// missing, on a 409 read what is there, check its owner, diff, update) and
// deleteUnwanted (delete what a listing holds and the model no longer
// wants). An objectKind says what differs from kind to kind.

// objectHeader is what every object BIG-IP returns carries; the ownership
// tag is its description.
type objectHeader struct {
	Name        string `json:"name"`
	Partition   string `json:"partition"`
	FullPath    string `json:"fullPath"`
	Description string `json:"description"`
}

func (h objectHeader) header() objectHeader { return h }

// object is the state of a BIG-IP object as read: it embeds objectHeader.
type object interface{ header() objectHeader }

// objectKind tells the generic sequences how to handle one kind of object:
// T is its state as read, B the body that creates it.
type objectKind[T object, B any] struct {
	what       string // in errors and logs: "pool", "virtual server"
	plural     string // in errors about a listing: "pools"
	collection string // under /mgmt/tm/: "ltm/pool"
	query      string // appended to the read of one object
	// updateMethod changes some fields of an object: PATCH, or PUT for pools,
	// whose members BIG-IP replaces only on a PUT (go-bigip's
	// UpdatePoolMembers does the same).
	updateMethod string
	// untagged kinds (certificate and key files) have no description to
	// carry the ownership tag; their names, made from the load balancer's,
	// are what ties them to it.
	untagged bool
	// shared kinds (the monitors and persistence profiles of traffic
	// policies) belong to the cluster, not to one load balancer: their tag
	// names no load balancer.
	shared bool
	// known, note and forget keep the inventory in step, for the kinds it
	// holds (pools and virtuals); nil for the others.
	known  func(inv *inventory, name string) bool
	note   func(inv *inventory, name, lb string, cur *T) // records cur as an object of lb ("" if not ours)
	forget func(inv *inventory, name string)
	// create and update replace the plain POST to the collection and the
	// updateMethod call on the object, for kinds written another way (the
	// policy, through a draft). update gets the fields that differ and the
	// whole object as created.
	create func(ctx context.Context, p *provider, name string, body B) error
	update func(ctx context.Context, p *provider, name string, fields map[string]any, body B) error
	// readBeforeDelete makes deleteObject read the object first and leave it
	// when it is gone or not the load balancer's: client-ssl profiles are
	// found through the virtuals that use them, which the inventory does not
	// vouch for. afterDelete then deletes what it used.
	readBeforeDelete bool
	afterDelete      func(ctx context.Context, p *provider, cur *T) error
}

// desired is one object as Ensure wants it.
type desired[T object, B any] struct {
	name string
	lb   string // the load balancer that must own it
	body B      // what creates it
	// diff returns the fields of cur to change: none when it is in sync.
	diff func(cur *T) map[string]any
	// prepare runs once before the first write (a file's upload).
	prepare func(ctx context.Context) error
	// owned runs when the object exists and is the load balancer's, before
	// any update; synced runs after a create, an update, or none needed.
	// A pool belongs to its load balancer even when its update fails (so
	// that garbage collection finds it), while a virtual's inventory entry
	// holds its VIP, which only the update moves.
	owned, synced func()
	logValues     []any // added to the log lines
}

// ensureObject makes the object w.name match w: created when cur is nil; a
// create answered 409 (made since the partition was read) reads it and goes
// on as with cur. An existing object must be the load balancer's; only the
// fields diff returns are written, so an object in sync costs no write.
func ensureObject[T object, B any](ctx context.Context, p *provider, k *objectKind[T, B], w desired[T, B], cur *T) error {
	log := klog.FromContext(ctx)
	fp := fullPath(p.cfg.Partition, w.name)
	prepared := false
	prepare := func() error {
		if w.prepare == nil || prepared {
			return nil
		}
		prepared = true
		return w.prepare(ctx)
	}
	if cur == nil {
		if err := prepare(); err != nil {
			return err
		}
		var err error
		if k.create != nil {
			err = k.create(ctx, p, w.name, w.body)
		} else {
			err = p.api.do(ctx, http.MethodPost, k.collection, w.body, nil)
		}
		if err == nil {
			run(w.synced)
			log.V(2).Info("Created BIG-IP object", append([]any{"kind", k.what, "name", fp}, w.logValues...)...)
			return nil
		}
		if !isConflict(err) {
			return fmt.Errorf("create %s %s: %w", k.what, fp, err)
		}
		// It was created since it was read: compare with it.
		if cur, err = readObject(ctx, p, k, w.name); err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("create %s %s: BIG-IP says it exists but cannot read it", k.what, fp)
		}
	}
	switch {
	case k.shared:
		if !p.ownsShared((*cur).header().Description) {
			return fmt.Errorf("%s %s exists and is not one of cluster %s's shared objects: not modifying it", k.what, fp,
				p.cfg.common.ClusterName)
		}
	case !k.untagged:
		if err := p.checkOwner(k.what, w.name, (*cur).header().Description, w.lb, true); err != nil {
			return err
		}
	}
	run(w.owned)
	if fields := w.diff(cur); len(fields) > 0 {
		if err := prepare(); err != nil {
			return err
		}
		var err error
		if k.update != nil {
			err = k.update(ctx, p, w.name, fields, w.body)
		} else {
			err = p.api.do(ctx, k.updateMethod, objectPath(k.collection, p.cfg.Partition, w.name), fields, nil)
		}
		if err != nil {
			return fmt.Errorf("update %s %s: %w", k.what, fp, err)
		}
		log.V(2).Info("Updated BIG-IP object", append([]any{"kind", k.what, "name", fp, "fields", slices.Sorted(maps.Keys(fields))}, w.logValues...)...)
	}
	run(w.synced)
	return nil
}

func run(f func()) {
	if f != nil {
		f()
	}
}

// readObject reads the object name; nil when it does not exist.
func readObject[T object, B any](ctx context.Context, p *provider, k *objectKind[T, B], name string) (*T, error) {
	var cur T
	err := p.api.do(ctx, http.MethodGet, objectPath(k.collection, p.cfg.Partition, name)+k.query, nil, &cur)
	if isNotFound(err) {
		if k.forget != nil {
			k.forget(p.inv, name)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", k.what, fullPath(p.cfg.Partition, name), err)
	}
	return &cur, nil
}

// readOwned reads the objects of load balancer lb: those the inventory
// lists for it (have), and those it needs that exist. An object of another
// owner under a needed name is an error: the provider never takes it over.
// One whose owner changed since the inventory was read is noted there. It
// serves the kinds the inventory holds.
func readOwned[T object, B any](ctx context.Context, p *provider, k *objectKind[T, B], lb string, have, needed []string) (map[string]*T, error) {
	want, isNeeded := map[string]bool{}, map[string]bool{}
	for _, n := range needed {
		isNeeded[n] = true
		if k.known(p.inv, n) {
			want[n] = true
		}
	}
	for _, n := range have {
		want[n] = true
	}
	out := map[string]*T{}
	for _, name := range sortedKeys(want) {
		cur, err := readObject(ctx, p, k, name)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			continue
		}
		desc := (*cur).header().Description
		if err := p.checkOwner(k.what, name, desc, lb, isNeeded[name]); err != nil {
			return nil, err
		}
		if p.owns(desc, lb) {
			out[name] = cur
		} else {
			k.note(p.inv, name, p.ownerOf(desc), cur)
		}
	}
	return out, nil
}

// listObjects lists the objects of the partition, with their
// subcollections when expand.
func listObjects[T object, B any](ctx context.Context, p *provider, k *objectKind[T, B], expand bool) ([]T, error) {
	query := "$filter=partition+eq+" + p.cfg.Partition
	if expand {
		query = "expandSubcollections=true&" + query
	}
	var list collectionOf[T]
	if err := p.api.do(ctx, http.MethodGet, k.collection+"?"+query, nil, &list); err != nil {
		return nil, fmt.Errorf("list %s of partition %s: %w", k.plural, p.cfg.Partition, err)
	}
	// Keep only this partition in case the BIG-IP ignored the filter.
	return slices.DeleteFunc(list.Items, func(o T) bool { return o.header().Partition != p.cfg.Partition }), nil
}

// deleteUnwanted deletes, in the order of listing, the objects it names
// that wanted does not hold (nil: delete them all) for load balancer lb.
// Objects already gone count as deleted.
func deleteUnwanted[T object, B any](ctx context.Context, p *provider, k *objectKind[T, B], listing []string, wanted map[string]bool, lb string) error {
	for _, name := range listing {
		if wanted[name] {
			continue
		}
		if err := deleteObject(ctx, p, k, name, lb); err != nil {
			return err
		}
	}
	return nil
}

func deleteObject[T object, B any](ctx context.Context, p *provider, k *objectKind[T, B], name, lb string) error {
	var cur *T
	if k.readBeforeDelete {
		var err error
		if cur, err = readObject(ctx, p, k, name); err != nil || cur == nil {
			return err
		}
		if !p.owns((*cur).header().Description, lb) {
			return nil
		}
	}
	fp := fullPath(p.cfg.Partition, name)
	err := p.api.do(ctx, http.MethodDelete, objectPath(k.collection, p.cfg.Partition, name), nil, nil)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s %s: %w", k.what, fp, err)
	}
	if k.forget != nil {
		k.forget(p.inv, name)
	}
	klog.FromContext(ctx).V(2).Info("Deleted BIG-IP object", "kind", k.what, "name", fp)
	if cur != nil && k.afterDelete != nil {
		return k.afterDelete(ctx, p, cur)
	}
	return nil
}

// ownerOf returns the load balancer of this cluster that owns an object, ""
// if the cluster does not own it.
func (p *provider) ownerOf(description string) string {
	tag, owned := parseOwner(description, p.cfg.common.ClusterName)
	if !owned {
		return ""
	}
	return tag.LB
}

func (p *provider) owns(description, lb string) bool {
	tag, owned := parseOwner(description, p.cfg.common.ClusterName)
	return owned && tag.LB == lb
}

// checkOwner refuses an object that load balancer lb needs but does not own.
func (p *provider) checkOwner(kind, name, description, lb string, needed bool) error {
	if !needed || p.owns(description, lb) {
		return nil
	}
	return fmt.Errorf("%s %s exists and is not owned by load balancer %s of cluster %s: not modifying it",
		kind, fullPath(p.cfg.Partition, name), lb, p.cfg.common.ClusterName)
}
