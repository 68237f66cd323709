package bigip

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
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeportlocal/npl/providers"
)

// secrets writes a username, a password and a CA file and returns their paths.
func secrets(t *testing.T) (user, password, ca, empty string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return write("username", "admin\n"), write("password", "pa ss\n"), write("ca.pem", caPEM), write("empty", "\n")
}

func TestParse_fillsDefaults(t *testing.T) {
	user, password, ca, _ := secrets(t)
	common := providers.Common{ClusterName: "prod-eu1"}
	tests := []struct {
		name    string
		section string
		want    Config
	}{
		{
			name:    "https with a CA",
			section: `{"url":"https://bigip.example.net/","usernameFile":"` + user + `","passwordFile":"` + password + `","caFile":"` + ca + `"}`,
			want: Config{URL: "https://bigip.example.net", Partition: "npl-prod-eu1", CreatePartition: true, UsernameFile: user,
				PasswordFile: password, CAFile: ca, TokenAuth: true, Timeout: 30 * time.Second},
		},
		{
			name: "everything set",
			section: `{"url":"http://127.0.0.1:8443","partition":"k8s","createPartition":false,"usernameFile":"` + user +
				`","passwordFile":"` + password + `","tokenAuth":false,"timeout":"5s","insecureSkipVerify":true,"insecure":true}`,
			want: Config{URL: "http://127.0.0.1:8443", Partition: "k8s", UsernameFile: user, PasswordFile: password,
				InsecureSkipVerify: true, Insecure: true, Timeout: 5 * time.Second},
		},
		{
			name:    "https without verification needs no CA",
			section: `{"url":"https://10.0.0.1:443","usernameFile":"` + user + `","passwordFile":"` + password + `","insecureSkipVerify":true}`,
			want: Config{URL: "https://10.0.0.1:443", Partition: "npl-prod-eu1", CreatePartition: true, UsernameFile: user,
				PasswordFile: password, InsecureSkipVerify: true, TokenAuth: true, Timeout: 30 * time.Second},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(common, []byte(tc.section))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(&tc.want, got, cmpopts.IgnoreUnexported(Config{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParse_errorsNameTheField(t *testing.T) {
	user, password, ca, empty := secrets(t)
	base := `"usernameFile":"` + user + `","passwordFile":"` + password + `"`
	tests := []struct {
		name    string
		section string
		want    string
	}{
		{"no section", ``, "provider.bigip.url: required"},
		{"no url", `{` + base + `}`, "provider.bigip.url: required"},
		{"url without scheme", `{"url":"bigip.example.net",` + base + `}`, "provider.bigip.url: want http(s)://host[:port]"},
		{"url with a path", `{"url":"http://bigip/mgmt",` + base + `}`, "provider.bigip.url: want http(s)://host[:port]"},
		{"url with credentials", `{"url":"http://a:b@bigip",` + base + `}`, "provider.bigip.url"},
		{"url with a bad port", `{"url":"http://bigip:70000",` + base + `}`, "provider.bigip.url: port"},
		{"unknown field", `{"url":"http://bigip","pasword":"x",` + base + `}`, `provider.bigip.pasword: unknown field`},
		{"wrong type", `{"url":"http://bigip","tokenAuth":"yes",` + base + `}`, "provider.bigip.tokenAuth: want true or false"},
		{"bad partition", `{"url":"http://bigip","partition":"a/b",` + base + `}`, "provider.bigip.partition"},
		{"no password file", `{"url":"http://bigip","usernameFile":"` + user + `"}`, "provider.bigip.passwordFile: required"},
		{"no username file", `{"url":"http://bigip","passwordFile":"` + password + `"}`, "provider.bigip.usernameFile: required"},
		{"unreadable password file", `{"url":"http://bigip","usernameFile":"` + user + `","passwordFile":"/nonexistent/pw"}`, "provider.bigip.passwordFile: open /nonexistent/pw"},
		{"empty username file", `{"url":"http://bigip","usernameFile":"` + empty + `","passwordFile":"` + password + `"}`, "provider.bigip.usernameFile:"},
		{"https without CA", `{"url":"https://bigip",` + base + `}`, "provider.bigip.caFile: required for an https url"},
		{"CA file that is not PEM", `{"url":"https://bigip","caFile":"` + user + `",` + base + `}`, "provider.bigip.caFile:"},
		{"bad timeout", `{"url":"http://bigip","timeout":"soon",` + base + `}`, "provider.bigip.timeout:"},
		{"negative timeout", `{"url":"http://bigip","timeout":"-1s",` + base + `}`, "provider.bigip.timeout:"},
		{"numeric timeout", `{"url":"http://bigip","timeout":30,` + base + `}`, "provider.bigip.timeout: want a string"},
		{"trailing data", `{"url":"http://bigip",` + base + `} {}`, "provider.bigip: unexpected data"},
		{"CA accepted", `{"url":"https://bigip","caFile":"` + ca + `","timeout":"x",` + base + `}`, "provider.bigip.timeout:"},
		// go-bigip sends the login in clear over http (REFERENCE 17).
		{"http without insecure", `{"url":"http://bigip",` + base + `}`, "provider.bigip.url: an http URL sends the BIG-IP login in clear"},
		{"http with insecure false", `{"url":"http://bigip","insecure":false,` + base + `}`, "provider.bigip.url: an http URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(providers.Common{ClusterName: "c1"}, []byte(tc.section))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want one starting with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "pa ss") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

func TestParse_needsAClusterName(t *testing.T) {
	user, password, _, _ := secrets(t)
	_, err := Parse(providers.Common{}, []byte(`{"url":"http://bigip","insecure":true,"usernameFile":"`+user+`","passwordFile":"`+password+`"}`))
	if err == nil || !strings.Contains(err.Error(), "clusterName") {
		t.Errorf("Parse without a cluster name: %v", err)
	}
}
