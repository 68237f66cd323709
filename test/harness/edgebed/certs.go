package edgebed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nodeportlocal/npl/edge/api"
)

// Certs are the PEM files of the bed's mutual TLS: one CA signs the edge's
// server certificate and the clients' certificates (ClientCert names no
// cluster: it reads the edge's status; ClientFor makes one that names
// clusters, as npl-lbsync's); another CA (Rogue) signs a client
// certificate the edge must refuse.
type Certs struct {
	CA                        string
	ServerCert, ServerKey     string
	ClientCert, ClientKey     string
	RogueCA                   string
	RogueClientCert, RogueKey string
	OtherServerCA             string

	dir     string
	ca      signer
	mu      sync.Mutex
	clients map[string][2]string // clusters -> cert and key files
}

// ClientFor returns the files of a client certificate of the bed's CA
// that names clusters (api.ClusterURI of each), as the operator makes
// npl-lbsync's: the edge lets it change those clusters' load balancers
// only. Made once per set of clusters.
func (c *Certs) ClientFor(clusters ...string) (certFile, keyFile string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := strings.Join(clusters, ",")
	if f, ok := c.clients[id]; ok {
		return f[0], f[1], nil
	}
	var uris []*url.URL
	for _, cl := range clusters {
		uris = append(uris, api.ClusterURI(cl))
	}
	base := filepath.Join(c.dir, "client-"+strings.Join(clusters, "+"))
	if err := writeLeaf(c.ca, "npl-lbsync", false, nil, uris, base+".crt", base+".key"); err != nil {
		return "", "", err
	}
	if c.clients == nil {
		c.clients = map[string][2]string{}
	}
	c.clients[id] = [2]string{base + ".crt", base + ".key"}
	return base + ".crt", base + ".key", nil
}

type signer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func writeCerts(dir string, edgeIPs ...netip.Addr) (*Certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Certs{
		CA: filepath.Join(dir, "ca.crt"), ServerCert: filepath.Join(dir, "edge.crt"), ServerKey: filepath.Join(dir, "edge.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
		RogueCA: filepath.Join(dir, "rogue-ca.crt"), RogueClientCert: filepath.Join(dir, "rogue.crt"), RogueKey: filepath.Join(dir, "rogue.key"),
		OtherServerCA: filepath.Join(dir, "rogue-ca.crt"),
	}
	ca, err := newCA("npl-edge test CA")
	if err != nil {
		return c, err
	}
	rogue, err := newCA("rogue CA")
	if err != nil {
		return c, err
	}
	if err := writeCert(c.CA, "", ca.cert, nil); err != nil {
		return c, err
	}
	if err := writeCert(c.RogueCA, "", rogue.cert, nil); err != nil {
		return c, err
	}
	c.dir, c.ca = dir, ca
	for _, leaf := range []struct {
		by             signer
		cn             string
		server         bool
		certPath, keyP string
	}{
		{ca, "npl-edge", true, c.ServerCert, c.ServerKey},
		{ca, "npl-lbsync", false, c.ClientCert, c.ClientKey},
		{rogue, "npl-lbsync", false, c.RogueClientCert, c.RogueKey},
	} {
		if err := writeLeaf(leaf.by, leaf.cn, leaf.server, edgeIPs, nil, leaf.certPath, leaf.keyP); err != nil {
			return c, err
		}
	}
	return c, nil
}

// writeLeaf writes a certificate signed by by, for a server (with the
// addresses ips) or a client (naming uris), and its key.
func writeLeaf(by signer, cn string, server bool, ips []netip.Addr, uris []*url.URL, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs: uris,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, ip := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, by.cert, &key.PublicKey, by.key)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	return writeCert(certPath, keyPath, cert, key)
}

func newCA(cn string) (signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return signer{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return signer{}, err
	}
	cert, err := x509.ParseCertificate(der)
	return signer{cert: cert, key: key}, err
}

func writeCert(certPath, keyPath string, cert *x509.Certificate, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o600); err != nil {
		return err
	}
	if key == nil {
		return nil
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// ServingCertificate returns a self-signed certificate for host and its
// key, PEM: what a TLS Secret of an Ingress or a Gateway listener holds,
// and what a client that trusts the certificate itself verifies.
func ServingCertificate(host string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
