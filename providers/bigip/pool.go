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
//
// The slow ramp and the members' connection limits are a traffic policy's
// (trafficpolicy.go): set when the pool has one, back to BIG-IP's defaults
// when the pool had one (its tag says so), left alone otherwise.
func (p *provider) ensurePool(ctx context.Context, tag ownerTag, l listenerPlan, cur *poolState) error {
	ramp, limit := int32(defaultSlowRamp), int32(0)
	if l.policy.managed {
		ramp, limit = l.policy.slowRamp, l.policy.connectionLimit
		tag.Policy, tag.PolicySum = l.policy.applied, policyFields{l.lbMode, ramp, limit, l.monitor}.sum()
	}
	desc := tag.String()
	record := func() { p.inv.setPool(l.name, tag.LB) }
	manage := l.policy.managed || cur != nil && readTag(cur.Description).Policy != nil
	members := l.members
	if manage {
		members = make([]memberBody, len(l.members))
		for i, m := range l.members {
			m.ConnectionLimit = &limit
			members[i] = m
		}
	}
	body := poolCreate{Name: l.name, Partition: p.cfg.Partition, Description: desc, Monitor: l.monitor,
		LoadBalancingMode: l.lbMode, Members: members}
	if l.policy.managed {
		body.SlowRampTime = &ramp
	}
	return ensureObject(ctx, p, &poolKind, desired[poolState, poolCreate]{
		name: l.name, lb: tag.LB,
		body: body,
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
			if manage && (cur.SlowRampTime == nil || *cur.SlowRampTime != ramp) {
				fields["slowRampTime"] = ramp
			}
			if !sameMembers(cur.MembersReference.Items, members) {
				fields["members"] = members
			}
			return fields
		},
		owned: record, synced: record,
		logValues: []any{"members", len(l.members)},
	}, cur)
}

// sameMembers compares members as sets of (partition, name, enabled,
// ratio), and connection limit where want sets one.
func sameMembers(have []memberState, want []memberBody) bool {
	if len(have) != len(want) {
		return false
	}
	wanted := make(map[string]memberBody, len(want))
	for _, m := range want {
		wanted[m.Partition+"/"+m.Name] = m
	}
	for _, m := range have {
		w, found := wanted[m.Partition+"/"+m.Name]
		if !found || (w.Session == sessionEnabled) != (m.Session != sessionDisabled) || w.Ratio != max(m.Ratio, 1) ||
			w.ConnectionLimit != nil && *w.ConnectionLimit != m.ConnectionLimit {
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
