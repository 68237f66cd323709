package bigip

import (
	"context"
	"net/http"
	"strings"

	"github.com/nodeportlocal/npl/providers"
)

// poolKind: pools, L4 and L7 alike.
var poolKind = objectKind[poolState, poolCreate]{
	what: "pool", plural: "pools", collection: "ltm/pool", query: "?expandSubcollections=true",
	updateMethod: http.MethodPut,
	known:        (*inventory).hasPool,
	note:         func(inv *inventory, name, lb string, _ *poolState) { inv.setPool(name, lb) },
	forget:       (*inventory).removePool,
}

// ensurePool creates the pool of plan l, or rewrites what differs in cur:
// the members, all of them in one replace-all PUT, as go-bigip's
// UpdatePoolMembers does, with the monitor and description when they differ.
func (p *provider) ensurePool(ctx context.Context, tag ownerTag, l listenerPlan, cur *poolState) error {
	desc := tag.String()
	record := func() { p.inv.setPool(l.name, tag.LB) }
	return ensureObject(ctx, p, &poolKind, desired[poolState, poolCreate]{
		name: l.name, lb: tag.LB,
		body: poolCreate{Name: l.name, Partition: p.cfg.Partition, Description: desc, Monitor: l.monitor, Members: l.members},
		diff: func(cur *poolState) map[string]any {
			fields := map[string]any{}
			if strings.TrimSpace(cur.Monitor) != l.monitor {
				fields["monitor"] = l.monitor
			}
			if cur.Description != desc {
				fields["description"] = desc
			}
			if !sameMembers(cur.MembersReference.Items, l.members) {
				fields["members"] = l.members
			}
			return fields
		},
		owned: record, synced: record,
		logValues: []any{"members", len(l.members)},
	}, cur)
}

// sameMembers compares members as sets of (partition, name, enabled).
func sameMembers(have []memberState, want []memberBody) bool {
	if len(have) != len(want) {
		return false
	}
	enabled := make(map[string]bool, len(want))
	for _, m := range want {
		enabled[m.Partition+"/"+m.Name] = m.Session == sessionEnabled
	}
	for _, m := range have {
		e, found := enabled[m.Partition+"/"+m.Name]
		if !found || e != (m.Session != sessionDisabled) {
			return false
		}
	}
	return true
}

// listMembers turns the members BIG-IP has into model members.
func listMembers(items []memberState) []providers.Member {
	members := make([]providers.Member, 0, len(items))
	for _, m := range items {
		ip, port, err := parseEndpoint(m.Name)
		if err != nil {
			continue
		}
		members = append(members, providers.Member{IP: ip.String(), Port: port, Enabled: m.Session != sessionDisabled})
	}
	return providers.SortMembers(members)
}
