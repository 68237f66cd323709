package bigipsim

import "testing"

// BIG-IP refuses properties an item does not have and values of the wrong
// JSON type (REFERENCE §18); what it answers with is accepted back.
func TestServer_refusesUnknownAndMistypedProperties(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web", "partition": "p1",
		"members": []any{map[string]any{"name": "198.18.0.1:80", "partition": "p1"}}}), 200)
	rule := func(cond map[string]any) map[string]any {
		return map[string]any{"name": "lb", "partition": "p1", "subPath": "Drafts", "requires": []string{"http"},
			"controls": []string{"forwarding"}, "rules": []any{map[string]any{"name": "r0", "conditions": []any{cond},
				"actions": []any{map[string]any{"forward": true, "pool": "/p1/web"}}}}}
	}
	for _, tc := range []struct {
		name, method, path string
		body               map[string]any
		want               string
	}{
		{"an unknown pool property", "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "x", "partition": "p1", "gibberish": 1},
			`Found unexpected json pair at configuration item /ltm/pool/. The json pair is "gibberish":1.`},
		{"an unknown member property", "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{"members": []any{
			map[string]any{"name": "198.18.0.1:80", "weight": 2}}},
			`Found unexpected json pair at configuration item /ltm/pool/members/. The json pair is "weight":2.`},
		{"an unknown condition property", "POST", "/mgmt/tm/ltm/policy", rule(map[string]any{"httpUri": true, "path": true,
			"equals": true, "values": []string{"/"}, "regex": true}),
			`Found unexpected json pair at configuration item /ltm/policy/rules/conditions/. The json pair is "regex":true.`},
		{"a number as a string", "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{"slowRampTime": "10"},
			`"slowRampTime" at configuration item /ltm/pool/ must be an integer, not a string`},
		{"a boolean as a string", "POST", "/mgmt/tm/ltm/policy", rule(map[string]any{"httpUri": "true", "path": true,
			"equals": true, "values": []string{"/"}}), `"httpUri" at configuration item /ltm/policy/rules/conditions/ must be a boolean`},
	} {
		wantMessage(t, call(t, s, tc.method, tc.path, tc.body), 400, tc.want)
	}
	// What BIG-IP 12.1 answers for a pool and a policy condition
	// (f5-cccl bigip_data.json, bigip_policy.json) goes back in.
	mustStatus(t, call(t, s, "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{"allowNat": "yes", "minUpMembersChecking": "disabled",
		"slowRampTime": 10, "queueOnConnectionLimit": "disabled", "members": []any{map[string]any{"name": "198.18.0.1:80",
			"partition": "p1", "connectionLimit": 0, "dynamicRatio": 1, "ephemeral": "false", "fqdn": map[string]any{"autopopulate": "disabled"},
			"inheritProfile": "enabled", "logging": "disabled", "monitor": "default", "priorityGroup": 0, "rateLimit": "disabled",
			"ratio": 1, "session": "user-enabled", "state": "unchecked"}}}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", rule(map[string]any{"index": 0, "httpUri": true, "path": true,
		"caseInsensitive": true, "equals": true, "request": true, "external": true, "remote": true, "present": true,
		"values": []string{"/"}})), 200)
}
