package avischema

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func pinnedSchema(t *testing.T) *Schema {
	t.Helper()
	s, err := Pinned()
	if err != nil {
		t.Fatalf("Pinned: %v", err)
	}
	return s
}

var v2017 = Version{20, 1, 7}

func field(t *testing.T, s *Schema, typ string, path ...string) *Prop {
	t.Helper()
	d, err := s.Type(typ)
	if err != nil || d == nil {
		t.Fatalf("Type(%s): %v, %v", typ, d, err)
	}
	var p *Prop
	for i, name := range path {
		if p = d.Props[name]; p == nil {
			t.Fatalf("%s has no field %s", typ, strings.Join(path[:i+1], "."))
		}
		switch {
		case p.Object != nil:
			d = p.Object
		case p.Items != nil && p.Items.Object != nil:
			d = p.Items.Object
		}
	}
	return p
}

func TestPinned_readsTheDescriptions(t *testing.T) {
	s := pinnedSchema(t)
	if s.Version != "20.1.7" {
		t.Errorf("Version = %s, want 20.1.7 (the pinned module's)", s.Version)
	}
	if p := field(t, s, "pool", "servers"); p.MaxItems != 5000 {
		t.Errorf("pool servers MaxItems = %d, want 5000", p.MaxItems)
	}
	port := field(t, s, "pool", "servers", "port")
	if port.Range == nil || *port.Range != [2]int64{1, 65535} || !slices.Equal(port.Special, []int64{0}) {
		t.Errorf("server port = %v special %v, want 1-65535 and 0", port.Range, port.Special)
	}
	graceful := field(t, s, "pool", "graceful_disable_timeout")
	if *graceful.Range != [2]int64{1, 7200} || !slices.Equal(graceful.Special, []int64{0, -1}) {
		t.Errorf("graceful_disable_timeout = %v special %v, want 1-7200 and 0, -1", graceful.Range, graceful.Special)
	}
	if p := field(t, s, "pool", "lb_algorithm"); !slices.Contains(p.Enum, "LB_ALGORITHM_CONSISTENT_HASH") || p.Default != "LB_ALGORITHM_LEAST_CONNECTIONS" {
		t.Errorf("lb_algorithm enum %v default %v", p.Enum, p.Default)
	}
	if p := field(t, s, "pool", "health_monitor_refs"); p.Items.RefType != "healthmonitor" || p.MaxItems != 50 {
		t.Errorf("health_monitor_refs: items ref %q, max %d", p.Items.RefType, p.MaxItems)
	}
	if p := field(t, s, "virtualservice", "markers"); !slices.Equal(p.Introduced, []Version{{20, 1, 5}}) {
		t.Errorf("markers introduced in %v, want 20.1.5", p.Introduced)
	}
	if p := field(t, s, "virtualservice", "services", "port"); *p.Range != [2]int64{0, 65535} {
		t.Errorf("service port range %v, want 0-65535", p.Range)
	}
}

