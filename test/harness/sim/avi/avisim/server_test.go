package avisim

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// startServer starts a simulator for one test and stops it at the end.
func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	srv := New(opts)
	if _, err := srv.Start(); err != nil {
		t.Fatalf("start simulator: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// testClient is a plain HTTPS client of the simulator that trusts its CA,
// keeps cookies and sends the CSRF token as the SDK does.
type testClient struct {
	t      *testing.T
	srv    *Server
	hc     *http.Client
	tenant string
	// version is the X-Avi-Version sent: the controller's when empty, none
	// when "-".
	version string
}

func newClient(t *testing.T, srv *Server) *testClient {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.CACertPEM()) {
		t.Fatal("CACertPEM holds no certificate")
	}
	jar, _ := cookiejar.New(nil)
	return &testClient{t: t, srv: srv, hc: &http.Client{
		Jar:     jar,
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the simulator must never redirect")
		},
	}}
}

func loggedIn(t *testing.T, srv *Server) *testClient {
	t.Helper()
	c := newClient(t, srv)
	if status, body := c.do("POST", "/login", map[string]string{"username": "admin", "password": "admin"}); status != http.StatusOK {
		t.Fatalf("login: %d %v", status, body)
	}
	return c
}

// do sends one request and decodes the JSON answer (nil when empty).
func (c *testClient) do(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.srv.URL()+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	switch c.version {
	case "":
		req.Header.Set("X-Avi-Version", c.srv.opts.Version)
	case "-":
	default:
		req.Header.Set("X-Avi-Version", c.version)
	}
	if c.tenant != "" {
		req.Header.Set("X-Avi-Tenant", c.tenant)
	}
	u, _ := url.Parse(c.srv.URL())
	for _, ck := range c.hc.Jar.Cookies(u) {
		if ck.Name == "csrftoken" {
			req.Header.Set("X-CSRFToken", ck.Value)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) == 0 {
		return resp.StatusCode, nil
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s %s: answer is not a JSON object: %q", method, path, raw)
	}
	return resp.StatusCode, out
}

// mustCreate POSTs obj and fails the test unless it is created.
func (c *testClient) mustCreate(typ string, obj map[string]any) map[string]any {
	c.t.Helper()
	status, out := c.do("POST", "/api/"+typ, obj)
	if status != http.StatusCreated {
		c.t.Fatalf("create %s %v: %d %v", typ, obj["name"], status, out)
	}
	return out
}

func names(results any) []string {
	var out []string
	for _, r := range results.([]any) {
		out = append(out, r.(map[string]any)["name"].(string))
	}
	return out
}

func TestServer_normalisesPathsAndNeverRedirects(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	created := c.mustCreate("pool", map[string]any{"name": "p1"})
	uuid := created["uuid"].(string)

	for _, path := range []string{"/api/pool", "//api/pool/", "/api//pool", "//api/pool?name=p1"} {
		status, out := c.do("GET", path, nil)
		if status != http.StatusOK {
			t.Errorf("GET %s: %d %v", path, status, out)
			continue
		}
		if diff := cmp.Diff([]string{"p1"}, names(out["results"])); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", path, diff)
		}
	}
	for _, path := range []string{"/api/pool/" + uuid, "//api/pool/" + uuid + "/"} {
		if status, out := c.do("GET", path, nil); status != http.StatusOK || out["name"] != "p1" {
			t.Errorf("GET %s: %d %v", path, status, out)
		}
	}
	if status, out := c.do("POST", "//api/pool/", map[string]any{"name": "p2"}); status != http.StatusCreated {
		t.Errorf("POST //api/pool/: %d %v", status, out)
	}
	if status, out := c.do("GET", "//api/initial-data", nil); status != http.StatusOK {
		t.Errorf("GET //api/initial-data: %d %v", status, out)
	}
}

