package haproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeportlocal/npl/providers"
)

// files writes a self-signed certificate, its key, and an empty file, and
// returns their paths.
func files(t *testing.T) (cert, key, empty string) {
	t.Helper()
	dir := t.TempDir()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "npl-lbsync"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("tls.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		write("tls.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
		write("empty", []byte("\n"))
}

func sectionJSON(t *testing.T, fields map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse_acceptsAValidSection(t *testing.T) {
	cert, key, _ := files(t)
	cfg, err := Parse(providers.Common{ClusterName: "c1"}, sectionJSON(t, map[string]any{
		"edges": []string{"https://edge-a.example.net:8443/", "https://198.18.0.200:8443"}, "certFile": cert, "keyFile": key, "caFile": cert,
		"timeout": "5s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{Edges: []string{"https://edge-a.example.net:8443", "https://198.18.0.200:8443"}, CertFile: cert, KeyFile: key,
		CAFile: cert, Timeout: 5 * time.Second}
	if diff := cmp.Diff(want, cfg, cmpopts.IgnoreUnexported(Config{})); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if _, err := cfg.Open(t.Context()); err != nil {
		t.Fatalf("Open: %v", err)
	}
}

func TestParse_refusesBadSections(t *testing.T) {
	cert, key, empty := files(t)
	valid := func() map[string]any {
		return map[string]any{"edges": []string{"https://e:8443"}, "certFile": cert, "keyFile": key, "caFile": cert}
	}
	with := func(k string, v any) map[string]any {
		m := valid()
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name    string
		fields  map[string]any
		cluster string
		want    string
	}{
		{"no cluster name", valid(), "", "provider.haproxy: clusterName is required"},
		{"unknown key", with("insecureSkipVerify", true), "c1", "provider.haproxy.insecureSkipVerify: unknown field"},
		{"no edges", with("edges", nil), "c1", "provider.haproxy.edges: required"},
		{"http edge", with("edges", []string{"http://e:8443"}), "c1", "provider.haproxy.edges[0]: want https://host:port"},
		{"edge with a path", with("edges", []string{"https://e:8443/api"}), "c1", "provider.haproxy.edges[0]: want https://host:port with no credentials, path or query"},
		{"edge twice", with("edges", []string{"https://e:8443", "https://e:8443/"}), "c1", "provider.haproxy.edges[1]: https://e:8443 is given twice"},
		{"no certFile", with("certFile", nil), "c1", "provider.haproxy.certFile: required"},
		{"no caFile", with("caFile", nil), "c1", "provider.haproxy.caFile: required"},
		{"key not a key", with("keyFile", empty), "c1", "provider.haproxy.certFile: the certificate"},
		{"missing CA file", with("caFile", "/nonexistent/ca.crt"), "c1", "provider.haproxy.caFile: open /nonexistent/ca.crt"},
		{"CA file without PEM", with("caFile", empty), "c1", "provider.haproxy.caFile: no PEM certificate"},
		{"bad timeout", with("timeout", "-1s"), "c1", "provider.haproxy.timeout: \"-1s\" is not a positive duration"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(providers.Common{ClusterName: c.cluster}, sectionJSON(t, c.fields))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("Parse = %v, want an error starting %q", err, c.want)
			}
		})
	}
}
