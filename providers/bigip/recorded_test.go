package bigip

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// recorded reads testdata/recorded/<name>.json: properties a real BIG-IP
// answers with (testdata/recorded/README.md says from where).
func recorded(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "recorded", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// get reads a simulator object as BIG-IP answers it.
func (e *env) get(t *testing.T, path string) map[string]any {
	t.Helper()
	status, raw := e.sim.Do("GET", path, nil)
	var out map[string]any
	if status != 200 || json.Unmarshal(raw, &out) != nil {
		t.Fatalf("GET %s: %d %s", path, status, raw)
	}
	return out
}

func itemsOf(v any) []map[string]any {
	ref, _ := v.(map[string]any)
	list, _ := ref["items"].([]any)
	out := make([]map[string]any, 0, len(list))
	for _, it := range list {
		out = append(out, it.(map[string]any))
	}
	return out
}

// recordState turns the objects the provider made in the partition into
// what a BIG-IP 12.1 shows of them: the properties of recorded pools,
// members (an enabled member of a monitored pool is monitor-enabled),
// virtuals, policy conditions and actions; with foreign set, also values
// of properties npl does not own.
func (e *env) recordState(t *testing.T, foreign bool) {
	t.Helper()
	other := map[string]any{}
	if foreign {
		other = recorded(t, "foreign")
	}
	part := "$filter=partition+eq+" + testPartition
	for _, pool := range itemsOf(map[string]any{"items": e.get(t, "/mgmt/tm/ltm/pool?expandSubcollections=true&"+part)["items"]}) {
		body := recorded(t, "pool")
		if o, ok := other["pool"].(map[string]any); ok {
			maps.Copy(body, o)
		}
		var members []any
		for _, m := range itemsOf(pool["membersReference"]) {
			mb := recorded(t, "member")
			if o, ok := other["member"].(map[string]any); ok {
				maps.Copy(mb, o)
			}
			mb["name"], mb["partition"] = m["name"], m["partition"]
			if m["session"] == sessionDisabled {
				mb["session"], mb["state"] = sessionDisabled, "user-down"
			}
			mb["ratio"] = m["ratio"]
			members = append(members, mb)
		}
		body["members"] = members
		e.do(t, "PUT", "/mgmt/tm/ltm/pool/~"+testPartition+"~"+pool["name"].(string), body)
	}
	for _, v := range itemsOf(map[string]any{"items": e.get(t, "/mgmt/tm/ltm/virtual?"+part)["items"]}) {
		body := recorded(t, "virtual")
		if o, ok := other["virtual"].(map[string]any); ok {
			maps.Copy(body, o)
		}
		e.do(t, "PATCH", "/mgmt/tm/ltm/virtual/~"+testPartition+"~"+v["name"].(string), body)
	}
	for _, pol := range itemsOf(map[string]any{"items": e.get(t, "/mgmt/tm/ltm/policy?expandSubcollections=true&"+part)["items"]}) {
		name := pol["name"].(string)
		var rules []any
		for _, r := range itemsOf(pol["rulesReference"]) {
			rule := map[string]any{"name": r["name"], "ordinal": r["ordinal"]}
			if d, ok := r["description"]; ok {
				rule["description"] = d
			}
			for _, sub := range []struct{ key, fixture string }{{"conditions", "condition"}, {"actions", "action"}} {
				var items []any
				for i, it := range itemsOf(r[sub.key+"Reference"]) {
					out := recorded(t, sub.fixture)
					maps.Copy(out, it)
					if sub.key == "conditions" {
						out["index"] = i
					}
					for _, k := range []string{"kind", "selfLink", "generation", "fullPath"} {
						delete(out, k)
					}
					items = append(items, out)
				}
				rule[sub.key] = items
			}
			rules = append(rules, rule)
		}
		e.do(t, "PATCH", "/mgmt/tm/ltm/policy/~"+testPartition+"~"+name+"?options=create-draft", map[string]any{})
		e.do(t, "PUT", "/mgmt/tm/ltm/policy/~"+testPartition+"~Drafts~"+name, map[string]any{"rules": rules})
		e.do(t, "POST", "/mgmt/tm/ltm/policy", map[string]any{"command": "publish", "name": "/" + testPartition + "/Drafts/" + name})
	}
}

// Load balancers npl made, read back as a BIG-IP 12.1 answers (the
// defaults it shows, members monitor-enabled and down, conditions with
// caseInsensitive, index, external, remote and present, actions with their
// zeroes), are in sync: Ensure writes nothing and List reads the model; and
// those that differ only in what npl does not own (slow ramp, connection
// limits, mirroring, rate limits) are left alone.
func TestProvider_recordedObjectsReadBackInSync(t *testing.T) {
	for _, foreign := range []bool{false, true} {
		e := newEnv(t, envOptions{})
		l4 := newLB("shop/db", tcp(5432, member("198.18.0.11", 61000), drained("198.18.0.12", 61001)), udp(53, member("198.18.0.11", 61002)))
		l7 := ingressLB()
		e.ensure(t, l4)
		e.ensure(t, l7)
		want := e.list(t)
		e.recordState(t, foreign)
		recordedState := e.sim.Dump()

		e.sim.ResetCounters()
		e.ensure(t, l4)
		e.ensure(t, l7)
		if w := writesOnly(e.sim.Calls()); len(w) != 0 {
			t.Errorf("foreign %v: Ensure of the recorded state wrote %v, want nothing", foreign, w)
		}
		if diff := cmp.Diff(recordedState, e.sim.Dump()); diff != "" {
			t.Errorf("foreign %v: the BIG-IP's objects changed (-before +after):\n%s", foreign, diff)
		}
		if diff := cmp.Diff(want, e.list(t)); diff != "" {
			t.Errorf("foreign %v: List (-want +got):\n%s", foreign, diff)
		}
		if foreign {
			pool := e.get(t, "/mgmt/tm/ltm/pool/~"+testPartition+"~"+l4.Listeners[0].Pool.Name)
			if pool["slowRampTime"] != float64(30) || !strings.HasSuffix(pool["monitor"].(string), " ") {
				t.Errorf("pool after Ensure: %v", pool)
			}
		}
	}
}
