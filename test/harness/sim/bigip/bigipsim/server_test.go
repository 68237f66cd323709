package bigipsim

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/f5devcentral/go-bigip"
	"github.com/google/go-cmp/cmp"
)

// start serves a simulator for one test.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s := New(opts)
	if err := s.Start(); err != nil {
		t.Fatalf("start simulator: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

type result struct {
	status int
	body   map[string]any
}

// call sends one request with basic auth admin/admin.
func call(t *testing.T, s *Server, method, path string, body any) result {
	t.Helper()
	return callWith(t, s, method, path, body, func(r *http.Request) { r.SetBasicAuth("admin", "admin") })
}

func callWith(t *testing.T, s *Server, method, path string, body any, auth func(*http.Request)) result {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("marshal body: %v", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL()+path, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != nil {
		auth(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	out := result{status: resp.StatusCode}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			t.Fatalf("%s %s: body is not a JSON object: %v: %s", method, path, err, raw)
		}
	}
	return out
}

func mustStatus(t *testing.T, r result, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; body %v", r.status, want, r.body)
	}
}

func createPartition(t *testing.T, s *Server, name string) {
	t.Helper()
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/sys/folder", map[string]any{"name": name, "partition": "/"}), 200)
}

func TestServer_errorsHaveBigIPShape(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web", "partition": "p1"}), 200)

	tests := []struct {
		name       string
		method     string
		path       string
		body       any
		wantStatus int
		wantText   string
	}{
		{"missing pool", "GET", "/mgmt/tm/ltm/pool/~Common~x", nil, 404, "01020036:3: The requested Pool (/Common/x) was not found."},
		{"bare name is Common", "GET", "/mgmt/tm/ltm/pool/web", nil, 404, "The requested Pool (/Common/web) was not found."},
		{"duplicate pool", "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "/p1/web"}, 409, "already exists in partition p1"},
		{"pool in missing partition", "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web", "partition": "nope"}, 400, "The requested folder (/nope) was not found."},
		{"missing member", "GET", "/mgmt/tm/ltm/pool/~p1~web/members/~p1~198.18.0.1:80", nil, 404, "was not found"},
		{"missing virtual", "DELETE", "/mgmt/tm/ltm/virtual/~p1~vs", nil, 404, "The requested Virtual Server (/p1/vs) was not found."},
		{"unknown monitor", "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{"monitor": "/Common/nope"}, 400, "The requested Monitor (/Common/nope) was not found."},
		{"virtual with bad destination", "POST", "/mgmt/tm/ltm/virtual", map[string]any{"name": "vs", "partition": "p1", "destination": "/p1/not-an-ip:80"}, 400, "destination"},
		{"virtual with missing pool", "POST", "/mgmt/tm/ltm/virtual", map[string]any{"name": "vs", "partition": "p1", "destination": "/p1/198.18.1.1:80", "pool": "/p1/nope"}, 400, "The requested Pool (/p1/nope) was not found."},
		{"udp profile on tcp virtual", "POST", "/mgmt/tm/ltm/virtual", map[string]any{"name": "vs", "partition": "p1", "destination": "/p1/198.18.1.1:80", "ipProtocol": "tcp", "profiles": []string{"/Common/udp"}}, 400, "requires ipProtocol udp"},
		{"bad JSON", "POST", "/mgmt/tm/ltm/pool", "not an object", 400, "Found invalid JSON body"},
		{"unknown path", "GET", "/mgmt/tm/ltm/nothing", nil, 404, "Public URI path not registered"},
		{"bad session", "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{"members": []any{map[string]any{"name": "198.18.0.1:80", "session": "drain"}}}, 400, "invalid session"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, tc.method, tc.path, tc.body)
			mustStatus(t, r, tc.wantStatus)
			msg, _ := r.body["message"].(string)
			if !strings.Contains(msg, tc.wantText) {
				t.Errorf("message %q does not contain %q", msg, tc.wantText)
			}
			if code, _ := r.body["code"].(float64); int(code) != tc.wantStatus {
				t.Errorf("code %v, want %d", r.body["code"], tc.wantStatus)
			}
			if _, isList := r.body["errorStack"].([]any); !isList {
				t.Errorf("errorStack missing in %v", r.body)
			}
		})
	}
}

func TestServer_putMembersReplacesAllAndCreatesNodes(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{
		"name": "web", "partition": "p1", "monitor": "/Common/tcp",
		"members": []any{map[string]any{"name": "198.18.0.1:61000", "partition": "p1"}, map[string]any{"name": "198.18.0.2:61000", "partition": "p1"}},
	}), 200)
	mustStatus(t, call(t, s, "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{
		"members": []any{
			map[string]any{"name": "198.18.0.2:61000", "partition": "p1", "session": "user-disabled"},
			map[string]any{"name": "198.18.0.3:61001"},
			map[string]any{"name": "2001:db8::5.61002"},
			map[string]any{"name": "198.18.0.4%2:61003"},
		},
	}), 200)

	got := s.Dump()
	want := State{
		Partitions: []string{"Common", "p1"},
		Pools: []Pool{{FullPath: "/p1/web", Monitor: "/Common/tcp ", Members: []Member{
			{FullPath: "/p1/198.18.0.2:61000", Address: "198.18.0.2", Session: "user-disabled", State: "unchecked"},
			{FullPath: "/p1/198.18.0.3:61001", Address: "198.18.0.3", Session: "user-enabled", State: "unchecked"},
			{FullPath: "/p1/2001:db8::5.61002", Address: "2001:db8::5", Session: "user-enabled", State: "unchecked"},
			{FullPath: "/p1/198.18.0.4%2:61003", Address: "198.18.0.4%2", Session: "user-enabled", State: "unchecked"},
		}}},
		Virtuals: []Virtual{},
		Nodes: []Node{
			{FullPath: "/p1/198.18.0.1", Address: "198.18.0.1"},
			{FullPath: "/p1/198.18.0.2", Address: "198.18.0.2"},
			{FullPath: "/p1/198.18.0.3", Address: "198.18.0.3"},
			{FullPath: "/p1/198.18.0.4%2", Address: "198.18.0.4%2"},
			{FullPath: "/p1/2001:db8::5", Address: "2001:db8::5"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("state (-want +got):\n%s", diff)
	}

	// Members are addressed with ~ escaping, and with %rd as go-bigip escapes it.
	mustStatus(t, call(t, s, "PATCH", "/mgmt/tm/ltm/pool/~p1~web/members/~p1~198.18.0.3:61001", map[string]any{"session": "user-disabled"}), 200)
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/pool/~p1~web/members/198.18.0.4%252:61003", nil), 200)
	r := call(t, s, "GET", "/mgmt/tm/ltm/pool/~p1~web?expandSubcollections=true", nil)
	mustStatus(t, r, 200)
	items := r.body["membersReference"].(map[string]any)["items"].([]any)
	var names []string
	for _, it := range items {
		m := it.(map[string]any)
		names = append(names, m["name"].(string)+"="+m["session"].(string))
	}
	wantNames := []string{"198.18.0.2:61000=user-disabled", "198.18.0.3:61001=user-disabled", "2001:db8::5.61002=user-enabled"}
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	for _, key := range []string{"name", "partition", "fullPath", "generation", "selfLink", "kind"} {
		if _, present := r.body[key]; !present {
			t.Errorf("pool has no %q: %v", key, r.body)
		}
	}
}

func TestServer_badMemberLeavesPoolUnchanged(t *testing.T) {
	s := start(t, Options{})
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web", "members": []string{"198.18.0.1:80"}}), 200)
	r := call(t, s, "PUT", "/mgmt/tm/ltm/pool/web", map[string]any{"members": []string{"198.18.0.2:80", "bad"}})
	mustStatus(t, r, 400)
	got := s.Dump()
	if len(got.Pools[0].Members) != 1 || got.Pools[0].Members[0].FullPath != "/Common/198.18.0.1:80" {
		t.Errorf("members after a failed replace: %+v", got.Pools[0].Members)
	}
	if len(got.Nodes) != 1 {
		t.Errorf("nodes after a failed replace: %+v", got.Nodes)
	}
}

func TestServer_virtualLifecycle(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "dns", "partition": "p1"}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", map[string]any{
		"name": "dns", "partition": "p1", "destination": "/p1/198.18.1.1:53", "ipProtocol": "udp",
		"pool": "dns", "sourceAddressTranslation": map[string]any{"type": "automap"}, "description": "d",
	}), 200)
	// The same address and port with another protocol is allowed; with the same one it is not.
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", map[string]any{
		"name": "dns-tcp", "partition": "p1", "destination": "198.18.1.1:53", "ipProtocol": "tcp",
	}), 200)
	r := call(t, s, "POST", "/mgmt/tm/ltm/virtual", map[string]any{"name": "again", "partition": "p1", "destination": "/p1/198.18.1.1:53", "ipProtocol": "udp"})
	mustStatus(t, r, 400)
	if msg := r.body["message"].(string); !strings.Contains(msg, "illegally shares both address and vlan") {
		t.Errorf("clash message %q", msg)
	}

	r = call(t, s, "GET", "/mgmt/tm/ltm/virtual/~p1~dns/profiles", nil)
	mustStatus(t, r, 200)
	items := r.body["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["fullPath"] != "/Common/udp" {
		t.Errorf("default profiles of a udp virtual: %v", items)
	}
	mustStatus(t, call(t, s, "GET", "/mgmt/tm/ltm/virtual/~p1~dns/policies", nil), 200)

	// A pool in use cannot be deleted; the virtual first.
	r = call(t, s, "DELETE", "/mgmt/tm/ltm/pool/~p1~dns", nil)
	mustStatus(t, r, 400)
	mustStatus(t, call(t, s, "PATCH", "/mgmt/tm/ltm/virtual/~p1~dns", map[string]any{"destination": "/p1/198.18.1.2:53"}), 200)
	got := s.Dump().Virtuals
	want := []Virtual{
		{FullPath: "/p1/dns", Description: "d", Destination: "/p1/198.18.1.2:53", IPProtocol: "udp", Pool: "/p1/dns", SourceAddressTranslation: "automap", Profiles: []string{"/Common/udp"}},
		{FullPath: "/p1/dns-tcp", Destination: "/p1/198.18.1.1:53", IPProtocol: "tcp", SourceAddressTranslation: "none", Profiles: []string{"/Common/tcp"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("virtuals (-want +got):\n%s", diff)
	}
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/virtual/~p1~dns", nil), 200)
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/pool/~p1~dns", nil), 200)
}

func TestServer_collectionsFilterByPartition(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "a", "partition": "p1"}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "b"}), 200)
	r := call(t, s, "GET", "/mgmt/tm/ltm/pool?$filter=partition+eq+p1", nil)
	mustStatus(t, r, 200)
	items := r.body["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["fullPath"] != "/p1/a" {
		t.Errorf("filtered pools: %v", items)
	}
	if r.body["kind"] != "tm:ltm:pool:poolcollectionstate" {
		t.Errorf("kind %v", r.body["kind"])
	}
	r = call(t, s, "GET", "/mgmt/tm/auth/partition/p1", nil)
	mustStatus(t, r, 200)
	r = call(t, s, "DELETE", "/mgmt/tm/sys/folder/~p1", nil)
	mustStatus(t, r, 400) // not empty
}