func TestServer_login(t *testing.T) {
	srv := startServer(t, Options{Username: "u", Password: "p"})
	c := newClient(t, srv)

	if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusUnauthorized {
		t.Errorf("GET without session: got %d, want 401", status)
	}
	if status, _ := c.do("POST", "/login", map[string]string{"username": "u", "password": "wrong"}); status != http.StatusUnauthorized {
		t.Errorf("login with a wrong password: got %d, want 401", status)
	}
	if status, out := c.do("POST", "/login", map[string]string{"username": "u", "password": "p"}); status != http.StatusOK {
		t.Fatalf("login: %d %v", status, out)
	}
	u, _ := url.Parse(srv.URL())
	got := map[string]bool{}
	for _, ck := range c.hc.Jar.Cookies(u) {
		got[ck.Name] = ck.Value != ""
	}
	if diff := cmp.Diff(map[string]bool{"csrftoken": true, "sessionid": true, "avi-sessionid": true}, got); diff != "" {
		t.Errorf("login cookies (-want +got):\n%s", diff)
	}
	if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusOK {
		t.Errorf("GET with session: got %d, want 200", status)
	}

	// A write without the CSRF token is refused.
	req, _ := http.NewRequest("POST", srv.URL()+"/api/pool", strings.NewReader(`{"name":"x"}`))
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST without X-CSRFToken: got %d, want 403", resp.StatusCode)
	}

	if status, _ := c.do("POST", "/logout", nil); status != http.StatusOK {
		t.Errorf("logout: got %d", status)
	}
	if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusUnauthorized {
		t.Errorf("GET after logout: got %d, want 401", status)
	}
}

func TestServer_fixedEndpoints(t *testing.T) {
	srv := startServer(t, Options{Version: "30.1.1"})
	c := newClient(t, srv) // neither endpoint needs a session

	status, out := c.do("GET", "/api/initial-data", nil)
	if status != http.StatusOK {
		t.Fatalf("initial-data: %d", status)
	}
	if got := out["version"].(map[string]any)["Version"]; got != "30.1.1" {
		t.Errorf("initial-data version: got %v, want 30.1.1", got)
	}
	if status, out := c.do("GET", "/api/cluster/status", nil); status != http.StatusOK || out["cluster_state"] == nil {
		t.Errorf("cluster/status: %d %v", status, out)
	}
}

func TestServer_collectionFiltersAndPaging(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.mustCreate("cloud", map[string]any{"name": "Other-Cloud", "vtype": "CLOUD_NONE"})
	for _, p := range []struct{ name, createdBy, cloud string }{
		{"c1--ns-a-TCP-80", "npl-c1", ""},
		{"c1--ns-a-TCP-81", "npl-c1", ""},
		{"c1--ns-b-TCP-80", "npl-c1", "Other-Cloud"},
		{"c2--ns-a-TCP-80", "npl-c2", ""},
		{"manual", "", ""},
	} {
		obj := map[string]any{"name": p.name}
		if p.createdBy != "" {
			obj["created_by"] = p.createdBy
		}
		if p.cloud != "" {
			obj["cloud_ref"] = "/api/cloud?name=" + p.cloud
		}
		c.mustCreate("pool", obj)
	}

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"c1--ns-a-TCP-80", "c1--ns-a-TCP-81", "c1--ns-b-TCP-80", "c2--ns-a-TCP-80", "manual"}},
		{"name=manual", []string{"manual"}},
		{"name=absent", nil},
		{"name.contains=ns-a", []string{"c1--ns-a-TCP-80", "c1--ns-a-TCP-81", "c2--ns-a-TCP-80"}},
		{"created_by=npl-c1", []string{"c1--ns-a-TCP-80", "c1--ns-a-TCP-81", "c1--ns-b-TCP-80"}},
		{"created_by=npl-c1&cloud_ref.name=Default-Cloud", []string{"c1--ns-a-TCP-80", "c1--ns-a-TCP-81"}},
		{"cloud_ref.name=Other-Cloud", []string{"c1--ns-b-TCP-80"}},
	} {
		status, out := c.do("GET", "/api/pool?"+tc.query, nil)
		if status != http.StatusOK {
			t.Errorf("?%s: %d %v", tc.query, status, out)
			continue
		}
		var got []string
		if out["count"].(float64) > 0 {
			got = names(out["results"])
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("?%s (-want +got):\n%s", tc.query, diff)
		}
	}

	// Paging: count is the total; next is followed until it is absent.
	var got []string
	path := "/api/pool?page_size=2&created_by=npl-c1"
	pages := 0
	for path != "" {
		status, out := c.do("GET", path, nil)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, status, out)
		}
		if out["count"].(float64) != 3 {
			t.Errorf("page %d: count %v, want 3", pages+1, out["count"])
		}
		got = append(got, names(out["results"])...)
		pages++
		path = ""
		if next, ok := out["next"].(string); ok {
			u, err := url.Parse(next)
			if err != nil || u.Host != srv.Host() {
				t.Fatalf("next %q is not a URL of the simulator", next)
			}
			path = u.RequestURI()
		}
	}
	if diff := cmp.Diff([]string{"c1--ns-a-TCP-80", "c1--ns-a-TCP-81", "c1--ns-b-TCP-80"}, got); diff != "" || pages != 2 {
		t.Errorf("paged results over %d pages (-want +got):\n%s", pages, diff)
	}
}

