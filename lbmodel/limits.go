package lbmodel

import (
	"encoding/json"
	"strings"
)

// What one tenant's object may add to a load balancer that several share,
// so that it cannot make the model, or the request that carries it, too
// large for the others: the builders refuse the object (its route or
// Ingress is left out, with its condition) before the model is built.
const (
	// MaxObjectRules is the most rules one route or Ingress adds to a
	// model (a route's matches times its hosts times its listeners).
	MaxObjectRules = 512
	// MaxModelBytes bounds a model as a provider receives it: its JSON
	// and its certificates' PEM data (Size). npl-edge takes requests of at
	// most 8 MiB.
	MaxModelBytes = 4 << 20
)

// Size returns the bytes lb takes as a provider receives it: its JSON
// encoding and its certificates' PEM data, which travel beside it.
func Size(lb *LoadBalancer) int {
	n := JSONSize(lb)
	if lb.HTTP != nil {
		for _, c := range lb.HTTP.TLS {
			n += len(c.CertPEM) + len(c.KeyPEM)
		}
	}
	return n
}

// JSONSize returns the length of v's JSON encoding, 0 when it has none:
// what a part of a model adds to Size.
func JSONSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// HostsMeet reports whether some request host matches both host patterns
// a and b, each an exact name or a "*." wildcard (of any depth, the wider
// reading): a certificate for one serves requests for the other.
func HostsMeet(a, b string) bool {
	a, b = strings.ToLower(a), strings.ToLower(b)
	wa, wb := strings.HasPrefix(a, "*."), strings.HasPrefix(b, "*.")
	switch {
	case a == b:
		return true
	case wa && wb:
		return strings.HasSuffix(a[1:], b[1:]) || strings.HasSuffix(b[1:], a[1:])
	case wa:
		return strings.HasSuffix(b, a[1:])
	case wb:
		return strings.HasSuffix(a, b[1:])
	}
	return false
}
