package ingress

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// On a shared VIP every namespace's Ingresses meet on one listener, and
// every namespace user is an adversary of every other: a host belongs to
// the namespace of the oldest Ingress that claims it (a rule's host or a
// TLS host; "" is the rule for every host), and only that namespace's
// Ingresses route its requests or give it a certificate.

// claimHosts records the owner of every host ingresses claim, oldest first.
func (b *build) claimHosts(ingresses []*networkingv1.Ingress) {
	b.owners = map[string]string{}
	claim := func(ns, host string) {
		if _, taken := b.owners[host]; !taken {
			b.owners[host] = ns
		}
	}
	for _, ing := range ingresses {
		for _, rule := range ing.Spec.Rules {
			if rule.HTTP != nil {
				claim(ing.Namespace, strings.ToLower(rule.Host))
			}
		}
		for _, t := range ing.Spec.TLS {
			for _, h := range t.Hosts {
				claim(ing.Namespace, strings.ToLower(h))
			}
		}
	}
}

// owns reports whether ing's namespace owns host, and reports when it does
// not: its rules for the host are left out.
func (b *build) owns(ing *networkingv1.Ingress, host string) bool {
	owner, claimed := b.owners[host]
	if b.owners == nil || !claimed || owner == ing.Namespace {
		return true
	}
	what := "host " + host
	if host == "" {
		what = "the rules for every host"
	}
	b.errorf(ing, "%s ignored: namespace %s owns it on the shared VIP (an older Ingress claims it)", what, owner)
	return false
}

// certAllowed says why a certificate (PEM) of ing may not be served on a
// shared VIP: a name it holds (its DNS names, else its common name) meets
// a host another namespace owns, so the load balancer would pick it for
// that host's connections.
func (b *build) certAllowed(ing *networkingv1.Ingress, certPEM []byte) error {
	if b.owners == nil {
		return nil
	}
	for _, name := range certNames(certPEM) {
		for host, owner := range b.owners {
			if owner != ing.Namespace && host != "" && lbmodel.HostsMeet(name, host) {
				return fmt.Errorf("its name %s meets host %s, which namespace %s owns", name, host, owner)
			}
		}
	}
	return nil
}

// certNames returns the names the first certificate of certPEM serves:
// its DNS names, else its common name.
func certNames(certPEM []byte) []string {
	for rest := certPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil
		}
		if len(c.DNSNames) > 0 {
			return c.DNSNames
		}
		if c.Subject.CommonName != "" {
			return []string{c.Subject.CommonName}
		}
		return nil
	}
}
