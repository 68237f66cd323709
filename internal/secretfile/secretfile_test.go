package secretfile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRead_dropsTheTrailingLineEndingOnly(t *testing.T) {
	tests := []struct{ name, content, want string }{
		{"no line ending", "s3cret", "s3cret"},
		{"LF from echo", "s3cret\n", "s3cret"},
		{"CRLF from a Windows editor", "s3cret\r\n", "s3cret"},
		{"several line endings", "s3cret\n\r\n\n", "s3cret"},
		{"leading and inner spaces are part of it", "  pa ss\n", "  pa ss"},
		{"a trailing tab or space is part of it", "pass\t \n", "pass\t "},
		{"an inner line ending is part of it", "line1\nline2\n", "line1\nline2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(write(t, tt.content))
			if err != nil || got != tt.want {
				t.Errorf("Read = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestRead_emptyIsAnErrorNamingTheFileNotItsContent(t *testing.T) {
	for _, content := range []string{"", "\n", "\r\n", "  \t\n", " "} {
		path := write(t, content)
		_, err := Read(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "empty") {
			t.Errorf("Read(%q) error = %v, want one naming %s as empty", content, err, path)
		}
	}
	missing := filepath.Join(t.TempDir(), "absent")
	if _, err := Read(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Read of a missing file = %v, want ErrNotExist naming it", err)
	}
	// The content of a file that is not a valid value never shows.
	if _, err := LoadCAPool(write(t, "hunter2\n")); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("LoadCAPool error = %v, want one without the content", err)
	}
}

func TestLoadCAPool_acceptsPEMCertificatesOnly(t *testing.T) {
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
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCAPool(write(t, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))))
	if err != nil {
		t.Fatalf("LoadCAPool: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Errorf("the pool does not verify its own CA: %v", err)
	}
	notPEM := write(t, "not a certificate")
	if _, err := LoadCAPool(notPEM); err == nil || !strings.Contains(err.Error(), "no PEM certificate in "+notPEM) {
		t.Errorf("LoadCAPool(not PEM) = %v", err)
	}
	if _, err := LoadCAPool(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadCAPool(missing) = %v, want ErrNotExist", err)
	}
}
