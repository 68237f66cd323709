package contract

// The keys npl's own components leave on objects, all under npl.io/.
const (
	// AutoAnnotatedKey marks a Service whose NodePortLocal opt-in npl-lbsync
	// added, so that it removes only what it added.
	AutoAnnotatedKey = "npl.io/auto-annotated"
	// LoadBalancerIPKey is the Service (or Ingress) annotation that requests
	// a VIP when spec.loadBalancerIP is not set.
	LoadBalancerIPKey = "npl.io/load-balancer-ip"
	// SyncedConditionType is the Service condition that reports whether the
	// load balancer matches the Service.
	SyncedConditionType = "npl.io/LoadBalancerSynced"
	// CleanupFinalizer keeps a Service or Ingress until its load balancer is
	// deleted.
	CleanupFinalizer = "npl.io/load-balancer-cleanup"
	// ClaimedByKey names, on a Service or Ingress, the npl-lbsync
	// installation (its clusterName) that holds a load balancer for it, so
	// that several installations serving different classes never undo each
	// other's work.
	ClaimedByKey = "npl.io/claimed-by"
	// RegisteredReadinessGate is the Pod readiness gate that turns true once
	// the Pod is a member of its load balancer pools.
	RegisteredReadinessGate = "npl.io/lb-registered"
)
