package bigipsim

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The objects of a pool's traffic policy: monitors, source-address and
// cookie persistence profiles derived from the built-in ones, and a
// virtual's persist, stored as BIG-IP answers them and refused as it
// refuses them.
func TestServer_persistenceProfilesAndMonitors(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	desc := `{"owner":"npl"}`
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/monitor/http", map[string]any{"name": "hm", "partition": "p1",
		"description": desc, "defaultsFrom": "/Common/http", "interval": 5, "timeout": 16, "timeUntilUp": 10,
		"send": `GET /healthz HTTP/1.0\r\n\r\n`, "recv": `^HTTP/1\.[01] 200`}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/persistence/source-addr", map[string]any{"name": "src", "partition": "p1",
		"description": desc, "defaultsFrom": "/Common/source_addr", "timeout": "10800"}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/persistence/cookie", map[string]any{"name": "ck", "partition": "p1",
		"description": desc, "defaultsFrom": "/Common/cookie", "method": "insert", "cookieName": "session", "expiration": "1:0:0"}), 200)
	got := call(t, s, "GET", "/mgmt/tm/ltm/persistence/source-addr/~p1~src", nil).body
	for k, want := range map[string]any{"kind": "tm:ltm:persistence:source-addr:source-addrstate", "timeout": "10800",
		"defaultsFrom": "/Common/source_addr", "matchAcrossPools": "disabled", "fullPath": "/p1/src"} {
		if got[k] != want {
			t.Errorf("source-addr profile %s = %v, want %v", k, got[k], want)
		}
	}
	list := call(t, s, "GET", "/mgmt/tm/ltm/persistence/cookie?$filter=partition+eq+p1", nil).body["items"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["cookieName"] != "session" {
		t.Errorf("cookie profiles of p1: %v", list)
	}

	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web", "partition": "p1", "monitor": "/p1/hm",
		"slowRampTime": 30, "loadBalancingMode": "least-connections-member",
		"members": []any{map[string]any{"name": "198.18.0.1:80", "partition": "p1", "connectionLimit": 100}}}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", map[string]any{"name": "l4", "partition": "p1",
		"destination": "/p1/198.18.100.1:80", "pool": "/p1/web", "persist": []any{map[string]any{"name": "src", "partition": "p1"}}}), 200)
	v := call(t, s, "GET", "/mgmt/tm/ltm/virtual/~p1~l4", nil).body
	want := []any{map[string]any{"name": "src", "partition": "p1", "tmDefault": "yes",
		"nameReference": map[string]any{"link": "https://localhost/mgmt/tm/ltm/persistence/source-addr/~p1~src?ver=17.1.0"}}}
	if diff := cmp.Diff(want, v["persist"]); diff != "" {
		t.Errorf("persist of the virtual (-want +got):\n%s", diff)
	}
	if dv := s.Dump().Virtuals[0]; !cmp.Equal(dv.Persist, []string{"/p1/src"}) {
		t.Errorf("Dump: persist %v", dv.Persist)
	}
	if d := s.Dump(); len(d.Monitors) != 1 || len(d.Persistence) != 2 || d.Persistence[0].FullPath != "/p1/ck" ||
		d.Persistence[0].Properties["cookieName"] != "session" {
		t.Errorf("Dump: monitors %v, persistence %v", d.Monitors, d.Persistence)
	}

	for _, tc := range []struct {
		name, method, path string
		body               map[string]any
		status             int
		want               string
	}{
		{"an unknown persistence property", "POST", "/mgmt/tm/ltm/persistence/cookie", map[string]any{"name": "x", "partition": "p1",
			"cookieLifetime": 5}, 400, `Found unexpected json pair at configuration item /ltm/persistence/cookie/. The json pair is "cookieLifetime":5.`},
		{"a timeout as a number", "POST", "/mgmt/tm/ltm/persistence/source-addr", map[string]any{"name": "x", "partition": "p1",
			"timeout": 180}, 400, `"timeout" at configuration item /ltm/persistence/source-addr/ must be a string, not a number`},
		{"timeUntilUp as a string", "POST", "/mgmt/tm/ltm/monitor/tcp", map[string]any{"name": "x", "partition": "p1",
			"timeUntilUp": "10"}, 400, `"timeUntilUp" at configuration item /ltm/monitor/tcp/ must be an integer, not a string`},
		{"a persistence type BIG-IP has not", "GET", "/mgmt/tm/ltm/persistence/jsessionid", nil, 404, ""},
		{"a missing persistence profile", "PATCH", "/mgmt/tm/ltm/virtual/~p1~l4", map[string]any{"persist": []any{"/p1/none"}},
			400, "01020036:3: The requested Persistence Profile (/p1/none) was not found."},
		{"cookie persistence without an http profile", "PATCH", "/mgmt/tm/ltm/virtual/~p1~l4", map[string]any{"persist": []any{"/p1/ck"}},
			400, "Cookie persistence requires an HTTP or FastHTTP profile"},
		{"deleting a profile in use", "DELETE", "/mgmt/tm/ltm/persistence/source-addr/~p1~src", nil, 400, "in use by virtual server /p1/l4"},
		{"deleting a monitor in use", "DELETE", "/mgmt/tm/ltm/monitor/http/~p1~hm", nil, 400, "Monitor /p1/hm is in use by pool /p1/web"},
		{"changing a built-in profile", "PATCH", "/mgmt/tm/ltm/persistence/cookie/~Common~cookie", map[string]any{"cookieName": "x"},
			400, "cannot be modified"},
	} {
		r := call(t, s, tc.method, tc.path, tc.body)
		if tc.want == "" {
			mustStatus(t, r, tc.status)
			continue
		}
		wantMessage(t, r, tc.status, tc.want)
	}
	// With the http profile, a cookie; an empty persist removes it, and
	// then the profiles may go.
	mustStatus(t, call(t, s, "PATCH", "/mgmt/tm/ltm/virtual/~p1~l4", map[string]any{"profiles": []any{"/Common/tcp", "/Common/http"},
		"persist": []any{"/p1/ck"}}), 200)
	mustStatus(t, call(t, s, "PATCH", "/mgmt/tm/ltm/virtual/~p1~l4", map[string]any{"persist": []any{}}), 200)
	if v := call(t, s, "GET", "/mgmt/tm/ltm/virtual/~p1~l4", nil).body; v["persist"] != nil {
		t.Errorf("persist after removal: %v", v["persist"])
	}
	for _, typ := range []string{"cookie/~p1~ck", "source-addr/~p1~src"} {
		mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/persistence/"+typ, nil), 200)
	}
	if d := s.Dump(); len(d.Persistence) != 0 {
		t.Errorf("persistence profiles left: %v", d.Persistence)
	}
}
