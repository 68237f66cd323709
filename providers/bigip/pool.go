package bigip

import (
	"cmp"
	"context"
	"net/http"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
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
		body: poolCreate{Name: l.name, Partition: p.cfg.Partition, Description: desc, Monitor: l.monitor,
			LoadBalancingMode: l.lbMode, Members: l.members},
		diff: func(cur *poolState) map[string]any {
			fields := map[string]any{}
			if strings.TrimSpace(cur.Monitor) != l.monitor {
				fields["monitor"] = l.monitor
			}
			if cur.Description != desc {
				fields["description"] = desc
			}
			if cmp.Or(cur.LoadBalancingMode, roundRobin) != l.lbMode {
				fields["loadBalancingMode"] = l.lbMode
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

// sameMembers compares members as sets of (partition, name, enabled,
// ratio).
func sameMembers(have []memberState, want []memberBody) bool {
	if len(have) != len(want) {
		return false
	}
	type state struct {
		enabled bool
		ratio   int32
	}
	wanted := make(map[string]state, len(want))
	for _, m := range want {
		wanted[m.Partition+"/"+m.Name] = state{m.Session == sessionEnabled, m.Ratio}
	}
	for _, m := range have {
		w, found := wanted[m.Partition+"/"+m.Name]
		if !found || w.enabled != (m.Session != sessionDisabled) || w.ratio != max(m.Ratio, 1) {
			return false
		}
	}
	return true
}

// listMembers turns the members BIG-IP has into model members.
func listMembers(items []memberState) []lbmodel.Member {
	members := make([]lbmodel.Member, 0, len(items))
	for _, m := range items {
		ip, port, err := parseEndpoint(m.Name)
		if err != nil {
			continue
		}
		var weight int32
		if m.Ratio > 1 {
			weight = m.Ratio
		}
		members = append(members, lbmodel.Member{IP: ip.String(), Port: port, Enabled: m.Session != sessionDisabled, Weight: weight})
	}
	return lbmodel.SortMembers(members)
}
