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
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/policy/~p1~Drafts~lb", nil), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", rule(map[string]any{"index": 0, "all": true, "httpHeader": true,
		"tmName": "X-Header", "contains": true, "caseInsensitive": true, "request": true, "external": true, "remote": true,
		"present": true, "values": []string{"openstack", "velcro"}})), 200)
}

// A condition compares case-insensitively unless it says caseSensitive, and
// BIG-IP answers so (go-bigip's 11.5.1 and f5-cccl's 12.1.1 recorded
// conditions carry caseInsensitive: true).
func TestServer_conditionsAreCaseInsensitiveByDefault(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web", "partition": "p1"}), 200)
	path := func(extra map[string]any) map[string]any {
		c := map[string]any{"httpUri": true, "path": true, "equals": true, "values": []string{"/api"}}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", map[string]any{"name": "lb", "partition": "p1", "subPath": "Drafts",
		"requires": []string{"http"}, "controls": []string{"forwarding"}, "rules": []any{
			map[string]any{"name": "default", "conditions": []any{path(nil)}, "actions": []any{map[string]any{"forward": true, "pool": "/p1/web"}}},
			map[string]any{"name": "sensitive", "conditions": []any{path(map[string]any{"caseSensitive": true})},
				"actions": []any{map[string]any{"forward": true, "pool": "/p1/web"}}},
		}}), 200)
	r := call(t, s, "GET", "/mgmt/tm/ltm/policy/~p1~Drafts~lb?expandSubcollections=true", nil)
	for i, want := range []map[string]any{{"caseInsensitive": true}, {"caseSensitive": true}} {
		cond := r.body["rulesReference"].(map[string]any)["items"].([]any)[i].(map[string]any)["conditionsReference"].(map[string]any)["items"].([]any)[0].(map[string]any)
		for k, v := range want {
			if cond[k] != v || (k == "caseSensitive" && cond["caseInsensitive"] != nil) {
				t.Errorf("rule %d condition %v, want %s: %v alone", i, cond, k, v)
			}
		}
	}
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", map[string]any{"name": "both", "partition": "p1", "subPath": "Drafts",
		"requires": []string{"http"}, "controls": []string{"forwarding"}, "rules": []any{map[string]any{"name": "r",
			"conditions": []any{path(map[string]any{"caseSensitive": true, "caseInsensitive": true})}}}}), 400, "not both")
}
