package lbmodel

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Names of load balancer objects. Every provider and npl-edge names its
// objects from these, and two different Kubernetes objects never get one
// name, whatever their namespaces and names (which may hold "-" and "--"):
//
//   - the cluster name ends at the first "--" (a cluster name holds no "--"
//     and does not end with "-": CheckClusterName);
//   - "_" separates every pair of user-chosen parts (namespace, name, class,
//     port name): no Kubernetes name holds one;
//   - the upper-case marks (-L7, -GW, -TCP-80, -R0, -TLS, Shared) say what an
//     object is: no Kubernetes name holds an upper-case letter.
//
// Up to version 0.x the parts were joined with "-" (LegacyName), so that
// the Services team-a/x and team/a-x had one load balancer.
const (
	// nameSeparator joins the cluster name to the rest, as AKO does.
	nameSeparator = "--"
	// partSeparator joins the user-chosen parts of a name.
	partSeparator = "_"
)

// MaxClusterNameLength keeps object names short enough for the load
// balancers once namespace and Service name are added.
const MaxClusterNameLength = 32

var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// CheckClusterName checks a cluster name: lower-case letters, digits and
// "-", at most MaxClusterNameLength, starting and ending with a letter or
// digit, without "--". So the cluster name of an object name is the part
// before its first "--", and no cluster owns another's objects (OwnedBy:
// with clusters "a" and "a--b", or "a" and "a-", it would).
func CheckClusterName(name string) error {
	switch {
	case name == "":
		return errors.New("required")
	case len(name) > MaxClusterNameLength:
		return fmt.Errorf("%q is %d characters long, at most %d", name, len(name), MaxClusterNameLength)
	case !clusterNameRE.MatchString(name):
		return fmt.Errorf("%q must consist of lowercase letters, digits and '-', and start and end with a letter or digit", name)
	case strings.Contains(name, nameSeparator):
		// "--" ends the cluster name in object names (OwnedBy).
		return fmt.Errorf("%q must not contain %q", name, nameSeparator)
	}
	return nil
}

// LoadBalancerName is the name of the virtual service of a Service:
// <clusterName>--<namespace>_<service>. It is the one place that decides it.
func LoadBalancerName(clusterName, namespace, service string) string {
	return clusterName + nameSeparator + namespace + partSeparator + service
}

// PoolName is the name of a listener's pool: <lbName>-<PROTO>-<port>.
func PoolName(lbName string, protocol Protocol, port int32) string {
	return fmt.Sprintf("%s-%s-%d", lbName, strings.ToUpper(string(protocol)), port)
}

// OwnedBy reports whether an object name belongs to clusterName, a name
// CheckClusterName accepts.
func OwnedBy(clusterName, name string) bool {
	return strings.HasPrefix(name, clusterName+nameSeparator)
}

// shortHashLength is the number of hex digits of the SHA-256 that Shorten
// appends: 128 bits, so that no one can find another name that shortens to
// a given one (with 40 bits, a few hours of a GPU could).
const shortHashLength = 32

// ShortenedSuffixLength is what Shorten appends to the part of a name it
// keeps: "-H" and the hash.
const ShortenedSuffixLength = 2 + shortHashLength

// Shorten returns name unchanged when it fits in max bytes; otherwise it cuts
// it and appends "-H" and 32 hex digits of the SHA-256 of the whole name, so
// the result is stable and distinct names stay distinct. A name that was not
// shortened never ends with the suffix: none has an upper-case letter
// followed by 32 lower-case hex digits.
func Shorten(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-H" + hex.EncodeToString(sum[:])[:shortHashLength]
	keep := max - len(suffix)
	if keep < 0 {
		keep = 0
	}
	return name[:keep] + suffix
}

// l7Suffix marks the load balancer of an Ingress. It is upper case, which no
// Kubernetes name can be, so an Ingress and a Service of the same name never
// share a load balancer name, nor can an L7 pool take an L4 pool's name.
const l7Suffix = "-L7"

// IngressLoadBalancerName is the name of the load balancer of an Ingress
// that has its own VIP: <clusterName>--<namespace>_<ingress>-L7.
func IngressLoadBalancerName(clusterName, namespace, ingress string) string {
	return clusterName + nameSeparator + namespace + partSeparator + ingress + l7Suffix
}

// SharedIngressLoadBalancerName is the name of the load balancer that all
// Ingresses of an IngressClass share when they share one VIP:
// <clusterName>--Shared-L7-<class>, as AKO names its shared virtual services.
// No other load balancer name starts with an upper-case letter after the
// cluster name.
func SharedIngressLoadBalancerName(clusterName, class string) string {
	return clusterName + nameSeparator + "Shared" + l7Suffix + "-" + class
}

// IngressPoolName is the name of the pool of an L7 load balancer that serves
// one port of a Service: <lbName>_<namespace>_<service>_<port>, where port is
// the Service port's number, or its name when the Service does not resolve
// it. It starts with the load balancer's name, as L4 pool names do.
func IngressPoolName(lbName, namespace, service, port string) string {
	return lbName + partSeparator + namespace + partSeparator + service + partSeparator + port
}

// ListenerName is the name of the objects a provider makes per listener of
// an L7 load balancer (BIG-IP virtual servers): <lbName>-<PROTO>-<port>, the
// scheme of L4 pool names.
func ListenerName(lbName string, protocol Protocol, port int32) string {
	return PoolName(lbName, protocol, port)
}