func TestServer_authentication(t *testing.T) {
	s := start(t, Options{Username: "u", Password: "p"})
	tests := []struct {
		name string
		auth func(*http.Request)
		want int
	}{
		{"none", nil, 401},
		{"wrong password", func(r *http.Request) { r.SetBasicAuth("u", "x") }, 401},
		{"basic", func(r *http.Request) { r.SetBasicAuth("u", "p") }, 200},
		{"unknown token", func(r *http.Request) { r.Header.Set("X-F5-Auth-Token", "nope") }, 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mustStatus(t, callWith(t, s, "GET", "/mgmt/tm/ltm/pool", nil, tc.auth), tc.want)
		})
	}

	login := callWith(t, s, "POST", "/mgmt/shared/authn/login", map[string]any{"username": "u", "password": "p", "loginProviderName": "tmos"}, nil)
	mustStatus(t, login, 200)
	if _, numeric := login.body["timeout"].(float64); numeric {
		t.Errorf("login answer has a numeric top-level timeout: %v", login.body)
	}
	token := login.body["token"].(map[string]any)["token"].(string)
	withToken := func(r *http.Request) { r.Header.Set("X-F5-Auth-Token", token) }
	patch := callWith(t, s, "PATCH", "/mgmt/shared/authz/tokens/"+token, map[string]any{"timeout": 1200}, withToken)
	mustStatus(t, patch, 200)
	if patch.body["timeout"] != float64(1200) {
		t.Errorf("token PATCH answer timeout %v, want numeric 1200", patch.body["timeout"])
	}
	mustStatus(t, callWith(t, s, "GET", "/mgmt/tm/ltm/pool", nil, withToken), 200)
	s.ExpireTokens()
	r := callWith(t, s, "GET", "/mgmt/tm/ltm/pool", nil, withToken)
	mustStatus(t, r, 401)
	mustStatus(t, callWith(t, s, "POST", "/mgmt/shared/authn/login", map[string]any{"username": "u", "password": "bad"}, nil), 401)
}

