package claim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/contract"
)

// This file owns every mark npl-lbsync leaves on an object, as JSON merge
// patches: the claim (finalizer and claim record), the load balancer status
// and the npl.io/LoadBalancerSynced condition. The controller writes them and
// uninstall removes them with the same builders, so the two cannot drift.
// Each builder returns nil when the object already is as asked.
//
// Patches that change finalizers carry the object's resourceVersion: a merge
// patch replaces the whole list, so a concurrent change must make it fail
// (409) rather than drop another controller's finalizer.

// HasFinalizer reports whether obj carries contract.CleanupFinalizer.
func HasFinalizer(obj metav1.Object) bool {
	return !isNil(obj) && slices.Contains(obj.GetFinalizers(), contract.CleanupFinalizer)
}

// isNil also catches a nil *Service or *Ingress passed as metav1.Object.
func isNil(obj metav1.Object) bool {
	return obj == nil || reflect.ValueOf(obj).IsNil()
}

// Releasable reports whether the installation clusterName holds (or may
// hold) a load balancer for obj (a Service or an Ingress) that it must clean
// up once obj is no longer its own: it claimed it, or obj carries our
// finalizer with no claim recorded (the claim annotation was removed by hand).
func Releasable(obj metav1.Object, clusterName string) bool {
	if isNil(obj) {
		return false
	}
	owner, recorded := obj.GetAnnotations()[contract.ClaimedByKey]
	if recorded {
		return owner == clusterName
	}
	return HasFinalizer(obj)
}

// ClaimedByOther reports whether another installation than clusterName
// recorded its claim on obj: such an object is never ours to change.
func ClaimedByOther(obj metav1.Object, clusterName string) bool {
	owner := obj.GetAnnotations()[contract.ClaimedByKey]
	return owner != "" && owner != clusterName
}

// ClaimPatch makes obj's deletion wait for its load balancer (finalizer) and
// records clusterName as its owner; with optIn it also adds the NodePortLocal
// opt-in (for Services, as AnnotationPatch would). nil when nothing is
// missing.
func ClaimPatch(obj metav1.Object, clusterName string, optIn bool) []byte {
	meta := map[string]any{}
	annotations := map[string]any{}
	if !HasFinalizer(obj) {
		meta["finalizers"] = append(slices.Clone(obj.GetFinalizers()), contract.CleanupFinalizer)
	}
	if obj.GetAnnotations()[contract.ClaimedByKey] != clusterName {
		annotations[contract.ClaimedByKey] = clusterName
	}
	if optIn && optInNeeded(obj.GetAnnotations(), true) {
		for k, v := range optInAnnotations(true) {
			annotations[k] = v
		}
	}
	if len(meta) == 0 && len(annotations) == 0 {
		return nil
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	meta["resourceVersion"] = obj.GetResourceVersion()
	return mustJSON(map[string]any{"metadata": meta})
}

// WithClaim returns one patch for the Service status subresource that
// carries both status, a status patch built here, and claimPatch
// (ClaimPatch's metadata): the API server resets only the spec of a Service
// written through status (k8s.io/kubernetes pkg/registry/core/service,
// serviceStatusStrategy), so one request claims the Service and writes its
// status. A nil claimPatch returns status; a nil status returns nil (no
// status write to carry the claim).
func WithClaim(status, claimPatch []byte) []byte {
	if status == nil || claimPatch == nil {
		return status
	}
	var s, c map[string]any
	if err := json.Unmarshal(status, &s); err != nil {
		panic(fmt.Sprintf("claim: status patch: %v", err)) // built here: valid JSON
	}
	if err := json.Unmarshal(claimPatch, &c); err != nil {
		panic(fmt.Sprintf("claim: claim patch: %v", err))
	}
	meta, _ := s["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	for k, v := range c["metadata"].(map[string]any) {
		meta[k] = v
	}
	s["metadata"] = meta
	return mustJSON(s)
}

// ReleasePatch removes the finalizer and the claim record from obj, keeping
// every other finalizer; nil when obj carries neither. It is the last step
// of a release: without the finalizer, a deleted object goes.
func ReleasePatch(obj metav1.Object) []byte {
	_, recorded := obj.GetAnnotations()[contract.ClaimedByKey]
	if !HasFinalizer(obj) && !recorded {
		return nil
	}
	rest := slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == contract.CleanupFinalizer })
	meta := map[string]any{"finalizers": rest, "resourceVersion": obj.GetResourceVersion()}
	if recorded {
		meta["annotations"] = map[string]any{contract.ClaimedByKey: nil}
	}
	return mustJSON(map[string]any{"metadata": meta})
}

