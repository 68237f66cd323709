package avischema

import "slices"

// The pinned module holds the schema of API 20.1.7 only. What later
// releases change in the objects npl writes is listed here, read from the
// swagger files of the alb-sdk release branches 21.1.7, 22.1.1, 22.1.3 and
// 30.2.1 (vmware/alb-sdk, swagger/Pool.json, VirtualService.json,
// HTTPPolicySet.json, L4PolicySet.json): a change applies from its version
// on. Nothing else of those objects differs in the fields npl sends.
type change struct {
	from Version
	// removed are fields a later release dropped, by definition.
	removed map[string][]string
	// required are fields a later release requires, by definition.
	required map[string][]string
	// enum are values a later release adds, by definition and field.
	enum map[string]map[string][]string
}

var changes = []change{
	{from: Version{21, 1, 7}, required: map[string][]string{
		"PortMatch":  {"match_criteria"},
		"QueryMatch": {"match_criteria"},
		"HdrMatch":   {"hdr", "match_criteria"},
	}},
	{from: Version{22, 1, 1}, removed: map[string][]string{
		// Replaced by markers (20.1.5) for RBAC.
		"Pool": {"labels"}, "VirtualService": {"labels"}, "VsVip": {"labels"}, "PoolGroup": {"labels"},
		"L4PolicySet": {"labels"}, "HTTPPolicySet": {"labels"}, "SSLKeyAndCertificate": {"labels"},
		"HealthMonitor": {"labels"}, "ApplicationPersistenceProfile": {"labels"},
	}},
	{from: Version{22, 1, 3}, enum: map[string]map[string][]string{
		"QueryMatch": {"match_criteria": {"QUERY_MATCH_DOES_NOT_CONTAIN", "QUERY_MATCH_EXISTS", "QUERY_MATCH_DOES_NOT_EXIST",
			"QUERY_MATCH_BEGINS_WITH", "QUERY_MATCH_DOES_NOT_BEGIN_WITH", "QUERY_MATCH_ENDS_WITH", "QUERY_MATCH_DOES_NOT_END_WITH",
			"QUERY_MATCH_EQUALS", "QUERY_MATCH_DOES_NOT_EQUAL", "QUERY_MATCH_REGEX_MATCH", "QUERY_MATCH_REGEX_DOES_NOT_MATCH"}},
		"L4RuleProtocolMatch": {"protocol": {"PROTOCOL_SCTP"}},
	}},
}

// requiredIn is what definition d requires in version v.
func requiredIn(d *Def, v Version) []string {
	out := d.Required
	for _, c := range changes {
		if !v.Less(c.from) && len(c.required[d.Name]) > 0 {
			out = append(slices.Clone(out), c.required[d.Name]...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// removedIn reports whether version v dropped field name of definition d.
func removedIn(d *Def, name string, v Version) bool {
	for _, c := range changes {
		if !v.Less(c.from) && slices.Contains(c.removed[d.Name], name) {
			return true
		}
	}
	return false
}

// enumIn is the values field p of definition d takes in version v.
func enumIn(d *Def, p *Prop, v Version) []string {
	out := p.Enum
	for _, c := range changes {
		if add := c.enum[d.Name][p.Name]; !v.Less(c.from) && len(add) > 0 {
			out = append(slices.Clone(out), add...)
		}
	}
	return out
}
