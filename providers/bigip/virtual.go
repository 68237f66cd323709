package bigip

import (
	"cmp"
	"context"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// virtualKind: virtual servers, L4 and L7 alike.
var virtualKind = objectKind[virtualState, virtualBody]{
	what: "virtual server", plural: "virtual servers", collection: "ltm/virtual", query: "?expandSubcollections=true",
	updateMethod: http.MethodPatch,
	known:        (*inventory).hasVirtual,
	note: func(inv *inventory, name, lb string, cur *virtualState) {
		vip, _, _ := parseEndpoint(cur.Destination)
		inv.setVirtual(name, lb, vip)
	},
	forget: (*inventory).removeVirtual,
}

const commonPartitionName = "Common"

// virtualBody is a virtual server as the provider makes it.
type virtualBody struct {
	Name                     string             `json:"name,omitempty"`
	Partition                string             `json:"partition,omitempty"`
	Description              string             `json:"description"`
	Destination              string             `json:"destination"`
	IPProtocol               string             `json:"ipProtocol"`
	Pool                     string             `json:"pool"`
	SourceAddressTranslation addressTranslation `json:"sourceAddressTranslation"`
	Profiles                 []profileRef       `json:"profiles"`
	// Policies is nil on L4 virtuals, whose policies the provider leaves
	// alone.
	Policies []profileRef `json:"policies,omitempty"`
	// Persist is the persistence profile of a traffic policy, none where a
	// policy set one before (the tag says so), nil (left alone) otherwise.
	Persist *[]persistRef `json:"persist,omitempty"`
}

// changes returns the fields of cur that differ from want.
func (want virtualBody) changes(cur *virtualState) map[string]any {
	fields := map[string]any{}
	if cur.Destination != want.Destination {
		fields["destination"] = want.Destination
	}
	if cur.IPProtocol != want.IPProtocol {
		fields["ipProtocol"] = want.IPProtocol
	}
	if cur.Pool != want.Pool {
		fields["pool"] = cmp.Or(want.Pool, "none")
	}
	if cur.SourceAddressTranslation != want.SourceAddressTranslation {
		fields["sourceAddressTranslation"] = want.SourceAddressTranslation
	}
	if cur.Description != want.Description {
		fields["description"] = want.Description
	}
	if !slices.Equal(refPaths(cur.ProfilesReference.Items), refPaths(want.Profiles)) {
		fields["profiles"] = want.Profiles
	}
	if want.Policies != nil && !slices.Equal(refPaths(cur.PoliciesReference.Items), refPaths(want.Policies)) {
		fields["policies"] = want.Policies
	}
	if want.Persist != nil && !slices.Equal(cur.Persist, *want.Persist) {
		fields["persist"] = *want.Persist
	}
	return fields
}

// persistOf is the Persist of a virtual whose pools' policies want the
// persistence profile path ("" for none); cur is the virtual as read.
func persistOf(path string, cur *virtualState) *[]persistRef {
	switch {
	case path != "":
		r, _ := parseRef(path)
		return &[]persistRef{r}
	case cur != nil && readTag(cur.Description).Persist:
		return &[]persistRef{}
	}
	return nil
}

// parseRef splits a full path /P/name.
func parseRef(path string) (persistRef, bool) {
	part, name, found := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return persistRef{Name: name, Partition: part}, found
}

// ensureVirtual creates the virtual server name of load balancer lb on vip
// as want describes it, or patches the fields of cur that differ.
func (p *provider) ensureVirtual(ctx context.Context, lb, name string, vip netip.Addr, want virtualBody, cur *virtualState) error {
	create := want
	create.Name, create.Partition = name, p.cfg.Partition
	return ensureObject(ctx, p, &virtualKind, desired[virtualState, virtualBody]{
		name: name, lb: lb, body: create,
		diff:      want.changes,
		synced:    func() { p.inv.setVirtual(name, lb, vip) },
		logValues: []any{"destination", want.Destination},
	}, cur)
}

// refPaths returns the full paths of profile or policy references, sorted.
func refPaths(refs []profileRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, cmp.Or(r.FullPath, fullPath(r.Partition, r.Name)))
	}
	slices.Sort(out)
	return out
}
