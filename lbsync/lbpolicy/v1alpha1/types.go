// Package v1alpha1 is the LoadBalancerPolicy API, group npl.io, version
// v1alpha1: the Go types of the custom resource whose CRD the chart ships
// (charts/npl/files/npl.io_loadbalancerpolicies.yaml, which package charts
// embeds for the tests), with their DeepCopy methods. A policy sets what
// neither Kubernetes nor Gateway API expresses of the pools of the Services
// and Gateways it targets (health check, balancing algorithm, persistence,
// slow start, drain, connection limit). Package lbpolicy merges, checks and
// converts them into the model.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LoadBalancerPolicy sets the traffic policy of the load balancer pools of
// the Services and Gateways of its namespace that it targets.
type LoadBalancerPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LoadBalancerPolicySpec `json:"spec"`
	Status PolicyStatus           `json:"status,omitempty"`
}

// LoadBalancerPolicyList is a list of LoadBalancerPolicies.
type LoadBalancerPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []LoadBalancerPolicy `json:"items"`
}

// LoadBalancerPolicySpec is what a policy targets and what it sets.
type LoadBalancerPolicySpec struct {
	// TargetRefs are the Services and Gateways of the policy's own
	// namespace whose pools it sets: a policy never reaches another
	// namespace. A Service's policy sets every pool of its load balancer,
	// the pools of Ingress rules that send to it and the pools of Gateway
	// route rules whose only backend it is; a Gateway's sets every pool of
	// the Gateway's load balancer.
	TargetRefs []LocalPolicyTargetReference `json:"targetRefs"`

	TrafficPolicy `json:",inline"`
}

// LocalPolicyTargetReference names an object of the policy's namespace,
// as Gateway API's policy attachment (GEP-713) does.
type LocalPolicyTargetReference struct {
	// Group is "" for a Service, gateway.networking.k8s.io for a Gateway.
	Group string `json:"group"`
	// Kind is Service or Gateway.
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// TrafficPolicy is what a policy sets. Every field is optional: an unset
// field leaves the load balancer's default, or the value of another policy
// of the same target.
type TrafficPolicy struct {
	// Persistence keeps a client on the Pod it reached first.
	Persistence *Persistence `json:"persistence,omitempty"`
	// HealthCheck replaces the load balancer's default check of each Pod.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// Algorithm picks the Pod of a new connection or request.
	Algorithm *Algorithm `json:"algorithm,omitempty"`
	// SlowStartSeconds ramps the share of a Pod that comes up from nothing
	// to its full share over this many seconds (0-3600; 0: at once).
	SlowStartSeconds *int32 `json:"slowStartSeconds,omitempty"`
	// DrainSeconds is how long the member of a terminating Pod stays in its
	// pool, disabled, so that its connections end on their own (0-86400);
	// it overrides npl-lbsync's drainSeconds.
	DrainSeconds *int32 `json:"drainSeconds,omitempty"`
	// MaxConnectionsPerMember caps the connections the load balancer opens
	// to each Pod (0-1000000; 0: no cap).
	MaxConnectionsPerMember *int32 `json:"maxConnectionsPerMember,omitempty"`
}

// Persistence types.
const (
	PersistenceSourceIP = "SourceIP"
	PersistenceCookie   = "Cookie"
	PersistenceHeader   = "Header"
)

// Persistence keeps a client on the Pod it reached first: by its address
// (SourceIP), or, in the pools of HTTP rules, by a cookie the load balancer
// sets (Cookie) or the value of a request header (Header).
type Persistence struct {
	Type string `json:"type"`
	// Name is the cookie's or the header's name.
	Name string `json:"name,omitempty"`
	// TimeoutSeconds is how long a session lasts (0-31536000; 0: the load
	// balancer's default): for SourceIP the time a client may stay idle,
	// for a cookie or a header its whole life.
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
	// IdleTimeoutSeconds ends a cookie or header session idle this long
	// (0-31536000; 0: never).
	IdleTimeoutSeconds *int32 `json:"idleTimeoutSeconds,omitempty"`
}

// Health check types.
const (
	HealthCheckTCP  = "TCP"
	HealthCheckHTTP = "HTTP"
)

// HealthCheck is the active check of each Pod: a TCP connect, or an HTTP
// GET of Path that must answer one of ExpectedStatuses.
type HealthCheck struct {
	Type string `json:"type"`
	// Path is the request path of an HTTP check; it starts with "/".
	Path string `json:"path,omitempty"`
	// Host is the Host header of an HTTP check; empty: the Pod's address.
	Host string `json:"host,omitempty"`
	// ExpectedStatuses are the answers of an HTTP check that mean healthy;
	// empty: 200-399.
	ExpectedStatuses []StatusRange `json:"expectedStatuses,omitempty"`
	// IntervalSeconds between two checks (1-3600), TimeoutSeconds a check
	// may take (1-3600, at most the interval); unset: the load balancer's
	// defaults.
	IntervalSeconds *int32 `json:"intervalSeconds,omitempty"`
	TimeoutSeconds  *int32 `json:"timeoutSeconds,omitempty"`
	// HealthyThreshold successes bring a Pod back, UnhealthyThreshold
	// failures take it out (1-10 each).
	HealthyThreshold   *int32 `json:"healthyThreshold,omitempty"`
	UnhealthyThreshold *int32 `json:"unhealthyThreshold,omitempty"`
}

// StatusRange is the HTTP statuses from Min to Max, both included; Max
// unset is Min alone.
type StatusRange struct {
	Min int32  `json:"min"`
	Max *int32 `json:"max,omitempty"`
}

// Algorithm types, and what a consistent hash is computed over.
const (
	AlgorithmRoundRobin       = "RoundRobin"
	AlgorithmLeastConnections = "LeastConnections"
	AlgorithmConsistentHash   = "ConsistentHash"
	HashOnSourceIP            = "SourceIP"
	HashOnHeader              = "Header"
	HashOnCookie              = "Cookie"
)

// Algorithm picks the Pod of a new connection or request: in turn
// (RoundRobin), the one with the fewest connections (LeastConnections), or
// the one a hash of HashOn maps to (ConsistentHash), so that the same
// client address, header or cookie value reaches the same Pod and a change
// of the Pods moves as few of them as possible.
type Algorithm struct {
	Type string `json:"type"`
	// HashOn is SourceIP, or in the pools of HTTP rules Header or Cookie;
	// for ConsistentHash only.
	HashOn string `json:"hashOn,omitempty"`
	// HashName names the header or the cookie.
	HashName string `json:"hashName,omitempty"`
}

// PolicyStatus is the status of a policy: one entry per target and
// controller, as Gateway API's policy attachment (GEP-713) has it.
type PolicyStatus struct {
	Ancestors []PolicyAncestorStatus `json:"ancestors,omitempty"`
}

// PolicyAncestorStatus is what one controller says of the policy on one
// target.
type PolicyAncestorStatus struct {
	// AncestorRef is the target.
	AncestorRef ObjectReference `json:"ancestorRef"`
	// ControllerName is the controller that wrote the entry.
	ControllerName string `json:"controllerName"`
	// Conditions hold Accepted, with the reason Accepted, Conflicted,
	// Invalid or TargetNotFound.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ObjectReference names an object.
type ObjectReference struct {
	Group     string `json:"group"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}