func TestServer_resolvesReferences(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	var hm map[string]any
	for _, o := range srv.Objects("admin", "healthmonitor") {
		if o["name"] == "System-TCP" {
			hm = o
		}
	}
	hmURL := strings.TrimSuffix(hm["url"].(string), "#System-TCP")

	for i, ref := range []string{
		"/api/healthmonitor?name=System-TCP",
		"/api/healthmonitor/?name=System-TCP",
		"api/healthmonitor?name=System-TCP",
		hmURL,
		hmURL + "#System-TCP",
		"/api/healthmonitor/" + hm["uuid"].(string),
	} {
		name := fmt.Sprint("p-", i)
		created := c.mustCreate("pool", map[string]any{"name": name, "health_monitor_refs": []string{ref}})
		want := "https://" + srv.Host() + "/api/healthmonitor/" + hm["uuid"].(string)
		if got := created["health_monitor_refs"].([]any)[0]; got != want {
			t.Errorf("ref %q stored as %v, want %v", ref, got, want)
		}
		status, out := c.do("GET", "/api/pool/"+created["uuid"].(string)+"?include_name=true", nil)
		if status != http.StatusOK {
			t.Fatalf("GET: %d", status)
		}
		if got := out["health_monitor_refs"].([]any)[0]; got != want+"#System-TCP" {
			t.Errorf("ref %q with include_name: got %v, want %v", ref, got, want+"#System-TCP")
		}
		c.do("DELETE", "/api/pool/"+created["uuid"].(string), nil)
	}

	status, out := c.do("POST", "/api/l4policyset", map[string]any{
		"name": "ps",
		"l4_connection_policy": map[string]any{"rules": []any{map[string]any{
			"name": "r", "index": 1,
			"action": map[string]any{"select_pool": map[string]any{"action_type": "L4_RULE_ACTION_SELECT_POOL", "pool_ref": "/api/pool?name=absent"}},
		}}},
	})
	if status != http.StatusBadRequest || out["error"] != "Pool object not found!" {
		t.Errorf("unknown nested ref: got %d %v, want 400 Pool object not found!", status, out)
	}
}

