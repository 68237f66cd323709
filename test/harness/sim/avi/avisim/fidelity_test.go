package avisim

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// What a real controller accepts and refuses where the schema, not the
// simulator's wishes, decides (REFERENCE §18: the simulator used to refuse
// server and service port 0 and virtual services without services or a
// VsVip).
func TestServer_followsTheSchema(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.mustCreate("pool", map[string]any{"name": "backend-port", "default_server_port": 8080,
		"servers": []any{map[string]any{"ip": map[string]any{"addr": "198.18.0.1", "type": "V4"}, "port": 0}}})
	c.mustCreate("vsvip", map[string]any{"name": "vip", "vip": []any{map[string]any{"vip_id": "0", "auto_allocate_ip": true}}})
	parent := c.mustCreate("virtualservice", map[string]any{"name": "parent", "vsvip_ref": "/api/vsvip?name=vip",
		"type": "VS_TYPE_VH_PARENT", "services": []any{map[string]any{"port": 0}}})
	c.mustCreate("virtualservice", map[string]any{"name": "sni-child", "type": "VS_TYPE_VH_CHILD",
		"vh_parent_vs_uuid": parent["uuid"]})

	for _, tc := range []struct {
		name, typ string
		obj       map[string]any
		want      string
	}{
		{"a server port out of range", "pool", map[string]any{"name": "p", "servers": []any{
			map[string]any{"ip": map[string]any{"addr": "198.18.0.1", "type": "V4"}, "port": 65536}}}, "servers[0].port: 65536 is not allowed"},
		{"an enum value the schema lacks", "pool", map[string]any{"name": "p", "lb_algorithm": "LB_ALGORITHM_WEIGHTED"}, "lb_algorithm"},
		{"a graceful timeout below -1", "pool", map[string]any{"name": "p", "graceful_disable_timeout": -2}, "graceful_disable_timeout"},
		{"a reference to the wrong type", "pool", map[string]any{"name": "p", "health_monitor_refs": []any{"/api/applicationprofile?name=System-HTTP"}},
			"health_monitor_refs[0] refers to a ApplicationProfile, not a HealthMonitor"},
		{"a normal virtual service without a VsVip", "virtualservice", map[string]any{"name": "vs", "services": []any{map[string]any{"port": 80}}},
			"needs a VsVip"},
		{"a child without its parent", "virtualservice", map[string]any{"name": "vs", "type": "VS_TYPE_VH_CHILD"}, "vh_parent_vs_uuid"},
	} {
		before := srv.SchemaViolations()
		status, out := c.do("POST", "/api/"+tc.typ, tc.obj)
		if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), tc.want) {
			t.Errorf("%s: %d %v, want 400 containing %q", tc.name, status, out, tc.want)
		}
		if tc.typ == "pool" && srv.SchemaViolations() == before {
			t.Errorf("%s: not counted as a schema violation", tc.name)
		}
	}
}

func TestServer_versionHeader(t *testing.T) {
	srv := startServer(t, Options{Version: "22.1.3"})
	c := loggedIn(t, srv)
	markers := []any{map[string]any{"key": "clustername", "values": []any{"c1"}}}
	for _, tc := range []struct {
		version string
		status  int
		want    string
	}{
		{"", http.StatusBadRequest, "X-Avi-Version header is required"},
		{"30.2.1", http.StatusBadRequest, "newer than the controller's version 22.1.3"},
		{"20.1.4", http.StatusBadRequest, "markers: field introduced in 20.1.5"},
		{"20.1.5", http.StatusCreated, ""},
		{"22.1.3", http.StatusCreated, ""},
	} {
		c.version = tc.version
		if tc.version == "" {
			c.version = "-"
		}
		status, out := c.do("POST", "/api/pool", map[string]any{"name": "p-" + tc.version, "markers": markers})
		if status != tc.status || !strings.Contains(str(out["error"]), tc.want) {
			t.Errorf("X-Avi-Version %q: %d %v, want %d %q", tc.version, status, out, tc.status, tc.want)
		}
	}
}