func TestServer_goBigIPTokenSessionOverTLS(t *testing.T) {
	s := start(t, Options{TLS: true})
	caFile := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(caFile, s.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := bigip.NewTokenSession(&bigip.Config{
		Address: s.URL(), Username: "admin", Password: "admin", TrustedCertificate: caFile,
		ConfigOptions: &bigip.ConfigOptions{APICallTimeout: 10 * time.Second, TokenTimeout: 1200 * time.Second, APICallRetries: 1},
	})
	if err != nil {
		t.Fatalf("NewTokenSession: %v", err)
	}
	if err := b.CreatePool("/Common/web"); err != nil {
		t.Fatalf("CreatePool: %v", err)
	}
	if err := b.AddPoolMember("/Common/web", &bigip.PoolMember{Name: "198.18.0.9:80"}); err != nil {
		t.Fatalf("AddPoolMember: %v", err)
	}
	if err := b.PoolMemberStatus("/Common/web", "198.18.0.9:80", "disable"); err != nil {
		t.Fatalf("PoolMemberStatus: %v", err)
	}
	m, err := b.GetPoolMember("/Common/web", "198.18.0.9:80")
	if err != nil || m.Session != "user-disabled" {
		t.Fatalf("GetPoolMember = %+v, %v; want session user-disabled", m, err)
	}
	if _, err := b.GetPool("/Common/nope"); err == nil || !strings.Contains(err.Error(), "was not found") {
		t.Errorf("GetPool of a missing pool: %v, want a not-found error", err)
	}
	if err := b.CreatePool("/Common/web"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("CreatePool twice: %v, want an already-exists error", err)
	}
	vs, err := b.VirtualServers()
	if err != nil || len(vs.VirtualServers) != 0 {
		t.Errorf("VirtualServers = %+v, %v", vs, err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CACertPEM())
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(s.URL() + "/sim/dump")
	if err != nil {
		t.Fatalf("dump over TLS: %v", err)
	}
	resp.Body.Close()
}

func TestServer_faultsAndCounters(t *testing.T) {
	s := start(t, Options{})
	if _, err := s.InjectFault(Fault{Method: "POST", Path: "ltm/pool$", Status: 500, Count: 2}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r := call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web"})
		mustStatus(t, r, 500)
		if msg, _ := r.body["message"].(string); msg == "" {
			t.Errorf("call %d: injected error has an empty message", i)
		}
	}
	mustStatus(t, call(t, s, "GET", "/mgmt/tm/ltm/pool", nil), 200) // another method is not hit
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web"}), 200)

	id, err := s.InjectFault(Fault{Path: "members", Status: 502, Message: "gateway down"})
	if err != nil {
		t.Fatal(err)
	}
	r := call(t, s, "GET", "/mgmt/tm/ltm/pool/web/members", nil)
	mustStatus(t, r, 502)
	if r.body["message"] != "gateway down" {
		t.Errorf("message %v", r.body["message"])
	}
	s.RemoveFault(id)
	mustStatus(t, call(t, s, "GET", "/mgmt/tm/ltm/pool/web/members", nil), 200)

	if _, err := s.InjectFault(Fault{Status: 500, For: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	mustStatus(t, call(t, s, "GET", "/mgmt/tm/ltm/pool", nil), 200) // the window is over

	want := map[string]int{"POST pool": 3, "GET pool": 2, "GET member": 2}
	if diff := cmp.Diff(want, s.Calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if got := s.Writes(); got != 3 {
		t.Errorf("Writes() = %d, want 3", got)
	}
	s.ResetCounters()
	if got := s.Writes(); got != 0 {
		t.Errorf("Writes() after reset = %d", got)
	}
}

func TestServer_hooksOverHTTP(t *testing.T) {
	s := start(t, Options{})
	r := callWith(t, s, "POST", "/sim/faults", map[string]any{"method": "GET", "path": "ltm/node", "status": 500, "count": 1, "latency": "1ms"}, nil)
	mustStatus(t, r, 200)
	mustStatus(t, call(t, s, "GET", "/mgmt/tm/ltm/node", nil), 500)
	mustStatus(t, call(t, s, "GET", "/mgmt/tm/ltm/node", nil), 200)
	r = callWith(t, s, "GET", "/sim/counters", nil, nil)
	mustStatus(t, r, 200)
	if r.body["writes"] != float64(0) || r.body["calls"].(map[string]any)["GET node"] != float64(2) {
		t.Errorf("counters %v", r.body)
	}
	mustStatus(t, callWith(t, s, "POST", "/sim/counters/reset", nil, nil), 200)
	mustStatus(t, callWith(t, s, "POST", "/sim/faults", map[string]any{"bogus": 1}, nil), 400)
	r = callWith(t, s, "GET", "/sim/dump", nil, nil)
	mustStatus(t, r, 200)
	if parts := r.body["partitions"].([]any); len(parts) != 1 || parts[0] != "Common" {
		t.Errorf("dump partitions %v", parts)
	}
}

func TestServer_transactionAppliesAllOrNothing(t *testing.T) {
	s := start(t, Options{})
	b := bigip.NewSession(&bigip.Config{Address: s.URL(), Username: "admin", Password: "admin",
		ConfigOptions: &bigip.ConfigOptions{APICallTimeout: 10 * time.Second, APICallRetries: 1}})

	tx, err := b.StartTransaction()
	if err != nil {
		t.Fatalf("StartTransaction: %v", err)
	}
	if err := b.CreatePool("a"); err != nil {
		t.Fatalf("queue CreatePool: %v", err)
	}
	if err := b.CreatePool("a"); err != nil { // fails at commit: a duplicate
		t.Fatalf("queue CreatePool: %v", err)
	}
	if err := b.CommitTransaction(tx.TransID); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("commit of a failing transaction: %v", err)
	}
	if got := s.Dump().Pools; len(got) != 0 {
		t.Fatalf("a failed transaction left pools: %+v", got)
	}

	tx, err = b.StartTransaction()
	if err != nil {
		t.Fatalf("StartTransaction: %v", err)
	}
	for _, n := range []string{"a", "b"} {
		if err := b.CreatePool(n); err != nil {
			t.Fatalf("queue CreatePool: %v", err)
		}
	}
	if err := b.CommitTransaction(tx.TransID); err != nil {
		t.Fatalf("CommitTransaction: %v", err)
	}
	if got := len(s.Dump().Pools); got != 2 {
		t.Errorf("pools after commit: %d, want 2", got)
	}
}

func TestServer_nodesAndMonitors(t *testing.T) {
	s := start(t, Options{})
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/node", map[string]any{"name": "web1", "address": "198.18.0.7"}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/node", map[string]any{"name": "web1", "address": "198.18.0.7"}), 409)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/node", map[string]any{"name": "bad", "address": "nowhere"}), 400)
	mustStatus(t, call(t, s, "PATCH", "/mgmt/tm/ltm/node/~Common~web1", map[string]any{"session": "user-disabled"}), 200)
	if r := call(t, s, "GET", "/mgmt/tm/ltm/node/web1", nil); r.body["session"] != "user-disabled" {
		t.Errorf("node session %v", r.body["session"])
	}

	// A custom monitor, a pool that names a node by name and uses the monitor.
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/monitor/tcp", map[string]any{"name": "slow", "defaultsFrom": "/Common/tcp", "interval": 30}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{
		"name": "web", "monitor": "min 1 of { slow /Common/tcp }", "members": []string{"web1:8080"},
	}), 200)
	p := s.Dump().Pools[0]
	if p.Monitor != "min 1 of { /Common/slow /Common/tcp } " || p.Members[0].Address != "198.18.0.7" {
		t.Errorf("pool %+v", p)
	}
	for _, tc := range []struct{ method, path string }{
		{"DELETE", "/mgmt/tm/ltm/node/web1"},                // a member uses it
		{"DELETE", "/mgmt/tm/ltm/monitor/tcp/~Common~slow"}, // a pool uses it
		{"DELETE", "/mgmt/tm/ltm/monitor/tcp/tcp"},          // built in
		{"PATCH", "/mgmt/tm/ltm/monitor/http/http"},         // built in
	} {
		mustStatus(t, call(t, s, tc.method, tc.path, map[string]any{"interval": 1}), 400)
	}
	mustStatus(t, call(t, s, "PUT", "/mgmt/tm/ltm/pool/web", map[string]any{"monitor": "none", "members": []string{}}), 200)
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/monitor/tcp/~Common~slow", nil), 200)
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/node/web1", nil), 200)
	mustStatus(t, call(t, s, "GET", "/mgmt/tm/ltm/monitor/nope", nil), 404)
	r := call(t, s, "GET", "/mgmt/tm/ltm/monitor", nil)
	mustStatus(t, r, 200)
	if n := len(r.body["items"].([]any)); n != len(builtinMonitors) {
		t.Errorf("monitor types %d, want %d", n, len(builtinMonitors))
	}
}