// CertificateName is the name of the certificate objects a provider makes for
// a TLS Secret ("namespace/name") of an L7 load balancer:
// <lbName>_<namespace>_<secret>-TLS. The upper-case suffix keeps it apart
// from pool names.
func CertificateName(lbName, secret string) string {
	return lbName + partSeparator + strings.Replace(secret, "/", partSeparator, 1) + "-TLS"
}

// gatewaySuffix marks the load balancer of a Gateway API Gateway. Upper
// case, like l7Suffix, so it cannot be a Service's or an Ingress's.
const gatewaySuffix = "-GW"

// GatewayLoadBalancerName is the name of the load balancer of a Gateway
// API Gateway: <clusterName>--<namespace>_<gateway>-GW.
func GatewayLoadBalancerName(clusterName, namespace, gateway string) string {
	return clusterName + nameSeparator + namespace + partSeparator + gateway + gatewaySuffix
}

// GatewayPoolName is the name of the pool of one rule of an HTTPRoute on a
// Gateway's load balancer: <lbName>_<namespace>_<route>-R<rule index>. The
// backendRefs of the rule share it, weighted.
func GatewayPoolName(lbName, namespace, route string, rule int) string {
	return GatewayRoutePoolName(lbName, "HTTPRoute", namespace, route, rule)
}

// gatewayRouteMarks are the upper-case letters that tell apart the pools
// of the route kinds whose pools a Gateway's load balancer shares: no
// Kubernetes name holds one, so two routes of different kinds and the same
// name never share a pool.
var gatewayRouteMarks = map[string]string{"HTTPRoute": "R", "GRPCRoute": "G", "TLSRoute": "T"}

// GatewayRoutePoolName is the name of the pool of one rule of a route of
// kind (HTTPRoute, GRPCRoute, TLSRoute) on a Gateway's load balancer:
// <lbName>_<namespace>_<route>-<mark><rule index>, the mark R, G or T. The
// TCP and UDP listeners of a Gateway have a pool of their own, PoolName.
func GatewayRoutePoolName(lbName, kind, namespace, route string, rule int) string {
	mark, ok := gatewayRouteMarks[kind]
	if !ok {
		mark = "X" + kind
	}
	return fmt.Sprintf("%s%s%s%s%s-%s%d", lbName, partSeparator, namespace, partSeparator, route, mark, rule)
}

// GatewayRouteBackendPoolName is the name of the pool of backendRef ref of
// rule rule of a route, when the rule splits its requests between its
// backendRefs (Rule.Backends): GatewayRoutePoolName's with B<ref>, an
// upper-case mark that no Kubernetes name holds, so that it is no rule's.
func GatewayRouteBackendPoolName(lbName, kind, namespace, route string, rule, ref int) string {
	return fmt.Sprintf("%sB%d", GatewayRoutePoolName(lbName, kind, namespace, route, rule), ref)
}

// LegacyName is the name the load balancer of lb had up to version 0.x,
// which joined namespace and name with "-" (<clusterName>--<namespace>-<name>,
// with -L7 for an Ingress's and -GW for a Gateway's), or "" when it had no
// other: the shared load balancer of an IngressClass kept its name. That
// name was ambiguous (the Services team-a/x and team/a-x had one): a
// provider takes a load balancer of that name over (renames it, keeping its
// VIP) only when the owner it records is lb's (SameOwner).
func LegacyName(clusterName string, lb *LoadBalancer) string {
	old, _ := ownerNames(clusterName, lb)
	if old == lb.Name {
		return ""
	}
	return old
}

// RenamedTo is the name lb, a load balancer a provider lists, is taken over
// under: the name its owner's load balancer has now, when lb still has the
// LegacyName; "" otherwise. Garbage collection keeps such a load balancer
// while its owner claims the new name: the owner's next Ensure takes it
// over, VIP and all.
func RenamedTo(clusterName string, lb *LoadBalancer) string {
	old, current := ownerNames(clusterName, lb)
	if old == "" || old != lb.Name || current == lb.Name {
		return ""
	}
	return current
}

// ownerNames are the names of the load balancer of lb's owner (its
// Gateway, Ingress or Service) up to 0.x and now; "" for a load balancer
// without an owner of its own (the shared one of an IngressClass).
func ownerNames(clusterName string, lb *LoadBalancer) (old, current string) {
	var owner, suffix string
	name := LoadBalancerName
	switch {
	case lb.Gateway != "":
		owner, suffix, name = lb.Gateway, gatewaySuffix, GatewayLoadBalancerName
	case lb.Ingress != "":
		owner, suffix, name = lb.Ingress, l7Suffix, IngressLoadBalancerName
	case !lb.IsL7() && lb.Service != "":
		owner = lb.Service
	default:
		return "", ""
	}
	ns, n, ok := strings.Cut(owner, "/")
	if !ok {
		return "", ""
	}
	return clusterName + nameSeparator + ns + "-" + n + suffix, name(clusterName, ns, n)
}

// SameOwner reports whether two load balancers belong to the same object:
// the same kind, Service, Ingress and Gateway. A provider takes over a load
// balancer under lb's LegacyName only when its recorded owner is lb's.
func SameOwner(a, b *LoadBalancer) bool {
	return a.IsL7() == b.IsL7() && a.Service == b.Service && a.Ingress == b.Ingress && a.Gateway == b.Gateway
}
