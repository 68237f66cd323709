// Package claim decides which Services npl-lbsync serves and builds every
// mark it leaves on Services and Ingresses (the opt-in it adds, the claim,
// the status and the condition, with the npl.io keys of package contract)
// as merge patches that the controller and uninstall share. It is pure:
// objects in, answers out.
package claim

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
)

// ClaimConfig is the part of the configuration that decides ownership.
type ClaimConfig struct {
	// LoadBalancerClass is the spec.loadBalancerClass we serve.
	LoadBalancerClass string
	// DefaultLoadBalancer makes Services with no class ours too.
	DefaultLoadBalancer bool
}

// Ours reports whether svc is a LoadBalancer Service that npl-lbsync serves:
// its class is cfg.LoadBalancerClass, or it has no class and
// cfg.DefaultLoadBalancer is set.
//
// Ours looks at the spec only, not at deletionTimestamp: a Service being
// deleted is still ours, so the controller deletes its load balancer and then
// drops contract.CleanupFinalizer. A Service that stopped being ours (its type changed)
// but still carries contract.CleanupFinalizer must be cleaned up as well; see
// Releasable.
func Ours(svc *corev1.Service, cfg ClaimConfig) bool {
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	class := svc.Spec.LoadBalancerClass
	if class == nil || *class == "" {
		return cfg.DefaultLoadBalancer
	}
	return *class == cfg.LoadBalancerClass
}

// AnnotationPatch returns the JSON merge patch that makes svc's NodePortLocal
// opt-in match want, and whether one is needed.
//
// With want, a Service that lacks nodeportlocal.antrea.io/enabled: "true"
// gets it together with contract.AutoAnnotatedKey; one that already has it (the
// user's own opt-in or ours) is left alone and never marked as ours. Without
// want, both keys are removed only when contract.AutoAnnotatedKey is "true": a user's
// own opt-in is never removed. A value other than "true" (for example
// "false") does not opt in; with want it is overwritten, and removed later as
// ours.
func AnnotationPatch(svc *corev1.Service, want bool) (patch []byte, changed bool) {
	if svc == nil || !optInNeeded(svc.Annotations, want) {
		return nil, false
	}
	return mustJSON(map[string]any{"metadata": map[string]any{"annotations": optInAnnotations(want)}}), true
}

// optInNeeded reports whether annotations must change for the opt-in we
// manage to be as wanted: added where the Service is not opted in, removed
// only where we added it.
func optInNeeded(annotations map[string]string, want bool) bool {
	if want {
		return !contract.ServiceEnabled(annotations)
	}
	return annotations[contract.AutoAnnotatedKey] == "true"
}

// optInAnnotations are the annotation values of a merge patch that adds
// (want) or removes the opt-in we manage; in a merge patch, null deletes.
func optInAnnotations(want bool) map[string]any {
	if want {
		return map[string]any{contract.ServiceEnabledKey: "true", contract.AutoAnnotatedKey: "true"}
	}
	return map[string]any{contract.ServiceEnabledKey: nil, contract.AutoAnnotatedKey: nil}
}
