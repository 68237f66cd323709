package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// authority is the cluster's certificate authority. ECDSA P-256 keeps key
// generation fast; every component accepts it.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// keyPair is a signed certificate and its key, PEM encoded.
type keyPair struct {
	certPEM []byte
	keyPEM  []byte
}

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: "npl-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// issue signs a certificate for the subject. IPs and DNS names make it a
// serving certificate, otherwise it is a client certificate.
func (a *authority) issue(subject pkix.Name, ips []net.IP, dnsNames []string) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generate key for %s: %w", subject.CommonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
	}
	if len(ips) > 0 || len(dnsNames) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign certificate for %s: %w", subject.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// clientCert issues a client certificate for a user and its groups, the way
// the apiserver reads them (CN is the user, O the groups).
func (a *authority) clientCert(user string, groups ...string) (keyPair, error) {
	return a.issue(pkix.Name{CommonName: user, Organization: groups}, nil, nil)
}

func newSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		// crypto/rand does not fail on Linux; a fixed serial is still valid.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// newServiceAccountKey returns the key pair the apiserver and the
// controller-manager use to sign and verify service account tokens.
func newServiceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate service account key: %w", err)
	}
	privPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encode service account public key: %w", err)
	}
	return privPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// writeKubeconfig writes a kubeconfig for server with the client pair
// embedded, so the file stands alone.
func writeKubeconfig(path, server string, caPEM []byte, client keyPair, user string) error {
	return writeKubeconfigAuth(path, server, caPEM, user, &clientcmdapi.AuthInfo{ClientCertificateData: client.certPEM, ClientKeyData: client.keyPEM})
}

// writeKubeconfigAuth writes a kubeconfig for the apiserver at server with
// user's credentials auth.
func writeKubeconfigAuth(path, server string, caPEM []byte, user string, auth *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["npl"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["npl"] = &clientcmdapi.Context{Cluster: "npl", AuthInfo: user}
	cfg.CurrentContext = "npl"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// writeFiles writes each content to its path, readable by the owner only.
func writeFiles(files map[string][]byte) error {
	for path, content := range files {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
