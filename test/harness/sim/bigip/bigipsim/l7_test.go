package bigipsim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/f5devcentral/go-bigip"
	"github.com/google/go-cmp/cmp"
)

// keyPair returns a self-signed PEM certificate for host and its PEM key.
func keyPair(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func goBigIP(s *Server) *bigip.BigIP {
	return bigip.NewSession(&bigip.Config{Address: s.URL(), Username: "admin", Password: "admin",
		ConfigOptions: &bigip.ConfigOptions{APICallTimeout: 10 * time.Second, APICallRetries: 1}})
}

// upload sends a file as go-bigip's UploadBytes does and returns its
// sourcePath.
func upload(t *testing.T, b *bigip.BigIP, name string, data []byte) string {
	t.Helper()
	if _, err := b.UploadBytes(data, name); err != nil {
		t.Fatalf("UploadBytes %s: %v", name, err)
	}
	return "file:///var/config/rest/downloads/" + name
}

func wantMessage(t *testing.T, r result, status int, text string) {
	t.Helper()
	msg, _ := r.body["message"].(string)
	if r.status != status || !strings.Contains(msg, text) {
		t.Errorf("got %d %q, want %d containing %q", r.status, msg, status, text)
	}
}

func TestServer_certificatesAndClientSSLProfiles(t *testing.T) {
	s := start(t, Options{})
	b := goBigIP(s)
	createPartition(t, s, "p1")
	cert, key := keyPair(t, "a.example.com")
	_, otherKey := keyPair(t, "b.example.com")

	r := call(t, s, "POST", "/mgmt/tm/sys/file/ssl-cert", map[string]any{"name": "a", "partition": "p1", "sourcePath": upload(t, b, "a.crt", cert)})
	mustStatus(t, r, 200)
	if sum, _ := r.body["checksum"].(string); !strings.HasPrefix(sum, "SHA1:") {
		t.Errorf("checksum %q", sum)
	}
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/sys/file/ssl-key", map[string]any{"name": "a", "partition": "p1", "sourcePath": upload(t, b, "a.key", key)}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/sys/file/ssl-key", map[string]any{"name": "other", "partition": "p1", "sourcePath": upload(t, b, "o.key", otherKey)}), 200)
	if _, shown := r.body["content"]; shown {
		t.Error("a certificate shows its content")
	}

	wantMessage(t, call(t, s, "POST", "/mgmt/tm/sys/file/ssl-cert", map[string]any{"name": "bad", "partition": "p1",
		"sourcePath": upload(t, b, "bad.crt", []byte("junk"))}), 400, "not a PEM certificate")
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/sys/file/ssl-cert", map[string]any{"name": "gone", "partition": "p1",
		"sourcePath": "file:///var/config/rest/downloads/never.crt"}), 400, "not found")

	profile := func(name, keyName string, sniDefault bool) map[string]any {
		return map[string]any{"name": name, "partition": "p1", "defaultsFrom": "/Common/clientssl", "sniDefault": sniDefault,
			"certKeyChain": []any{map[string]any{"name": "default", "cert": "/p1/a", "key": "/p1/" + keyName}}}
	}
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/profile/client-ssl", profile("mismatch", "other", true)), 400, "do not match")
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/profile/client-ssl", profile("nokey", "absent", true)), 400, "The requested Key (/p1/absent) was not found.")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/profile/client-ssl", profile("sa", "a", true)), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/profile/client-ssl", profile("sb", "a", false)), 200)

	wantMessage(t, call(t, s, "DELETE", "/mgmt/tm/sys/file/ssl-cert/~p1~a", nil), 400, "in use by client-ssl profile")
	// Replacing the key of a profile's pair with one that does not match
	// is refused.
	wantMessage(t, call(t, s, "PATCH", "/mgmt/tm/sys/file/ssl-key/~p1~a", map[string]any{"sourcePath": upload(t, b, "o2.key", otherKey)}), 400, "do not match")

	virtual := func(name, dest string, profiles ...string) map[string]any {
		return map[string]any{"name": name, "partition": "p1", "destination": "/p1/" + dest, "ipProtocol": "tcp", "profiles": profiles}
	}
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", virtual("no-tcp", "198.18.1.1:443", "/Common/http", "/p1/sa")), 400, "needs a tcp profile")
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", virtual("no-default", "198.18.1.2:443", "/Common/tcp", "/p1/sb",
		"/Common/clientssl")), 400, "exactly one must be the SNI default")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", virtual("sni", "198.18.1.3:443", "/Common/tcp", "/p1/sa", "/p1/sb")), 200)
	mustStatus(t, call(t, s, "PATCH", "/mgmt/tm/ltm/profile/client-ssl/~p1~sa", map[string]any{"sniDefault": "false"}), 400)
	wantMessage(t, call(t, s, "DELETE", "/mgmt/tm/ltm/profile/client-ssl/~p1~sb", nil), 400, "in use by virtual server")

	got := s.Dump().ClientSSLProfiles
	want := []ClientSSLProfile{{FullPath: "/p1/sa", Cert: "/p1/a", Key: "/p1/a", SNIDefault: true}, {FullPath: "/p1/sb", Cert: "/p1/a", Key: "/p1/a"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
}

func TestServer_policiesAreDraftedAndPublished(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web", "partition": "p1"}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "api", "partition": "p1"}), 200)
	rule := func(name, path, pool string) map[string]any {
		return map[string]any{"name": name, "conditions": []any{
			map[string]any{"name": "0", "httpHost": true, "host": true, "equals": true, "values": []string{"a.example.com"}},
			map[string]any{"name": "1", "httpUri": true, "path": true, "startsWith": true, "values": []string{path}},
		}, "actions": []any{map[string]any{"name": "0", "forward": true, "pool": pool}}}
	}
	policy := func(rules ...any) map[string]any {
		return map[string]any{"name": "lb", "partition": "p1", "subPath": "Drafts", "strategy": "first-match",
			"requires": []string{"http"}, "controls": []string{"forwarding"}, "rules": rules}
	}

	published := policy(rule("r0", "/", "/p1/web"))
	delete(published, "subPath")
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", published), 400,
		"01071abb:3: Cannot create/modify published policy '/p1/lb' directly, try specifying a draft folder like '/p1/Drafts/lb'.")
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", policy(rule("r0", "/", "/p1/nope"))), 400, "The requested Pool (/p1/nope) was not found.")
	noHTTP := policy(rule("r0", "/", "/p1/web"))
	noHTTP["requires"] = []string{}
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", noHTTP), 400, "does not require http")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", policy(rule("r0", "/", "/p1/web"))), 200)

	vs := map[string]any{"name": "vs", "partition": "p1", "destination": "/p1/198.18.1.1:80", "ipProtocol": "tcp",
		"profiles": []string{"/Common/tcp", "/Common/http"}, "policies": []any{map[string]any{"name": "lb", "partition": "p1"}}}
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", vs), 400, "The requested Policy (/p1/lb) was not found.")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", map[string]any{"command": "publish", "name": "/p1/Drafts/lb"}), 200)
	noHTTPProfile := map[string]any{"name": "vs2", "partition": "p1", "destination": "/p1/198.18.1.2:80", "ipProtocol": "tcp",
		"profiles": []string{"/Common/tcp"}, "policies": []any{map[string]any{"name": "lb", "partition": "p1"}}}
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", noHTTPProfile), 400, "requires an http profile")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/virtual", vs), 200)

	wantMessage(t, call(t, s, "PUT", "/mgmt/tm/ltm/policy/~p1~lb", policy(rule("r0", "/x", "/p1/web"))), 400,
		"Cannot create/modify published policy '/p1/lb' directly")
	// A draft of a published policy is made from it (create-draft), not
	// created.
	wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", policy(rule("r0", "/x", "/p1/web"))), 400,
		`01070734:3: Configuration error: Published policy "/p1/lb" exists, use create-draft to create a draft copy .`)
	wantMessage(t, call(t, s, "DELETE", "/mgmt/tm/ltm/pool/~p1~web", nil), 400, "in use by a policy")
	wantMessage(t, call(t, s, "DELETE", "/mgmt/tm/ltm/policy/~p1~lb", nil), 400, "in use by virtual server")

	mustStatus(t, call(t, s, "PATCH", "/mgmt/tm/ltm/policy/~p1~lb?options=create-draft", map[string]any{}), 200)
	mustStatus(t, call(t, s, "PATCH", "/mgmt/tm/ltm/policy/~p1~lb?options=create-draft", map[string]any{}), 409)
	mustStatus(t, call(t, s, "PUT", "/mgmt/tm/ltm/policy/~p1~Drafts~lb", map[string]any{"rules": []any{rule("r0", "/api", "/p1/api")}}), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", map[string]any{"command": "publish", "name": "/p1/Drafts/lb"}), 200)

	want := []Policy{{FullPath: "/p1/lb", Status: "published",
		Rules: []string{"r0: httpHost host equals [a.example.com]; httpUri path startsWith [/api] -> forward /p1/api"}}}
	if diff := cmp.Diff(want, s.Dump().Policies); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	// The published rules read back expanded, as go-bigip's types decode them.
	r := call(t, s, "GET", "/mgmt/tm/ltm/policy/~p1~lb?expandSubcollections=true", nil)
	items := r.body["rulesReference"].(map[string]any)["items"].([]any)
	conds := items[0].(map[string]any)["conditionsReference"].(map[string]any)["items"].([]any)
	if len(items) != 1 || len(conds) != 2 {
		t.Errorf("expanded policy: %v", r.body)
	}
	mustStatus(t, call(t, s, "DELETE", "/mgmt/tm/ltm/pool/~p1~web", nil), 200)
}

