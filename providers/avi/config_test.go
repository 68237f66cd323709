package avi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/providers"
)

// writeFile writes content to name in dir and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// caFile writes a self-signed CA certificate into dir.
func caFile(t testing.TB, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "other CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, "ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
}

func TestParse(t *testing.T) {
	dir := t.TempDir()
	user := writeFile(t, dir, "username", "admin\n")
	pass := writeFile(t, dir, "password", "s3cret\n")
	empty := writeFile(t, dir, "empty", "\n")
	notPEM := writeFile(t, dir, "not-pem", "hello")
	ca := caFile(t, dir)
	common := providers.Common{ClusterName: "c1"}

	base := func(extra string) string {
		s := `"controller":"avi.example.net","vipNetwork":"vip-net","usernameFile":"` + user +
			`","passwordFile":"` + pass + `","caFile":"` + ca + `"`
		if extra != "" {
			s += "," + extra
		}
		return "{" + s + "}"
	}

	tests := []struct {
		name    string
		common  providers.Common
		section string
		want    *Config
		wantErr string
	}{
		{
			name:    "defaults",
			section: base(""),
			want: &Config{Controller: "avi.example.net", Tenant: "admin", Cloud: "Default-Cloud",
				ServiceEngineGroup: "Default-Group", VIPNetwork: "vip-net", UsernameFile: user, PasswordFile: pass,
				CAFile: ca, Timeout: 30 * time.Second, ClusterName: "c1"},
		},
		{
			name: "every field",
			section: `{"controller":"https://10.0.0.1:8443/","tenant":"t","cloud":"k","serviceEngineGroup":"g","vipNetwork":"n",` +
				`"version":"22.1.3","usernameFile":"` + user + `","passwordFile":"` + pass + `","insecureSkipVerify":true,"timeout":"5s"}`,
			want: &Config{Controller: "10.0.0.1:8443", Tenant: "t", Cloud: "k", ServiceEngineGroup: "g", VIPNetwork: "n",
				Version: "22.1.3", UsernameFile: user, PasswordFile: pass, InsecureSkipVerify: true, Timeout: 5 * time.Second,
				ClusterName: "c1"},
		},
		{name: "unknown key", section: base(`"frobnicate":1`), wantErr: "provider.avi.frobnicate: unknown field"},
		{name: "key in another case", section: base(`"PasswordFile":"x"`), wantErr: "provider.avi.PasswordFile: unknown field"},
		{name: "wrong type", section: base(`"timeout":5`), wantErr: "provider.avi.timeout: want a string, got a JSON number"},
		{name: "bad timeout", section: base(`"timeout":"soon"`), wantErr: `provider.avi.timeout: time: invalid duration "soon"`},
		{name: "negative timeout", section: base(`"timeout":"-1s"`), wantErr: "provider.avi.timeout: must be positive"},
		{name: "no controller", section: `{"vipNetwork":"n"}`, wantErr: "provider.avi.controller: required"},
		{name: "plain http controller", section: `{"controller":"http://avi"}`, wantErr: "provider.avi.controller: the Avi API is served over https only"},
		{name: "controller with a path", section: `{"controller":"avi/ui"}`, wantErr: "provider.avi.controller: \"avi/ui\" is not host[:port]"},
		{name: "no vip network", section: `{"controller":"avi"}`, wantErr: "provider.avi.vipNetwork: required"},
		{name: "no password file", section: `{"controller":"avi","vipNetwork":"n","usernameFile":"` + user + `"}`,
			wantErr: "provider.avi.passwordFile: required"},
		{name: "missing password file", section: strings.Replace(base(""), pass, filepath.Join(dir, "absent"), 1),
			wantErr: "provider.avi.passwordFile: open " + filepath.Join(dir, "absent")},
		{name: "empty username file", section: strings.Replace(base(""), user, empty, 1),
			wantErr: "provider.avi.usernameFile: " + empty + " is empty"},
		{name: "no CA", section: strings.Replace(base(""), `,"caFile":"`+ca+`"`, "", 1),
			wantErr: "provider.avi.caFile: required unless insecureSkipVerify is true"},
		{name: "CA not PEM", section: strings.Replace(base(""), ca, notPEM, 1),
			wantErr: "provider.avi.caFile: no PEM certificate in " + notPEM},
		{name: "trailing data", section: base("") + "{}", wantErr: "provider.avi: unexpected data"},
		{name: "no cluster name", common: providers.Common{}, section: base(""), wantErr: "provider.avi: clusterName is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := common
			if tc.name == "no cluster name" {
				c = tc.common
			}
			got, err := Parse(c, []byte(tc.section))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