func TestServer_conflictNotFoundAndStaleUpdate(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	created := c.mustCreate("pool", map[string]any{"name": "p", "cloud_config_cksum": "abc", "created_by": "me"})
	for _, f := range []string{"uuid", "url", "_last_modified", "cloud_config_cksum", "created_by", "cloud_ref", "tenant_ref"} {
		if created[f] == nil || created[f] == "" {
			t.Errorf("POST answer lacks %s: %v", f, created)
		}
	}
	if _, ok := created["_last_modified"].(string); !ok {
		t.Errorf("_last_modified is %T, want a string", created["_last_modified"])
	}
	uuid := created["uuid"].(string)

	if status, out := c.do("POST", "/api/pool", map[string]any{"name": "p"}); status != http.StatusConflict {
		t.Errorf("duplicate name: got %d %v, want 409", status, out)
	}
	if status, _ := c.do("GET", "/api/pool/pool-absent", nil); status != http.StatusNotFound {
		t.Errorf("unknown uuid: got %d, want 404", status)
	}

	stale := map[string]any{"name": "p", "_last_modified": "1"}
	if status, _ := c.do("PUT", "/api/pool/"+uuid, stale); status != http.StatusPreconditionFailed {
		t.Errorf("PUT with stale _last_modified: got %d, want 412", status)
	}
	fresh := map[string]any{"name": "p", "_last_modified": created["_last_modified"], "cloud_config_cksum": "def"}
	status, updated := c.do("PUT", "/api/pool/"+uuid, fresh)
	if status != http.StatusOK {
		t.Fatalf("PUT: %d %v", status, updated)
	}
	if updated["cloud_config_cksum"] != "def" || updated["uuid"] != uuid || updated["_last_modified"] == created["_last_modified"] {
		t.Errorf("PUT answer: %v", updated)
	}
	if status, _ := c.do("PUT", "/api/pool/"+uuid, fresh); status != http.StatusPreconditionFailed {
		t.Errorf("second PUT with the old _last_modified: got %d, want 412", status)
	}
	if status, _ := c.do("DELETE", "/api/pool/"+uuid, nil); status != http.StatusNoContent {
		t.Errorf("DELETE: got %d, want 204", status)
	}
	if status, _ := c.do("DELETE", "/api/pool/"+uuid, nil); status != http.StatusNotFound {
		t.Errorf("second DELETE: got %d, want 404", status)
	}
}

func TestServer_refusesToDeleteReferencedObjects(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	pool := c.mustCreate("pool", map[string]any{"name": "p"})
	ps := c.mustCreate("l4policyset", map[string]any{
		"name": "ps",
		"l4_connection_policy": map[string]any{"rules": []any{map[string]any{
			"name": "r", "index": 1,
			"action": map[string]any{"select_pool": map[string]any{"action_type": "L4_RULE_ACTION_SELECT_POOL", "pool_ref": "/api/pool?name=p"}},
		}}},
	})
	vsvip := c.mustCreate("vsvip", map[string]any{"name": "v", "vip": []any{map[string]any{"vip_id": "0", "auto_allocate_ip": true}}})
	c.mustCreate("virtualservice", map[string]any{
		"name": "vs", "vsvip_ref": "/api/vsvip?name=v", "services": []any{map[string]any{"port": 80}},
		"l4_policies": []any{map[string]any{"index": 0, "l4_policy_set_ref": "/api/l4policyset?name=ps"}},
	})

	for _, tc := range []struct{ path, by string }{
		{"/api/pool/" + pool["uuid"].(string), "L4PolicySet ps"},
		{"/api/vsvip/" + vsvip["uuid"].(string), "VirtualService vs"},
		{"/api/l4policyset/" + ps["uuid"].(string), "VirtualService vs"},
	} {
		status, out := c.do("DELETE", tc.path, nil)
		if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), tc.by) {
			t.Errorf("DELETE %s: got %d %v, want 400 naming %s", tc.path, status, out, tc.by)
		}
	}
}

func TestServer_patch(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	server := func(ip string, port int) map[string]any {
		return map[string]any{"ip": map[string]any{"addr": ip, "type": "V4"}, "port": port}
	}
	p := c.mustCreate("pool", map[string]any{"name": "p", "servers": []any{server("198.18.0.1", 61000)}})
	path := "/api/pool/" + p["uuid"].(string)

	steps := []struct {
		op   string
		body map[string]any
		want []string
	}{
		{"add", map[string]any{"servers": []any{server("198.18.0.2", 61000)}}, []string{"198.18.0.1:61000", "198.18.0.2:61000"}},
		{"add", map[string]any{"servers": []any{server("198.18.0.2", 61000)}}, []string{"198.18.0.1:61000", "198.18.0.2:61000"}},
		{"delete", map[string]any{"servers": []any{map[string]any{"ip": map[string]any{"addr": "198.18.0.1"}, "port": 61000}}}, []string{"198.18.0.2:61000"}},
		{"replace", map[string]any{"servers": []any{server("198.18.0.3", 61001)}}, []string{"198.18.0.3:61001"}},
	}
	for i, st := range steps {
		status, out := c.do("PATCH", path, map[string]any{st.op: st.body})
		if status != http.StatusOK {
			t.Fatalf("step %d PATCH %s: %d %v", i, st.op, status, out)
		}
		var got []string
		for _, s := range out["servers"].([]any) {
			m := s.(map[string]any)
			got = append(got, fmt.Sprintf("%v:%v", m["ip"].(map[string]any)["addr"], m["port"]))
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("step %d PATCH %s servers (-want +got):\n%s", i, st.op, diff)
		}
	}
	if status, _ := c.do("PATCH", path, map[string]any{"frobnicate": map[string]any{}}); status != http.StatusBadRequest {
		t.Errorf("unknown PATCH op: got %d, want 400", status)
	}
}

