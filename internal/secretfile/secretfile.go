// Package secretfile reads the files that hold a provider's credentials and
// CA certificates: Kubernetes mounts them from Secrets, and an operator
// writes them with echo or an editor. There is one rule for every provider:
// the trailing line ending (any run of CR and LF at the end) is not part of
// the value; anything else, leading or inner spaces and tabs included, is.
// A value that is empty or only whitespace is an error. Errors name the
// file, never its content.
package secretfile

import (
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// Read returns the value held by the file at path: its content without the
// trailing CR and LF characters. A file that is empty or holds only
// whitespace is an error, so a Secret mounted without its key is caught
// when the configuration is read rather than at the first login.
func Read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%s is empty or holds only whitespace", path)
	}
	return s, nil
}

// LoadCAPool returns the PEM certificates of the file at path as a pool to
// verify a load balancer's TLS certificate against. A file with no PEM
// certificate is an error.
func LoadCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no PEM certificate in %s", path)
	}
	return pool, nil
}
