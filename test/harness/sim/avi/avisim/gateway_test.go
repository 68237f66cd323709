package avisim

import (
	"net/http"
	"strings"
	"testing"
)

func TestServer_poolGroup(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.mustCreate("pool", map[string]any{"name": "v1"})
	c.mustCreate("pool", map[string]any{"name": "v2"})
	member := func(pool string, ratio int) map[string]any {
		return map[string]any{"pool_ref": "/api/pool?name=" + pool, "ratio": ratio}
	}
	pg := c.mustCreate("poolgroup", map[string]any{"name": "pg", "members": []any{member("v1", 7), member("v2", 0)}})
	status, out := c.do("DELETE", "/api/pool/"+srv.Objects("admin", "pool")[0]["uuid"].(string), nil)
	if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), "PoolGroup pg") {
		t.Errorf("delete a pool a pool group uses: %d %v", status, out)
	}
	c.do("DELETE", "/api/poolgroup/"+pg["uuid"].(string), nil)

	for _, tt := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"a ratio above 1000", map[string]any{"name": "pg", "members": []any{member("v1", 1001)}}, "members[0].ratio: 1001 is not allowed: allowed values are 1-1000, 0"},
		{"a pool twice", map[string]any{"name": "pg", "members": []any{member("v1", 1), member("v1", 2)}}, "a member twice"},
		{"a member without a pool", map[string]any{"name": "pg", "members": []any{map[string]any{"ratio": 1}}}, "pool_ref"},
		{"an unknown pool", map[string]any{"name": "pg", "members": []any{member("absent", 1)}}, "Pool object not found!"},
		{"a field the API does not have", map[string]any{"name": "pg", "weights": []any{1}}, "weights: unknown field of PoolGroup"},
	} {
		status, out := c.do("POST", "/api/poolgroup", tt.obj)
		if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), tt.want) {
			t.Errorf("%s: %d %v, want 400 containing %q", tt.name, status, out, tt.want)
		}
	}
}

func TestServer_httpPolicySetGatewayParts(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.mustCreate("pool", map[string]any{"name": "web"})
	toPool := map[string]any{"action": "HTTP_SWITCHING_SELECT_POOL", "pool_ref": "/api/pool?name=web"}
	path := map[string]any{"match_criteria": "BEGINS_WITH", "match_str": []string{"/"}}
	param := func(v string) map[string]any {
		return map[string]any{"type": "URI_PARAM_TYPE_TOKENIZED", "tokens": []any{map[string]any{"type": "URI_TOKEN_TYPE_STRING", "str_value": v}}}
	}
	policy := func(rule map[string]any) map[string]any {
		r := map[string]any{"name": "r1", "index": 1, "enable": true, "match": map[string]any{"path": path}}
		for k, v := range rule {
			if k == "match" {
				for mk, mv := range v.(map[string]any) {
					r["match"].(map[string]any)[mk] = mv
				}
				continue
			}
			r[k] = v
		}
		return map[string]any{"name": "ps", "http_request_policy": map[string]any{"rules": []any{r}}}
	}
	good := policy(map[string]any{
		"match": map[string]any{
			"vs_port": map[string]any{"match_criteria": "IS_IN", "ports": []int{80, 443}},
			"method":  map[string]any{"match_criteria": "IS_IN", "methods": []string{"HTTP_METHOD_GET"}},
			"hdrs": []any{map[string]any{"hdr": "x-env", "match_criteria": "HDR_EQUALS", "match_case": "SENSITIVE",
				"value": []string{"canary"}}},
		},
		"switching_action": toPool,
		"hdr_action": []any{map[string]any{"action": "HTTP_REPLACE_HDR", "hdr": map[string]any{"name": "x", "value": map[string]any{"val": "1"}}},
			map[string]any{"action": "HTTP_REMOVE_HDR", "hdr": map[string]any{"name": "y"}}},
		"rewrite_url_action": map[string]any{"host_hdr": param("b.internal"), "path": param("x"), "query": map[string]any{"keep_query": true}},
	})
	ps := c.mustCreate("httppolicyset", good)
	c.do("DELETE", "/api/httppolicyset/"+ps["uuid"].(string), nil)
	redirect := map[string]any{"protocol": "HTTPS", "port": 443, "status_code": "HTTP_REDIRECT_STATUS_CODE_301", "keep_query": true}
	ps = c.mustCreate("httppolicyset", policy(map[string]any{"redirect_action": redirect}))
	c.do("DELETE", "/api/httppolicyset/"+ps["uuid"].(string), nil)

	for _, tt := range []struct {
		name string
		rule map[string]any
		want string
	}{
		{"a port out of range", map[string]any{"match": map[string]any{"vs_port": map[string]any{"match_criteria": "IS_IN",
			"ports": []int{0}}}, "switching_action": toPool}, "vs_port.ports[0]: 0 is not allowed"},
		{"an unknown method", map[string]any{"match": map[string]any{"method": map[string]any{"match_criteria": "IS_IN",
			"methods": []string{"HTTP_METHOD_QUERY"}}}, "switching_action": toPool}, `methods[0]: "HTTP_METHOD_QUERY" is not one of`},
		{"a header test without a value", map[string]any{"match": map[string]any{"hdrs": []any{map[string]any{"hdr": "x",
			"match_criteria": "HDR_EQUALS"}}}, "switching_action": toPool}, "needs a value"},
		{"a query test Avi lacks", map[string]any{"match": map[string]any{"query": map[string]any{
			"match_criteria": "QUERY_MATCH_EQUALS", "match_str": []string{"a=b"}}}, "switching_action": toPool}, "query.match_criteria"},
		{"a local answer of 500", map[string]any{"switching_action": map[string]any{"action": "HTTP_SWITCHING_SELECT_LOCAL",
			"status_code": "HTTP_LOCAL_RESPONSE_STATUS_CODE_500"}}, "status_code"},
		{"a header action without a value", map[string]any{"switching_action": toPool, "hdr_action": []any{
			map[string]any{"action": "HTTP_ADD_HDR", "hdr": map[string]any{"name": "x"}}}}, "needs hdr.value"},
		{"a redirect with a 308", map[string]any{"redirect_action": map[string]any{"protocol": "HTTP",
			"status_code": "HTTP_REDIRECT_STATUS_CODE_308"}}, "redirect_action.status_code"},
		{"a redirect and a switch", map[string]any{"redirect_action": redirect, "switching_action": toPool}, "cannot be combined"},
		{"a path token without its string", map[string]any{"switching_action": toPool, "rewrite_url_action": map[string]any{
			"path": map[string]any{"type": "URI_PARAM_TYPE_TOKENIZED", "tokens": []any{map[string]any{"type": "URI_TOKEN_TYPE_STRING"}}}}},
			"needs str_value"},
		{"a field the API does not have", map[string]any{"switching_action": toPool, "weight": 3}, "weight: unknown field of HTTPRequestRule"},
	} {
		status, out := c.do("POST", "/api/httppolicyset", policy(tt.rule))
		if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), tt.want) {
			t.Errorf("%s: %d %v, want 400 containing %q", tt.name, status, out, tt.want)
		}
	}
}