func TestServer_validatesPoolServers(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	for name, servers := range map[string][]any{
		"bad address":  {map[string]any{"ip": map[string]any{"addr": "nope", "type": "V4"}, "port": 1}},
		"type differs": {map[string]any{"ip": map[string]any{"addr": "2001:db8::1", "type": "V4"}, "port": 1}},
		"port range":   {map[string]any{"ip": map[string]any{"addr": "198.18.0.1", "type": "V4"}, "port": 70000}},
		"duplicate": {
			map[string]any{"ip": map[string]any{"addr": "198.18.0.1", "type": "V4"}, "port": 1},
			map[string]any{"ip": map[string]any{"addr": "198.18.0.1", "type": "V4"}, "port": 1},
		},
	} {
		if status, out := c.do("POST", "/api/pool", map[string]any{"name": "p", "servers": servers}); status != http.StatusBadRequest {
			t.Errorf("%s: got %d %v, want 400", name, status, out)
		}
	}
}

func vipOf(t *testing.T, vsvip map[string]any) string {
	t.Helper()
	vips, _ := vsvip["vip"].([]any)
	if len(vips) == 0 {
		t.Fatalf("vsvip without vip: %v", vsvip)
	}
	addr, _ := vips[0].(map[string]any)["ip_address"].(map[string]any)["addr"].(string)
	return addr
}

func TestServer_allocatesVIPs(t *testing.T) {
	srv := startServer(t, Options{VIPSubnet: netip.MustParsePrefix("198.18.200.0/29")})
	c := loggedIn(t, srv)
	auto := func(name string) map[string]any {
		return map[string]any{"name": name, "vip": []any{map[string]any{
			"vip_id": "0", "auto_allocate_ip": true,
			"ipam_network_subnet": map[string]any{"network_ref": "/api/network?name=vip-net"},
		}}}
	}

	a := c.mustCreate("vsvip", auto("a"))
	if got := vipOf(t, a); got != "198.18.200.1" {
		t.Errorf("first auto VIP: got %s, want 198.18.200.1", got)
	}
	explicit := c.mustCreate("vsvip", map[string]any{"name": "e", "vip": []any{map[string]any{
		"vip_id": "0", "ip_address": map[string]any{"addr": "198.18.200.2", "type": "V4"},
	}}})
	if got := vipOf(t, explicit); got != "198.18.200.2" {
		t.Errorf("explicit VIP: got %s, want 198.18.200.2", got)
	}
	b := c.mustCreate("vsvip", auto("b"))
	if got := vipOf(t, b); got != "198.18.200.3" {
		t.Errorf("auto VIP after an explicit one: got %s, want 198.18.200.3", got)
	}
	if status, out := c.do("POST", "/api/vsvip", map[string]any{"name": "dup", "vip": []any{map[string]any{
		"vip_id": "0", "ip_address": map[string]any{"addr": "198.18.200.2", "type": "V4"},
	}}}); status != http.StatusConflict {
		t.Errorf("explicit VIP held by another VsVip: got %d %v, want 409", status, out)
	}

	// An update keeps the allocated address.
	put := auto("a")
	put["_last_modified"] = a["_last_modified"]
	status, out := c.do("PUT", "/api/vsvip/"+a["uuid"].(string), put)
	if status != http.StatusOK || vipOf(t, out) != "198.18.200.1" {
		t.Errorf("PUT of an auto VsVip: got %d %v, want it to keep 198.18.200.1", status, out)
	}

	// .4 .5 .6 remain in a /29; the fourth allocation finds none.
	for _, n := range []string{"c", "d", "f"} {
		c.mustCreate("vsvip", auto(n))
	}
	status, out = c.do("POST", "/api/vsvip", auto("g"))
	if status != http.StatusBadRequest || out["error"] != "No available free IPs" {
		t.Errorf("exhausted network: got %d %v, want 400 No available free IPs", status, out)
	}
	// Deleting a VsVip frees its address.
	c.do("DELETE", "/api/vsvip/"+b["uuid"].(string), nil)
	if g := c.mustCreate("vsvip", auto("g")); vipOf(t, g) != "198.18.200.3" {
		t.Errorf("after freeing .3: got %s", vipOf(t, g))
	}
}

