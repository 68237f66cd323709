package avisim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"
)

// selfSigned returns a PEM certificate for host and its PEM key, EC or RSA.
func selfSigned(t *testing.T, host string, useRSA bool) (certPEM, keyPEM string) {
	t.Helper()
	var key crypto.Signer
	var err error
	if useRSA {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

func certObject(name, certPEM, keyPEM string) map[string]any {
	o := map[string]any{"name": name, "certificate": map[string]any{"certificate": certPEM}}
	if keyPEM != "" {
		o["key"] = keyPEM
	}
	return o
}

func TestServer_sslKeyAndCertificate(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	certPEM, keyPEM := selfSigned(t, "a.example.com", false)
	_, otherKey := selfSigned(t, "b.example.com", false)

	created := c.mustCreate("sslkeyandcertificate", certObject("cert", certPEM, keyPEM))
	if _, shown := created["key"]; shown {
		t.Error("the controller showed the private key")
	}
	params, _ := created["key_params"].(map[string]any)
	if params["algorithm"] != "SSL_KEY_ALGORITHM_EC" || created["type"] != "SSL_CERTIFICATE_TYPE_VIRTUALSERVICE" {
		t.Errorf("derived fields: key_params %v type %v", created["key_params"], created["type"])
	}
	// An update without the key keeps the stored one.
	uuid := created["uuid"].(string)
	if status, out := c.do("PUT", "/api/sslkeyandcertificate/"+uuid, certObject("cert", certPEM, "")); status != http.StatusOK {
		t.Errorf("PUT without the key: %d %v", status, out)
	}

	for _, tt := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"a key of another certificate", certObject("bad-1", certPEM, otherKey), "private key does not match"},
		{"no key", certObject("bad-2", certPEM, ""), "a private key is required"},
		{"no certificate", certObject("bad-3", "", keyPEM), "certificate.certificate"},
		{"not PEM", certObject("bad-4", "junk", keyPEM), "Error in parsing"},
	} {
		status, out := c.do("POST", "/api/sslkeyandcertificate", tt.obj)
		if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), tt.want) {
			t.Errorf("%s: %d %v, want 400 containing %q", tt.name, status, out, tt.want)
		}
	}
}

func TestServer_httpPolicySet(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.mustCreate("pool", map[string]any{"name": "web"})
	rule := func(name string, index int, match, action map[string]any) map[string]any {
		return map[string]any{"name": name, "index": index, "enable": true, "match": match, "switching_action": action}
	}
	toPool := map[string]any{"action": "HTTP_SWITCHING_SELECT_POOL", "pool_ref": "/api/pool?name=web"}
	hostIs := map[string]any{"host_hdr": map[string]any{"match_criteria": "HDR_EQUALS", "value": []string{"a.example.com"}},
		"path": map[string]any{"match_criteria": "BEGINS_WITH", "match_str": []string{"/"}}}
	policy := func(rules ...map[string]any) map[string]any {
		return map[string]any{"name": "ps", "http_request_policy": map[string]any{"rules": rules}}
	}

	ps := c.mustCreate("httppolicyset", policy(rule("r1", 1, hostIs, toPool)))
	status, out := c.do("DELETE", "/api/pool/"+srv.Objects("admin", "pool")[0]["uuid"].(string), nil)
	if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), "HTTPPolicySet ps") {
		t.Errorf("delete a pool a policy set uses: %d %v", status, out)
	}
	c.do("DELETE", "/api/httppolicyset/"+ps["uuid"].(string), nil)

	for _, tt := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"two rules with one index", policy(rule("r1", 1, hostIs, toPool), rule("r2", 1, hostIs, toPool)), "index 1 is used twice"},
		{"two rules with one name", policy(rule("r1", 1, hostIs, toPool), rule("r1", 2, hostIs, toPool)), "rule name r1 is used twice"},
		{"an unknown host criteria", policy(rule("r1", 1, map[string]any{"host_hdr": map[string]any{"match_criteria": "IS"}}, toPool)),
			"host_hdr.match_criteria"},
		{"a path without strings", policy(rule("r1", 1, map[string]any{"path": map[string]any{"match_criteria": "EQUALS"}}, toPool)),
			"needs match_str"},
		{"a pool switch without a pool", policy(rule("r1", 1, hostIs, map[string]any{"action": "HTTP_SWITCHING_SELECT_POOL"})),
			"needs a pool_ref"},
		{"an unknown pool", policy(rule("r1", 1, hostIs, map[string]any{"action": "HTTP_SWITCHING_SELECT_POOL",
			"pool_ref": "/api/pool?name=absent"})), "Pool object not found!"},
	} {
		status, out := c.do("POST", "/api/httppolicyset", tt.obj)
		if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), tt.want) {
			t.Errorf("%s: %d %v, want 400 containing %q", tt.name, status, out, tt.want)
		}
	}
}

func TestServer_virtualServiceHTTPFeatures(t *testing.T) {
	srv := startServer(t, Options{})
	c := loggedIn(t, srv)
	c.mustCreate("vsvip", map[string]any{"name": "vip", "vip": []any{map[string]any{"vip_id": "0", "auto_allocate_ip": true}}})
	c.mustCreate("httppolicyset", map[string]any{"name": "ps"})
	ecCert, ecKey := selfSigned(t, "a.example.com", false)
	ec2Cert, ec2Key := selfSigned(t, "b.example.com", false)
	rsaCert, rsaKey := selfSigned(t, "c.example.com", true)
	c.mustCreate("sslkeyandcertificate", certObject("ec", ecCert, ecKey))
	c.mustCreate("sslkeyandcertificate", certObject("ec2", ec2Cert, ec2Key))
	c.mustCreate("sslkeyandcertificate", certObject("rsa", rsaCert, rsaKey))
	vs := func(name, profile string, certs []string, ssl bool) map[string]any {
		return map[string]any{
			"name": name, "vsvip_ref": "/api/vsvip?name=vip",
			"services":                     []any{map[string]any{"port": 80}, map[string]any{"port": 443, "enable_ssl": ssl}},
			"application_profile_ref":      "/api/applicationprofile?name=" + profile,
			"http_policies":                []any{map[string]any{"index": 11, "http_policy_set_ref": "/api/httppolicyset?name=ps"}},
			"ssl_key_and_certificate_refs": certs,
		}
	}
	ok := c.mustCreate("virtualservice", vs("ok", "System-Secure-HTTP",
		[]string{"/api/sslkeyandcertificate?name=ec", "/api/sslkeyandcertificate?name=rsa"}, true))
	if ref := str(ok["ssl_profile_ref"]); !strings.Contains(ref, "/api/sslprofile/") {
		t.Errorf("ssl_profile_ref defaulted to %q, want System-Standard", ref)
	}
	for _, tt := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"HTTP policies on an L4 profile", vs("l4", "System-L4-Application", nil, false), "need an application profile of type"},
		{"SSL without a certificate", vs("nocert", "System-HTTP", nil, true), "no SSL certificate"},
		{"two EC certificates", vs("twoec", "System-Secure-HTTP",
			[]string{"/api/sslkeyandcertificate?name=ec", "/api/sslkeyandcertificate?name=ec2"}, true), "at most one RSA and one EC"},
	} {
		status, out := c.do("POST", "/api/virtualservice", tt.obj)
		if status != http.StatusBadRequest || !strings.Contains(str(out["error"]), tt.want) {
			t.Errorf("%s: %d %v, want 400 containing %q", tt.name, status, out, tt.want)
		}
	}
}