// ServiceStatusPatch sets the Service's load balancer ingress to vips and
// its npl.io/LoadBalancerSynced condition to cond, for the status
// subresource; nil when neither changes. A nil cond leaves the conditions
// alone; nil vips leave the ingress alone (use ClearServiceStatusPatch to
// drop it).
func ServiceStatusPatch(svc *corev1.Service, vips []string, cond *Condition) []byte {
	status := map[string]any{}
	if vips != nil {
		ingress := make([]corev1.LoadBalancerIngress, 0, len(vips))
		for _, v := range vips {
			ingress = append(ingress, corev1.LoadBalancerIngress{IP: v})
		}
		if !slices.EqualFunc(svc.Status.LoadBalancer.Ingress, ingress, sameServiceIngress) {
			status["loadBalancer"] = map[string]any{"ingress": ingress}
		}
	}
	if cond != nil {
		if conditions, changed := cond.apply(svc.Status.Conditions, svc.Generation); changed {
			status["conditions"] = conditions
		}
	}
	if len(status) == 0 {
		return nil
	}
	return mustJSON(map[string]any{"status": status})
}

// ClearServiceStatusPatch removes the npl.io/LoadBalancerSynced condition
// and, with ingress, the load balancer ingress, for the status subresource;
// nil when there is nothing to remove. Pass ingress only for a Service
// npl-lbsync served: another controller's Service keeps its ingress. The
// resourceVersion makes the patch fail on a concurrent change rather than
// drop another writer's condition.
func ClearServiceStatusPatch(svc *corev1.Service, ingress bool) []byte {
	status := map[string]any{}
	if slices.ContainsFunc(svc.Status.Conditions, isSynced) {
		var rest []metav1.Condition
		if kept := slices.DeleteFunc(slices.Clone(svc.Status.Conditions), isSynced); len(kept) > 0 {
			rest = kept
		}
		status["conditions"] = rest
	}
	if ingress && len(svc.Status.LoadBalancer.Ingress) > 0 {
		status["loadBalancer"] = map[string]any{"ingress": nil}
	}
	if len(status) == 0 {
		return nil
	}
	return mustJSON(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"status":   status,
	})
}

// IngressStatusPatch sets the Ingress's load balancer ingress to vips (none
// clears it), for the status subresource; nil when it already is so.
func IngressStatusPatch(ing *networkingv1.Ingress, vips []string) []byte {
	in := make([]networkingv1.IngressLoadBalancerIngress, 0, len(vips))
	for _, v := range vips {
		in = append(in, networkingv1.IngressLoadBalancerIngress{IP: v})
	}
	if slices.EqualFunc(ing.Status.LoadBalancer.Ingress, in, func(a, b networkingv1.IngressLoadBalancerIngress) bool {
		return a.IP == b.IP && a.Hostname == b.Hostname
	}) {
		return nil
	}
	return mustJSON(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": in}}})
}

// Condition is the npl.io/LoadBalancerSynced condition npl-lbsync sets.
type Condition struct {
	OK      bool
	Reason  string
	Message string
}

func isSynced(c metav1.Condition) bool { return c.Type == contract.SyncedConditionType }

// apply returns conditions with the synced condition set to c, and whether
// that changed them. The transition time moves only when the status does.
func (c Condition) apply(conditions []metav1.Condition, generation int64) ([]metav1.Condition, bool) {
	status := metav1.ConditionFalse
	if c.OK {
		status = metav1.ConditionTrue
	}
	out := slices.Clone(conditions)
	next := metav1.Condition{
		Type: contract.SyncedConditionType, Status: status, Reason: c.Reason, Message: c.Message,
		ObservedGeneration: generation, LastTransitionTime: metav1.Now(),
	}
	i := slices.IndexFunc(out, isSynced)
	if i < 0 {
		return append(out, next), true
	}
	cur := out[i]
	if cur.Status == status && cur.Reason == c.Reason && cur.Message == c.Message && cur.ObservedGeneration == generation {
		return out, false
	}
	if cur.Status == status {
		next.LastTransitionTime = cur.LastTransitionTime
	}
	out[i] = next
	return out, true
}

func sameServiceIngress(a, b corev1.LoadBalancerIngress) bool {
	return a.IP == b.IP && a.Hostname == b.Hostname
}

// mustJSON marshals the maps of strings, lists and API types built here,
// which cannot fail.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("claim: marshal patch: %v", err))
	}
	return b
}