func TestServer_faults(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)

	t.Run("next N matching calls", func(t *testing.T) {
		id := srv.AddFault(Fault{Method: "POST", Path: "/api/pool*", Status: 503, Count: 2})
		defer srv.RemoveFault(id)
		if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusOK {
			t.Errorf("GET does not match a POST fault: got %d", status)
		}
		for i := 0; i < 2; i++ {
			if status, out := c.do("POST", "/api/pool", map[string]any{"name": "p"}); status != 503 || out["error"] != "Service Unavailable" {
				t.Errorf("faulted POST %d: got %d %v, want 503", i, status, out)
			}
		}
		if status, out := c.do("POST", "/api/pool", map[string]any{"name": "p"}); status != http.StatusCreated {
			t.Errorf("POST after the fault is used up: got %d %v", status, out)
		}
	})

	t.Run("time window", func(t *testing.T) {
		srv.AddFault(Fault{Path: "/api/vsvip", Status: 500, Message: "boom", For: time.Hour})
		for i := 0; i < 3; i++ {
			if status, out := c.do("GET", "/api/vsvip", nil); status != 500 || out["error"] != "boom" {
				t.Errorf("GET %d in window: got %d %v", i, status, out)
			}
		}
		srv.ClearFaults()
		if status, _ := c.do("GET", "/api/vsvip", nil); status != http.StatusOK {
			t.Errorf("after ClearFaults: got %d", status)
		}
		srv.AddFault(Fault{Path: "/api/vsvip", Status: 500, For: time.Nanosecond})
		time.Sleep(time.Millisecond)
		if status, _ := c.do("GET", "/api/vsvip", nil); status != http.StatusOK {
			t.Errorf("after the window: got %d", status)
		}
	})

	t.Run("latency over the client timeout", func(t *testing.T) {
		id := srv.AddFault(Fault{Path: "/api/cloud", Latency: time.Minute})
		defer srv.RemoveFault(id)
		quick := *c.hc
		quick.Timeout = 50 * time.Millisecond
		req, _ := http.NewRequest("GET", srv.URL()+"/api/cloud", nil)
		if resp, err := quick.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("a request delayed past the client timeout succeeded: %d", resp.StatusCode)
		}
	})
}

func TestServer_countsCallsAndLogsRequests(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	srv.ResetCounters()

	p := c.mustCreate("pool", map[string]any{"name": "p"})
	c.do("GET", "/api/pool/"+p["uuid"].(string), nil)
	c.do("PUT", "/api/pool/"+p["uuid"].(string), map[string]any{"name": "p"})
	c.do("POST", "/api/pool", map[string]any{"name": "p"}) // 409 still counts
	c.do("DELETE", "/api/pool/"+p["uuid"].(string), nil)
	c.do("GET", "//api/initial-data", nil)

	want := map[string]int{"POST pool": 2, "GET pool": 1, "PUT pool": 1, "DELETE pool": 1, "GET initial-data": 1}
	if diff := cmp.Diff(want, srv.Calls()); diff != "" {
		t.Errorf("Calls (-want +got):\n%s", diff)
	}
	if got := srv.Writes(); got != 4 {
		t.Errorf("Writes: got %d, want 4", got)
	}
	var statuses []int
	for _, r := range srv.Requests() {
		statuses = append(statuses, r.Status)
	}
	if diff := cmp.Diff([]int{201, 200, 200, 409, 204, 200}, statuses); diff != "" {
		t.Errorf("request log statuses (-want +got):\n%s", diff)
	}
	srv.ResetCounters()
	if len(srv.Calls()) != 0 || srv.Writes() != 0 || len(srv.Requests()) != 0 {
		t.Errorf("after ResetCounters: calls %v writes %d log %d", srv.Calls(), srv.Writes(), len(srv.Requests()))
	}
}