func TestServer_virtualSubcollectionsThroughGoBigIP(t *testing.T) {
	s := start(t, Options{})
	b := bigip.NewSession(&bigip.Config{Address: s.URL(), Username: "admin", Password: "admin",
		ConfigOptions: &bigip.ConfigOptions{APICallTimeout: 10 * time.Second, APICallRetries: 1}})
	if err := b.CreatePool("/Common/web"); err != nil {
		t.Fatal(err)
	}
	// Policies are made as drafts and published, as go-bigip does.
	if err := b.CreatePolicy(&bigip.Policy{Name: "/Common/Drafts/redirect", Strategy: "first-match"}); err != nil {
		t.Fatalf("CreatePolicy: %v", err)
	}
	if err := b.PublishPolicy("redirect", "/Common/Drafts/redirect"); err != nil {
		t.Fatalf("PublishPolicy: %v", err)
	}
	err := b.CreateVirtualServer(&bigip.VirtualServer{Name: "vs", Partition: "Common", Destination: "198.18.1.1:443", Pool: "web",
		Profiles: []bigip.Profile{{Name: "tcp"}, {Name: "http"}}, Policies: []string{"/Common/redirect"}})
	if err != nil {
		t.Fatalf("CreateVirtualServer: %v", err)
	}
	vs, err := b.GetVirtualServer("/Common/vs")
	if err != nil {
		t.Fatalf("GetVirtualServer: %v", err)
	}
	var profiles []string
	for _, p := range vs.Profiles {
		profiles = append(profiles, p.FullPath)
	}
	if diff := cmp.Diff([]string{"/Common/tcp", "/Common/http"}, profiles); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/Common/redirect"}, vs.Policies); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	if vs.Destination != "/Common/198.18.1.1:443" || vs.Pool != "/Common/web" {
		t.Errorf("virtual %+v", vs)
	}
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/virtual/vs/profiles/~Common~http", nil), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual/vs/profiles", map[string]any{"name": "oneconnect"}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual/vs/profiles", map[string]any{"name": "oneconnect"}), 409)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual/vs/profiles", map[string]any{"name": "udp"}), 400)
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/virtual/vs/policies/~Common~redirect", nil), 200)
	if got := s.Dump().Virtuals[0].Profiles; !cmp.Equal(got, []string{"/Common/tcp", "/Common/oneconnect"}) {
		t.Errorf("profiles after changes: %v", got)
	}
	if err := b.DeleteVirtualServer("/Common/vs"); err != nil {
		t.Errorf("DeleteVirtualServer: %v", err)
	}
}

func TestServer_doBypassesAuthFaultsAndCounters(t *testing.T) {
	s := New(Options{}) // not started: Do needs no listener
	if _, err := s.InjectFault(Fault{Status: 500}); err != nil {
		t.Fatal(err)
	}
	status, body := s.Do("POST", "/mgmt/tm/auth/partition", map[string]any{"name": "p1", "description": "d"})
	if status != 200 {
		t.Fatalf("Do: %d %s", status, body)
	}
	status, body = s.Do("GET", "/mgmt/tm/sys/folder/~p1", nil)
	if status != 200 || !strings.Contains(string(body), `"fullPath":"/p1"`) {
		t.Errorf("folder: %d %s", status, body)
	}
	if status, _ := s.Do("GET", "/other", nil); status != 404 {
		t.Errorf("Do outside /mgmt/tm/: %d", status)
	}
	if s.Writes() != 0 || len(s.Calls()) != 0 {
		t.Errorf("Do was counted: %v", s.Calls())
	}
}