// A Gateway's TCP and UDP listeners are an L4 virtual service on the VsVip
// of its HTTP one: two virtual services share a VsVip on different ports
// only, and an L4 rule selects a pool or a pool group it names.
func TestServer_l4BesideL7OnOneVsVip(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.mustCreate("vsvip", map[string]any{"name": "vip", "vip": []any{map[string]any{"vip_id": "0", "auto_allocate_ip": true}}})
	c.mustCreate("pool", map[string]any{"name": "p"})
	c.mustCreate("poolgroup", map[string]any{"name": "pg", "members": []any{map[string]any{"pool_ref": "/api/pool?name=p"}}})
	vs := func(name string, ports ...int) map[string]any {
		var services []any
		for _, p := range ports {
			services = append(services, map[string]any{"port": p})
		}
		return map[string]any{"name": name, "vsvip_ref": "/api/vsvip?name=vip", "services": services}
	}
	c.mustCreate("virtualservice", vs("http", 80, 443))
	c.mustCreate("virtualservice", vs("l4", 5432, 53))
	if status, out := c.do("POST", "/api/virtualservice", vs("clash", 8080, 443)); status != http.StatusBadRequest ||
		!strings.Contains(str(out["error"]), "Port 443 is already used by VirtualService http") {
		t.Errorf("a port twice on one VsVip: %d %v", status, out)
	}
	rule := func(sel map[string]any) map[string]any {
		return map[string]any{"name": "ps", "l4_connection_policy": map[string]any{"rules": []any{map[string]any{
			"name": "r", "index": 1, "action": map[string]any{"select_pool": sel}}}}}
	}
	ps := c.mustCreate("l4policyset", rule(map[string]any{"action_type": "L4_RULE_ACTION_SELECT_POOLGROUP", "pool_group_ref": "/api/poolgroup?name=pg"}))
	c.do("DELETE", "/api/l4policyset/"+ps["uuid"].(string), nil)
	for _, tt := range []struct {
		name string
		sel  map[string]any
		want string
	}{
		{"a pool group action without its group", map[string]any{"action_type": "L4_RULE_ACTION_SELECT_POOLGROUP"}, "needs a pool_group_ref"},
		{"no action type", map[string]any{"pool_ref": "/api/pool?name=p"}, "action_type"},
	} {
		status, out := c.do("POST", "/api/l4policyset", rule(tt.sel))
		if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), tt.want) {
			t.Errorf("%s: %d %v, want 400 containing %q", tt.name, status, out, tt.want)
		}
	}
}

// One port number may serve TCP on one virtual service and UDP on another
// of the same VsVip.
func TestServer_sharedVsVipPortsAreTCPOrUDP(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.mustCreate("vsvip", map[string]any{"name": "vip", "vip": []any{map[string]any{"vip_id": "0", "auto_allocate_ip": true}}})
	c.mustCreate("virtualservice", map[string]any{"name": "tcp", "vsvip_ref": "/api/vsvip?name=vip",
		"services": []any{map[string]any{"port": 53}}})
	c.mustCreate("virtualservice", map[string]any{"name": "udp", "vsvip_ref": "/api/vsvip?name=vip",
		"network_profile_ref": "/api/networkprofile?name=System-UDP-Fast-Path", "services": []any{map[string]any{"port": 53}}})
	status, out := c.do("POST", "/api/virtualservice", map[string]any{"name": "udp2", "vsvip_ref": "/api/vsvip?name=vip",
		"services": []any{map[string]any{"port": 53, "override_network_profile_ref": "/api/networkprofile?name=System-UDP-Fast-Path"}}})
	if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), "Port 53 is already used by VirtualService udp") {
		t.Errorf("UDP port 53 twice: %d %v", status, out)
	}
}