func TestServer_expireSessions(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	srv.ExpireSessions()
	if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusUnauthorized {
		t.Errorf("after ExpireSessions: got %d, want 401", status)
	}
	srv.SetCredentials("admin", "rotated")
	if status, _ := c.do("POST", "/login", map[string]string{"username": "admin", "password": "admin"}); status != http.StatusUnauthorized {
		t.Errorf("login with the old password: got %d, want 401", status)
	}
	if status, _ := c.do("POST", "/login", map[string]string{"username": "admin", "password": "rotated"}); status != http.StatusOK {
		t.Errorf("login with the new password: got %d", status)
	}
	if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusOK {
		t.Errorf("after logging in again: got %d", status)
	}
}

func TestServer_tenants(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.tenant = "team-a"
	if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusBadRequest {
		t.Errorf("unknown tenant: got %d, want 400", status)
	}
	c.tenant = ""
	c.mustCreate("tenant", map[string]any{"name": "team-a"})
	c.tenant = "team-a"
	// Shared objects of admin resolve from another tenant.
	c.mustCreate("pool", map[string]any{"name": "p", "health_monitor_refs": []string{"/api/healthmonitor?name=System-TCP"}})
	if got := len(srv.Objects("team-a", "pool")); got != 1 {
		t.Errorf("pools in team-a: got %d, want 1", got)
	}
	c.tenant = ""
	if _, out := c.do("GET", "/api/pool", nil); out["count"].(float64) != 0 {
		t.Errorf("a team-a pool is visible in admin: %v", out)
	}
	// The same name may exist once per tenant.
	c.mustCreate("pool", map[string]any{"name": "p"})
}

func TestServer_hooksOverHTTP(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)

	status, out := c.do("POST", "/sim/faults", map[string]any{"method": "GET", "path": "/api/pool", "status": 502, "count": 1})
	if status != http.StatusOK || out["id"] == nil {
		t.Fatalf("add fault: %d %v", status, out)
	}
	if status, _ := c.do("GET", "/api/pool", nil); status != 502 {
		t.Errorf("faulted GET: got %d, want 502", status)
	}
	if status, _ := c.do("POST", "/sim/faults", map[string]any{"latency": "soon"}); status != http.StatusBadRequest {
		t.Errorf("bad latency: got %d, want 400", status)
	}

	status, out = c.do("GET", "/sim/calls", nil)
	if status != http.StatusOK || out["calls"].(map[string]any)["GET pool"] != 1.0 {
		t.Errorf("calls: %d %v", status, out)
	}
	if status, out := c.do("GET", "/sim/dump", nil); status != http.StatusOK || out["admin"] == nil {
		t.Errorf("dump: %d %v", status, out)
	}
	if status, out := c.do("GET", "/sim/requests", nil); status != http.StatusOK || len(out["requests"].([]any)) == 0 {
		t.Errorf("requests: %d %v", status, out)
	}
	c.do("POST", "/sim/credentials", map[string]string{"username": "admin", "password": "new"})
	c.do("POST", "/sim/expire-sessions", nil)
	if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusUnauthorized {
		t.Errorf("after expire-sessions: got %d, want 401", status)
	}
	if status, _ := c.do("POST", "/login", map[string]string{"username": "admin", "password": "new"}); status != http.StatusOK {
		t.Errorf("login with the credentials set over HTTP: got %d", status)
	}
	if status, _ := c.do("POST", "/sim/reset", nil); status != http.StatusOK || srv.Writes() != 0 || len(srv.Calls()) != 0 {
		t.Errorf("reset: %d, calls %v", status, srv.Calls())
	}
}