func TestServer_policyConditionsActionsAndRatiosAreStrict(t *testing.T) {
	s := start(t, Options{})
	createPartition(t, s, "p1")
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "web", "partition": "p1"}), 200)
	policy := func(name string, conds, actions []any) map[string]any {
		return map[string]any{"name": name, "partition": "p1", "subPath": "Drafts", "strategy": "first-match",
			"requires": []string{"http"}, "controls": []string{"forwarding"},
			"rules": []any{map[string]any{"name": "r0", "conditions": conds, "actions": actions}}}
	}
	path := map[string]any{"httpUri": true, "path": true, "equals": true, "values": []string{"/"}}
	forward := map[string]any{"forward": true, "pool": "/p1/web"}
	for _, c := range []struct {
		conds, actions []any
		text           string
	}{
		{[]any{map[string]any{"httpHeader": true, "equals": true, "values": []string{"v"}}}, []any{forward}, "needs a name (tmName)"},
		{[]any{map[string]any{"httpMethod": true, "tmName": "x", "equals": true, "values": []string{"GET"}}}, []any{forward}, "takes no name"},
		{[]any{map[string]any{"httpMethod": true, "path": true, "equals": true, "values": []string{"GET"}}}, []any{forward}, "takes no selector"},
		{[]any{map[string]any{"httpUri": true, "queryParameter": true, "equals": true, "values": []string{"1"}}}, []any{forward}, "needs a name (tmName)"},
		{[]any{path}, []any{map[string]any{"httpReply": true, "redirect": true}}, "needs redirect and a location"},
		{[]any{path}, []any{map[string]any{"forward": true, "pool": "/p1/web", "response": true}}, "forward happens at request"},
		{[]any{path}, []any{map[string]any{"httpHeader": true, "replace": true, "insert": true, "tmName": "x", "value": "1"}}, "one of replace, insert, remove"},
		{[]any{path}, []any{map[string]any{"httpHeader": true, "insert": true, "tmName": "x"}}, "needs a value"},
		{[]any{path}, []any{map[string]any{"httpHeader": true, "remove": true, "tmName": "x", "value": "1"}}, "remove takes no value"},
		{[]any{path}, []any{map[string]any{"httpUri": true, "replace": true, "path": "/a", "value": "/b"}}, "one of path, queryString, value"},
		{[]any{path}, []any{map[string]any{"httpHost": true, "replace": true, "value": "h", "response": true}}, "at request"},
		{[]any{path}, []any{map[string]any{"log": true}}, "supports forward, reset"},
	} {
		wantMessage(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", policy("bad", c.conds, c.actions)), 400, c.text)
	}
	good := policy("good", []any{path,
		map[string]any{"httpMethod": true, "equals": true, "values": []string{"GET"}},
		map[string]any{"httpHeader": true, "tmName": "X-Env", "equals": true, "values": []string{"canary"}},
		map[string]any{"httpUri": true, "queryParameter": true, "tmName": "q", "equals": true, "values": []string{"1"}},
	}, []any{
		map[string]any{"httpHeader": true, "remove": true, "tmName": "X-Gone"},
		map[string]any{"httpHost": true, "replace": true, "value": "internal"},
		map[string]any{"httpUri": true, "replace": true, "path": "/new"},
		forward,
		map[string]any{"httpHeader": true, "insert": true, "tmName": "X-Out", "value": "", "response": true},
	})
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", good), 200)
	mustStatus(t, call(t, s, "POST", "/mgmt/tm/ltm/policy", policy("redirect", []any{path},
		[]any{map[string]any{"httpReply": true, "redirect": true, "location": "tcl:https://[HTTP::host][HTTP::uri]"}})), 200)
	want := []Policy{
		{FullPath: "/p1/Drafts/good", Status: "draft", Rules: []string{"r0: httpUri path equals [/]; httpMethod equals [GET]; " +
			"httpHeader name=X-Env equals [canary]; httpUri queryParameter name=q equals [1] -> header remove X-Gone, " +
			"host replace internal, uri replace path /new, forward /p1/web, header insert X-Out  at response"}},
		{FullPath: "/p1/Drafts/redirect", Status: "draft", Rules: []string{"r0: httpUri path equals [/] -> redirect tcl:https://[HTTP::host][HTTP::uri]"}},
	}
	if diff := cmp.Diff(want, s.Dump().Policies); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}

	// Pools: a known load balancing mode, member ratios 1-65535.
	wantMessage(t, call(t, s, "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{"loadBalancingMode": "fastest-guess"}), 400, "invalid loadBalancingMode")
	for ratio, want := range map[any]string{0: "invalid ratio", 65536: "invalid ratio", 1.5: "must be an integer", "2": "must be an integer"} {
		wantMessage(t, call(t, s, "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{"members": []any{
			map[string]any{"name": "198.18.0.1:80", "ratio": ratio}}}), 400, want)
	}
	mustStatus(t, call(t, s, "PUT", "/mgmt/tm/ltm/pool/~p1~web", map[string]any{"loadBalancingMode": "ratio-member", "members": []any{
		map[string]any{"name": "198.18.0.1:80", "ratio": 3}, map[string]any{"name": "198.18.0.2:80"}}}), 200)
	pools := s.Dump().Pools
	if len(pools) != 1 || pools[0].LoadBalancingMode != "ratio-member" || len(pools[0].Members) != 2 ||
		pools[0].Members[0].Ratio != 3 || pools[0].Members[1].Ratio != 0 {
		t.Errorf("pools %+v", pools)
	}
}
