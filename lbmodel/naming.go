package lbmodel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// nameSeparator joins the cluster name to the rest, as AKO does, so that a
// cluster's objects share a prefix that cannot be mistaken for another's.
const nameSeparator = "--"

// LoadBalancerName is the name of the virtual service of a Service:
// <clusterName>--<namespace>-<service>. It is the one place that decides it.
func LoadBalancerName(clusterName, namespace, service string) string {
	return clusterName + nameSeparator + namespace + "-" + service
}

// PoolName is the name of a listener's pool: <lbName>-<PROTO>-<port>.
func PoolName(lbName string, protocol Protocol, port int32) string {
	return fmt.Sprintf("%s-%s-%d", lbName, strings.ToUpper(string(protocol)), port)
}

// OwnedBy reports whether an object name belongs to clusterName.
func OwnedBy(clusterName, name string) bool {
	return strings.HasPrefix(name, clusterName+nameSeparator)
}

// Shorten returns name unchanged when it fits in max bytes; otherwise it cuts
// it and appends "-" and 10 hex digits of the SHA-256 of the whole name, so the
// result is stable and distinct names stay distinct.
func Shorten(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
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
// that has its own VIP: <clusterName>--<namespace>-<ingress>-L7.
func IngressLoadBalancerName(clusterName, namespace, ingress string) string {
	return clusterName + nameSeparator + namespace + "-" + ingress + l7Suffix
}

// SharedIngressLoadBalancerName is the name of the load balancer that all
// Ingresses of an IngressClass share when they share one VIP:
// <clusterName>--Shared-L7-<class>, as AKO names its shared virtual services.
func SharedIngressLoadBalancerName(clusterName, class string) string {
	return clusterName + nameSeparator + "Shared" + l7Suffix + "-" + class
}

// IngressPoolName is the name of the pool of an L7 load balancer that serves
// one port of a Service: <lbName>-<namespace>-<service>-<port>, where port is
// the Service port's number, or its name when the Service does not resolve
// it. It starts with the load balancer's name, as L4 pool names do.
func IngressPoolName(lbName, namespace, service, port string) string {
	return lbName + "-" + namespace + "-" + service + "-" + port
}

// ListenerName is the name of the objects a provider makes per listener of
// an L7 load balancer (BIG-IP virtual servers): <lbName>-<PROTO>-<port>, the
// scheme of L4 pool names.
func ListenerName(lbName string, protocol Protocol, port int32) string {
	return PoolName(lbName, protocol, port)
}

// CertificateName is the name of the certificate objects a provider makes for
// a TLS Secret ("namespace/name") of an L7 load balancer:
// <lbName>-<namespace>-<secret>-TLS. The upper-case suffix keeps it apart
// from pool names.
func CertificateName(lbName, secret string) string {
	return lbName + "-" + strings.ReplaceAll(secret, "/", "-") + "-TLS"
}

// gatewaySuffix marks the load balancer of a Gateway API Gateway. Upper
// case, like l7Suffix, so it cannot be a Service's or an Ingress's.
const gatewaySuffix = "-GW"

// GatewayLoadBalancerName is the name of the load balancer of a Gateway
// API Gateway: <clusterName>--<namespace>-<gateway>-GW.
func GatewayLoadBalancerName(clusterName, namespace, gateway string) string {
	return clusterName + nameSeparator + namespace + "-" + gateway + gatewaySuffix
}

// GatewayPoolName is the name of the pool of one rule of an HTTPRoute on a
// Gateway's load balancer: <lbName>-<namespace>-<route>-R<rule index>. The
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
// <lbName>-<namespace>-<route>-<mark><rule index>, the mark R, G or T. The
// TCP and UDP listeners of a Gateway have a pool of their own, PoolName.
func GatewayRoutePoolName(lbName, kind, namespace, route string, rule int) string {
	mark, ok := gatewayRouteMarks[kind]
	if !ok {
		mark = "X" + kind
	}
	return fmt.Sprintf("%s-%s-%s-%s%d", lbName, namespace, route, mark, rule)
}