// What a controller returns is not what it was sent: uuids of its own
// form, full-URL references, the admin tenant's uuid "admin", and its
// defaults, as AKO's recorded objects show (tests/avimockobjects/ and
// tests/bootuptests/bootupmock/ in
// vmware/load-balancer-and-ingress-services-for-kubernetes).
func TestServer_answersAsAController(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	pool := c.mustCreate("pool", map[string]any{"name": "p",
		"servers": []any{map[string]any{"ip": map[string]any{"addr": "198.18.0.1", "type": "V4"}, "port": 61000}}})
	if !regexp.MustCompile(`^pool-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(str(pool["uuid"])) {
		t.Errorf("uuid %v, want pool-<uuid4>", pool["uuid"])
	}
	if want := "https://" + srv.Host() + "/api/tenant/admin"; pool["tenant_ref"] != want {
		t.Errorf("tenant_ref %v, want %s", pool["tenant_ref"], want)
	}
	for k, want := range map[string]any{"lb_algorithm": "LB_ALGORITHM_LEAST_CONNECTIONS", "default_server_port": float64(80),
		"graceful_disable_timeout": float64(1), "enabled": true} {
		if pool[k] != want {
			t.Errorf("pool %s = %v, want the default %v", k, pool[k], want)
		}
	}
	if !strings.HasPrefix(str(pool["vrf_ref"]), "https://"+srv.Host()+"/api/vrfcontext/vrfcontext-") {
		t.Errorf("vrf_ref %v, want the global VRF's URL", pool["vrf_ref"])
	}
	srvObj := pool["servers"].([]any)[0].(map[string]any)
	if srvObj["enabled"] != true || srvObj["ratio"] != float64(1) {
		t.Errorf("server %v, want enabled and ratio 1 filled in", srvObj)
	}

	c.mustCreate("vsvip", map[string]any{"name": "vip", "vip": []any{map[string]any{"vip_id": "0", "auto_allocate_ip": true,
		"ipam_network_subnet": map[string]any{"network_ref": "/api/network?name=vip-net"}}}})
	vs := c.mustCreate("virtualservice", map[string]any{"name": "vs", "vsvip_ref": "/api/vsvip?name=vip",
		"services": []any{map[string]any{"port": 80}}})
	if svc := vs["services"].([]any)[0].(map[string]any); svc["port_range_end"] != float64(80) {
		t.Errorf("service %v, want port_range_end 80", svc)
	}
	for _, f := range []string{"se_group_ref", "application_profile_ref", "network_profile_ref", "vrf_context_ref", "analytics_profile_ref"} {
		if str(vs[f]) == "" {
			t.Errorf("virtual service without %s", f)
		}
	}
	_, got := c.do("GET", "/api/vsvip?name=vip", nil)
	vip := got["results"].([]any)[0].(map[string]any)["vip"].([]any)[0].(map[string]any)
	if ipam := vip["ipam_network_subnet"].(map[string]any); ipam["subnet"] == nil || vip["enabled"] != true {
		t.Errorf("vip %v, want the subnet and enabled filled in", vip)
	}
}

func TestServer_upgrade(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	srv.SetUpgrading(true)
	if status, out := c.do("POST", "/api/pool", map[string]any{"name": "p"}); status != http.StatusForbidden ||
		out["error"] != "Configuration is disallowed during upgrade" {
		t.Errorf("POST during an upgrade: %d %v", status, out)
	}
	if status, _ := c.do("GET", "/api/pool", nil); status != http.StatusOK {
		t.Errorf("GET during an upgrade: %d", status)
	}
	srv.SetUpgrading(false)
	c.mustCreate("pool", map[string]any{"name": "p"})
}

// A controller refuses to change an existing vip: its vip_id, or its
// address (AKO's lib.AviControllerVSVipIDChangeError and
// AviControllerRecreateVIPError).
func TestServer_refusesVIPChanges(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	vip := func(id, addr string) map[string]any {
		return map[string]any{"name": "v", "vip": []any{map[string]any{"vip_id": id, "auto_allocate_ip": false,
			"ip_address": map[string]any{"addr": addr, "type": "V4"}}}}
	}
	created := c.mustCreate("vsvip", vip("0", "198.18.200.10"))
	path := "/api/vsvip/" + str(created["uuid"])
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"another vip_id", vip("1", "198.18.200.10"), "Changing an existing VIP's vip_id is not supported"},
		{"another address", vip("0", "198.18.200.11"), "If a new preferred IP is needed, please recreate the VIP"},
	} {
		if status, out := c.do("PUT", path, tc.obj); status != http.StatusBadRequest || !strings.Contains(str(out["error"]), tc.want) {
			t.Errorf("%s: %d %v, want 400 containing %q", tc.name, status, out, tc.want)
		}
	}
	if status, out := c.do("PUT", path, vip("0", "198.18.200.10")); status != http.StatusOK {
		t.Errorf("the same vip again: %d %v", status, out)
	}
}