func TestDescribe_forms(t *testing.T) {
	for _, tc := range []struct {
		desc string
		want Prop
	}{
		{"Allowed values are 1-7200. Special values are 0 - Immediate, -1 - Infinite. Unit is MIN. Allowed in Enterprise edition.",
			Prop{Range: &[2]int64{1, 7200}, Special: []int64{0, -1}}},
		{"Allowed values are 0 - 10. Field introduced in 18.2.3.", Prop{Range: &[2]int64{0, 10}, Introduced: []Version{{18, 2, 3}}}},
		{"Allowed values are 0,1,2,4,8,16. Field introduced in 17.2.12, 18.1.3, 18.2.1.",
			Prop{Range: &[2]int64{1, 0}, Special: []int64{0, 1, 2, 4, 8, 16}, Introduced: []Version{{17, 2, 12}, {18, 1, 3}, {18, 2, 1}}}},
		{"Allowed values are -90.0-+90.0. Field introduced in 17.1.1.", Prop{Introduced: []Version{{17, 1, 1}}}},
		{" Enum options - V4, DNS, V6.", Prop{Enum: []string{"V4", "DNS", "V6"}}},
		{"Criteria. Enum options - A_B, C. Allowed in Basic(Allowed values- A_B) edition.", Prop{Enum: []string{"A_B", "C"}}},
		{"Special values are 0 - 'Do not choose members from this pool.A priority of 0 is equivalent to disabling the pool.'.",
			Prop{Special: []int64{0}}},
		{"It is a reference to an object of type HealthMonitor. Maximum of 50 items allowed.", Prop{RefType: "healthmonitor", MaxItems: 50}},
	} {
		var got Prop
		describe(&got, tc.desc)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("describe(%q) (-want +got):\n%s", tc.desc, diff)
		}
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCheck(t *testing.T) {
	s := pinnedSchema(t)
	for _, tc := range []struct {
		name, typ, body string
		version         Version
		want            []string // violation paths, sorted
	}{
		{"server port 0 is the pool's port", "pool",
			`{"name":"p","servers":[{"ip":{"addr":"10.0.0.1","type":"V4"},"port":0}]}`, v2017, nil},
		{"server port out of range", "pool",
			`{"name":"p","servers":[{"ip":{"addr":"10.0.0.1","type":"V4"},"port":70000}]}`, v2017, []string{"servers[0].port"}},
		{"required name and ip", "pool", `{"servers":[{"port":80}]}`, v2017, []string{"name", "servers[0].ip"}},
		{"enum", "pool", `{"name":"p","lb_algorithm":"LB_ALGORITHM_FASTEST"}`, v2017, []string{"lb_algorithm"}},
		{"types", "pool", `{"name":"p","graceful_disable_timeout":"1","servers":{}}`, v2017,
			[]string{"graceful_disable_timeout", "servers"}},
		{"special value", "pool", `{"name":"p","graceful_disable_timeout":-1}`, v2017, nil},
		{"unknown field", "pool", `{"name":"p","gibberish":1}`, v2017, []string{"gibberish"}},
		{"nulls are unset fields", "pool", `{"name":"p","servers":[{"ip":{"addr":"10.0.0.1","type":"V4"},"port":null}]}`, v2017, nil},
		{"a virtual service needs neither services nor a VsVip (SNI children)", "virtualservice", `{"name":"child"}`, v2017, nil},
		{"virtual service port 0", "virtualservice", `{"name":"vs","services":[{"port":0}]}`, v2017, nil},
		{"markers before 20.1.5", "virtualservice", `{"name":"vs","markers":[{"key":"k","values":["v"]}]}`, Version{20, 1, 4},
			[]string{"markers"}},
		{"markers in 20.1.5", "virtualservice", `{"name":"vs","markers":[{"key":"k","values":["v"]}]}`, Version{20, 1, 5}, nil},
		{"labels gone in 22.1", "pool", `{"name":"p","labels":[]}`, Version{22, 1, 3}, []string{"labels"}},
		{"labels in 20.1", "pool", `{"name":"p","labels":[]}`, v2017, nil},
		{"query equals since 22.1.3", "httppolicyset",
			`{"name":"h","http_request_policy":{"rules":[{"name":"r","index":1,"enable":true,"match":{"query":{"match_criteria":"QUERY_MATCH_EQUALS","match_str":["a=b"]}}}]}}`,
			Version{22, 1, 3}, nil},
		{"query equals in 20.1", "httppolicyset",
			`{"name":"h","http_request_policy":{"rules":[{"name":"r","index":1,"enable":true,"match":{"query":{"match_criteria":"QUERY_MATCH_EQUALS","match_str":["a=b"]}}}]}}`,
			v2017, []string{"http_request_policy.rules[0].match.query.match_criteria"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs, err := s.Check(tc.typ, decode(t, tc.body), tc.version)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vs {
				got = append(got, v.Path)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s\n%v", diff, vs)
			}
		})
	}
}

func TestCheck_itemLimit(t *testing.T) {
	s := pinnedSchema(t)
	servers := make([]any, 5001)
	for i := range servers {
		servers[i] = map[string]any{"ip": map[string]any{"addr": "10.0.0.1", "type": "V4"}}
	}
	vs, _ := s.Check("pool", map[string]any{"name": "p", "servers": servers}, v2017)
	if len(vs) != 1 || vs[0].Path != "servers" || !strings.Contains(vs[0].Msg, "at most 5000") {
		t.Errorf("violations %v, want servers: at most 5000", vs)
	}
}

func TestRefs(t *testing.T) {
	s := pinnedSchema(t)
	refs, err := s.Refs("virtualservice", decode(t, `{"name":"vs","pool_ref":"/api/pool/?name=p","vsvip_ref":"/api/vsvip/x",
		"l4_policies":[{"index":0,"l4_policy_set_ref":"/api/l4policyset/y"}],"ssl_key_and_certificate_refs":["/api/sslkeyandcertificate/z"]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{
		{Path: "l4_policies[0].l4_policy_set_ref", Type: "l4policyset", Value: "/api/l4policyset/y"},
		{Path: "pool_ref", Type: "pool", Value: "/api/pool/?name=p"},
		{Path: "ssl_key_and_certificate_refs[0]", Type: "sslkeyandcertificate", Value: "/api/sslkeyandcertificate/z"},
		{Path: "vsvip_ref", Type: "vsvip", Value: "/api/vsvip/x"},
	}
	if diff := cmp.Diff(want, refs); diff != "" {
		t.Errorf("Refs (-want +got):\n%s", diff)
	}
}

func TestFillDefaults(t *testing.T) {
	s := pinnedSchema(t)
	obj := decode(t, `{"name":"p","servers":[{"ip":{"addr":"10.0.0.1","type":"V4"},"port":8080}]}`)
	if err := s.FillDefaults("pool", obj, v2017); err != nil {
		t.Fatal(err)
	}
	// The defaults a controller shows, as in AKO's recorded pool
	// (tests/bootuptests/bootupmock/pool_mock.json).
	for k, want := range map[string]any{"lb_algorithm": "LB_ALGORITHM_LEAST_CONNECTIONS", "default_server_port": float64(80),
		"graceful_disable_timeout": float64(1), "connection_ramp_duration": float64(10), "enabled": true,
		"lb_algorithm_hash": "LB_ALGORITHM_CONSISTENT_HASH_SOURCE_IP_ADDRESS"} {
		if obj[k] != want {
			t.Errorf("%s = %v, want %v", k, obj[k], want)
		}
	}
	srv := obj["servers"].([]any)[0].(map[string]any)
	if srv["enabled"] != true || srv["ratio"] != float64(1) || srv["port"] != float64(8080) {
		t.Errorf("server after defaults: %v", srv)
	}
	if _, ok := obj["uuid"]; ok {
		t.Error("a read-only field got a default")
	}
}
