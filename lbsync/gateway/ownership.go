package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// A listener without a hostname that takes routes from namespaces other
// than the Gateway's is shared by tenants who are each other's adversaries:
// on it, a host belongs to the namespace of the oldest route that claims it
// ("" is the route for every host), and a route of another namespace gets
// no rule for that host there. Gateway API's own rules (listener
// hostnames, allowedRoutes, ReferenceGrant) decide first; a listener with a
// hostname, or one that takes the Gateway's namespace only, is the Gateway
// owner's to share.

// hostKey is a host on the listeners of one port.
type hostKey struct {
	port int32
	host string
}

// refusedHost is a host a route claims on a shared listener that another
// namespace owns.
type refusedHost struct {
	port  int32
	host  string
	owner *routeView
}

func (h refusedHost) String() string {
	host := h.host
	if host == "" {
		host = "every host"
	}
	return fmt.Sprintf("%s on port %d (namespace %s owns it: %s is older)", host, h.port, h.owner.meta.Namespace, h.owner)
}

// shared reports whether tenants of several namespaces meet on l: it has no
// hostname and takes routes from namespaces other than the Gateway's.
func (l *listener) shared() bool {
	if l.hostname != "" || l.spec.AllowedRoutes == nil || l.spec.AllowedRoutes.Namespaces == nil {
		return false
	}
	from := l.spec.AllowedRoutes.Namespaces.From
	return from != nil && *from != gatewayv1.NamespacesFromSame
}

// owner returns the route that owns host on shared listener l, which
// rt claims: the first route that claimed it, as routes come oldest first
// (byAge), else rt.
func (b *build) owner(l *listener, host string, rt *routeView) *routeView {
	k := hostKey{l.spec.Port, host}
	if b.owners == nil {
		b.owners = map[hostKey]*routeView{}
	}
	if o, ok := b.owners[k]; ok {
		return o
	}
	b.owners[k] = rt
	return rt
}

// byAge orders routes as Gateway API ranks them, the oldest first, then by
// namespace and name (and kind): the order in which they claim hosts.
func byAge(a, b *routeView) int {
	return cmp.Or(a.meta.CreationTimestamp.Compare(b.meta.CreationTimestamp.Time), cmp.Compare(a.meta.Namespace, b.meta.Namespace),
		cmp.Compare(a.meta.Name, b.meta.Name), cmp.Compare(a.kind, b.kind))
}

// refusedMessage says which hosts a route does not get.
func refusedMessage(refused []refusedHost) string {
	parts := make([]string, 0, len(refused))
	for _, h := range refused {
		parts = append(parts, h.String())
	}
	slices.Sort(parts)
	return "hosts not served on shared listeners: " + strings.Join(slices.Compact(parts), "; ")
}

// certBytes returns the PEM bytes of the certificates of the listeners,
// each once: what the model takes before any route (lbmodel.Size).
func certBytes(ls []*listener) int {
	seen := map[string]bool{}
	n := 0
	for _, l := range ls {
		for _, c := range l.certs {
			if !seen[c.Secret] {
				seen[c.Secret] = true
				n += len(c.CertPEM) + len(c.KeyPEM) + lbmodel.JSONSize(c)
			}
		}
	}
	return n
}
