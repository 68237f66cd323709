// Package api is the wire format of npl-edge's HTTPS API, the one place
// that both npl-edge and the haproxy provider of npl-lbsync read it from.
//
//	PUT    /v1/clusters/{cluster}/loadbalancers/{name}  body: LoadBalancerRequest with VIPs = [vip]       -> EnsureResult
//	DELETE /v1/clusters/{cluster}/loadbalancers/{name}                                                -> DeleteResult
//	GET    /v1/clusters/{cluster}/loadbalancers/{name}  what HAProxy serves of it                      -> lbmodel.LoadBalancer (404 when none)
//	GET    /v1/clusters/{cluster}/loadbalancers         what HAProxy serves of the cluster             -> List
//	GET    /v1/status                                                                                 -> Status
//
// A PUT states the whole desired load balancer: it is idempotent, and one
// that changes nothing writes nothing. Errors are an Error body with a 4xx
// or 5xx status. A client may call the paths of a cluster only when its
// certificate names the cluster (ClusterURI); any other is answered 403.
package api

import (
	"crypto/x509"
	"net/url"
)

// Version is the version of the API, the first element of every path.
const Version = "v1"

// LoadBalancersPath is the path of the load balancers of a cluster.
func LoadBalancersPath(cluster string) string {
	return "/" + Version + "/clusters/" + url.PathEscape(cluster) + "/loadbalancers"
}

// LoadBalancerPath is the path of one load balancer of a cluster.
func LoadBalancerPath(cluster, name string) string {
	return LoadBalancersPath(cluster) + "/" + url.PathEscape(name)
}

// StatusPath is the path of the edge's status.
const StatusPath = "/" + Version + "/status"

// ClusterURI is the URI SAN a client certificate holds for each cluster
// whose load balancers its holder may read and change:
// npl://cluster/<cluster>. One certificate may name several clusters.
func ClusterURI(cluster string) *url.URL {
	return &url.URL{Scheme: "npl", Host: "cluster", Path: "/" + cluster}
}

// NamesCluster reports whether certificate cert holds the ClusterURI of
// cluster.
func NamesCluster(cert *x509.Certificate, cluster string) bool {
	want := ClusterURI(cluster)
	for _, u := range cert.URIs {
		if u.Scheme == want.Scheme && u.Host == want.Host && u.Path == want.Path && u.User == nil &&
			u.RawQuery == "" && u.Fragment == "" && u.Opaque == "" {
			return true
		}
	}
	return false
}

// LoadBalancerRequest is the body of a PUT: the load balancer model, and
// for an L7 one with HTTPS the certificates and keys of its TLS Secrets,
// which the model itself never serialises. The edge writes them into its
// own directory (mode 0600) for HAProxy; it never answers or logs them.
type LoadBalancerRequest struct {
	LoadBalancer
	Certificates []Certificate `json:"certificates,omitempty"`
	// Replaces is the name the load balancer had before, when it is being
	// renamed (lbmodel.LegacyName: the names of npl-lbsync 0.x). An edge
	// that serves a load balancer of that name of the same cluster and the
	// same owner (Service, Ingress, Gateway) swaps it for this one in one
	// change, so that VIP and ports pass from one to the other without a
	// refused connection; one of another owner it leaves alone.
	Replaces string `json:"replaces,omitempty"`
}

// Certificate is the PEM certificate chain and key of one TLS Secret of the
// model (HTTP.TLS[].Secret).
type Certificate struct {
	Secret  string `json:"secret"`
	CertPEM string `json:"certPEM"`
	KeyPEM  string `json:"keyPEM"`
}

// EnsureResult is the answer to a PUT.
type EnsureResult struct {
	// Changed is true when the edge changed anything (configuration or
	// runtime state) for the request.
	Changed bool `json:"changed"`
	// Reloaded is true when the change needed a reload of HAProxy (new or
	// changed listeners); member changes never do.
	Reloaded bool `json:"reloaded"`
	// Unsupported lists the listeners the edge cannot serve, as
	// "UDP/53" when it serves no UDP (Status.UDP "off") or none on the
	// VIP's IP family; the others are served.
	Unsupported []string `json:"unsupported,omitempty"`
	// Reason says why Unsupported are not served (an edge before this
	// field: ReasonNoUDP).
	Reason string `json:"reason,omitempty"`
}

// ReasonNoUDP is the Reason of the UDP listeners of an edge that serves
// no UDP.
const ReasonNoUDP = "npl-edge serves no UDP (--udp is off, or nftables does not work there)"

// DeleteResult is the answer to a DELETE.
type DeleteResult struct {
	// Deleted is false when there was nothing to delete.
	Deleted bool `json:"deleted"`
}

// List is the answer to the GET of a cluster's load balancers.
type List struct {
	LoadBalancers []LoadBalancer `json:"loadBalancers"`
}

// Status is what the edge reports of itself and of HAProxy.
type Status struct {
	// MasterPID and WorkerPID are HAProxy's master and current worker.
	MasterPID int `json:"masterPID"`
	WorkerPID int `json:"workerPID"`
	// Reloads counts the reloads the edge made; Starts the times it
	// started HAProxy (more than one after HAProxy died).
	Reloads int64 `json:"reloads"`
	Starts  int64 `json:"starts"`
	// Writes counts the PUTs and DELETEs that changed something;
	// RuntimeCommands the runtime API commands that changed a server.
	Writes          int64 `json:"writes"`
	RuntimeCommands int64 `json:"runtimeCommands"`
	// UDP says how the edge serves UDP listeners: "nftables" (its table
	// inet npl-edge) or "off" (they are reported as unsupported).
	UDP string `json:"udp"`
}

// Error is the body of an error answer.
type Error struct {
	// Error is the message; it names the object concerned.
	Error string `json:"error"`
}
