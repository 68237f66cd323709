package edge

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/internal/atomicfile"
	"github.com/nodeportlocal/npl/lbmodel"
)

// The desired state on disk: desired.json and the certificate files, so
// that a restarted edge or HAProxy serves it again at once.

func (e *Edge) stateFile() string { return filepath.Join(e.cfg.Dir, "desired.json") }

// certPath is the file of a certificate and its key, named by the
// certificate's fingerprint: a changed certificate is a new file, hence a
// changed configuration and a reload.
func (e *Edge) certPath(fingerprint string) string {
	return filepath.Join(e.cfg.Dir, "tls", fingerprint+".pem")
}

// caPath is the file of the CA certificates of a pool's backend TLS or of
// a listener's client validation, named by a hash of their data, as a
// certificate's.
func (e *Edge) caPath(pemData string) string {
	sum := sha256.Sum256([]byte(pemData))
	return filepath.Join(e.cfg.Dir, "ca", hex.EncodeToString(sum[:])+".pem")
}

// files name the edge's files for the configuration.
func (e *Edge) files() haproxy.Files { return haproxy.Files{Cert: e.certPath, CA: e.caPath} }

// caCerts returns the CA certificates (PEM) of the desired state: those of
// the pools' backend TLS and of the listeners' client validation. A file
// is named by its data, so two load balancers with the same CA
// certificates share one, and neither's listeners verify with another's.
func (e *Edge) caCerts() []string {
	var out []string
	for _, lb := range e.desired {
		for _, p := range lb.Pools {
			if p.Policy != nil && p.Policy.BackendTLS != nil && p.Policy.BackendTLS.CACertPEM != "" {
				out = append(out, p.Policy.BackendTLS.CACertPEM)
			}
		}
		for _, l := range lb.Listeners {
			if l.ClientValidation != nil {
				out = append(out, l.ClientValidation.CACertPEM)
			}
		}
	}
	return out
}

// writeCerts writes the certificate files of the desired state that do not
// exist yet (mode 0600 in a 0700 directory): HAProxy reads them, and a
// restarted edge reads the keys back from them. The CA files of backend
// TLS and of client validation are written beside them.
func (e *Edge) writeCerts() error {
	for _, ca := range e.caCerts() {
		path := e.caPath(ca)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		// The certificates alone: HAProxy's runtime "add server" fails
		// on a CA file that holds anything else.
		var certs []byte
		for rest := []byte(ca); ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			if block.Type == "CERTIFICATE" {
				certs = append(certs, pem.EncodeToMemory(block)...)
			}
		}
		if err := atomicfile.Write(path, certs, 0o600); err != nil {
			return fmt.Errorf("write CA certificates: %w", err)
		}
	}
	for _, lb := range e.desired {
		if !lb.IsL7() {
			continue
		}
		for _, c := range lb.HTTP.TLS {
			path := e.certPath(c.Fingerprint)
			if _, err := os.Stat(path); err == nil {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			pemData := append(append(bytes.TrimSpace(slices.Clone(c.CertPEM)), '\n'), bytes.TrimSpace(c.KeyPEM)...)
			if err := atomicfile.Write(path, append(pemData, '\n'), 0o600); err != nil {
				return fmt.Errorf("write the certificate of TLS Secret %s: %w", c.Secret, err)
			}
		}
	}
	return nil
}

// removeStaleCerts removes the certificate and CA files no load balancer
// uses.
func (e *Edge) removeStaleCerts() {
	used := map[string]bool{}
	for _, lb := range e.desired {
		if lb.IsL7() {
			for _, c := range lb.HTTP.TLS {
				used[e.certPath(c.Fingerprint)] = true
			}
		}
	}
	for _, ca := range e.caCerts() {
		used[e.caPath(ca)] = true
	}
	tls, _ := filepath.Glob(filepath.Join(e.cfg.Dir, "tls", "*.pem"))
	cas, _ := filepath.Glob(filepath.Join(e.cfg.Dir, "ca", "*.pem"))
	for _, f := range append(tls, cas...) {
		if !used[f] {
			_ = os.Remove(f)
		}
	}
}

// readCert reads the certificate and key of a TLS entry back from its file.
func (e *Edge) readCert(c *lbmodel.TLSCert) error {
	data, err := os.ReadFile(e.certPath(c.Fingerprint))
	if err != nil {
		return err
	}
	var certs, key []byte
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			certs = append(certs, pem.EncodeToMemory(block)...)
		} else {
			key = pem.EncodeToMemory(block)
		}
	}
	c.CertPEM, c.KeyPEM = certs, key
	return nil
}

// savedLB is one entry of desired.json.
type savedLB struct {
	Cluster      string               `json:"cluster"`
	LoadBalancer lbmodel.LoadBalancer `json:"loadBalancer"`
}

func (e *Edge) save() error {
	out := make([]savedLB, 0, len(e.desired))
	for k, lb := range e.desired {
		out = append(out, savedLB{Cluster: k.cluster, LoadBalancer: *lb})
	}
	slices.SortFunc(out, func(a, b savedLB) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.LoadBalancer.Name, b.LoadBalancer.Name))
	})
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(e.stateFile(), b, 0o600); err != nil {
		return fmt.Errorf("save the desired state: %w", err)
	}
	return nil
}

func (e *Edge) load() error {
	b, err := os.ReadFile(e.stateFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load the desired state: %w", err)
	}
	var saved []savedLB
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("load the desired state %s: %w", e.stateFile(), err)
	}
	for _, s := range saved {
		if s.LoadBalancer.HTTP != nil {
			var missing error
			for i := range s.LoadBalancer.HTTP.TLS {
				if err := e.readCert(&s.LoadBalancer.HTTP.TLS[i]); err != nil {
					missing = fmt.Errorf("the certificate of TLS Secret %s: %w", s.LoadBalancer.HTTP.TLS[i].Secret, err)
				}
			}
			if missing != nil {
				// Served again when the provider next states it; the
				// others start now.
				klog.ErrorS(missing, "Load balancer of the saved state left out", "cluster", s.Cluster, "loadBalancer", s.LoadBalancer.Name)
				continue
			}
		}
		n, err := checkRequest(s.Cluster, &s.LoadBalancer)
		if err != nil {
			// Saved by an edge whose rules were looser (a name with a
			// newline, say): not served, and not a reason to serve none.
			klog.ErrorS(err, "Load balancer of the saved state left out: it breaks the rules", "cluster", s.Cluster,
				"loadBalancer", s.LoadBalancer.Name)
			continue
		}
		e.desired[lbKey{s.Cluster, n.Name}] = n
	}
	return nil
}
