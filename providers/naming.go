package providers

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
