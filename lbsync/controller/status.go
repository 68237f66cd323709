package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/agent/annotation"
	"github.com/nodeportlocal/npl/lbsync/claim"
)

func (c *Controller) patchService(ctx context.Context, svc *corev1.Service, patch []byte, subresources ...string) error {
	_, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, subresources...)
	if err != nil {
		return fmt.Errorf("patch service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// patchOptIn adds or removes the NodePortLocal opt-in that we manage.
func (c *Controller) patchOptIn(ctx context.Context, svc *corev1.Service, want bool) error {
	if !want && c.referencedByNPLIngress(svc) {
		return nil // an npl Ingress still needs the Service's node ports
	}
	patch, changed := claim.AnnotationPatch(svc, want)
	if !changed {
		return nil
	}
	return c.patchService(ctx, svc, patch)
}

// claimService makes the Service's deletion wait for its load balancer,
// records which installation claimed it and, with optIn, adds the
// NodePortLocal opt-in: one patch, only when something is missing.
func (c *Controller) claimService(ctx context.Context, svc *corev1.Service, optIn bool) error {
	meta := map[string]any{}
	annotations := map[string]any{}
	if !claim.HasCleanupFinalizer(svc) {
		meta["finalizers"] = append(slices.Clone(svc.Finalizers), claim.CleanupFinalizer)
	}
	if svc.Annotations[claim.ClaimedByKey] != c.settings.ClusterName {
		annotations[claim.ClaimedByKey] = c.settings.ClusterName
	}
	if optIn && claim.OptInChange(svc, true) == claim.OptInAdd {
		annotations[annotation.ServiceEnabledKey] = "true"
		annotations[claim.AutoAnnotatedKey] = "true"
	}
	if len(meta) == 0 && len(annotations) == 0 {
		return nil
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	// The resourceVersion makes the patch fail on a concurrent change
	// rather than drop another controller's finalizer.
	meta["resourceVersion"] = svc.ResourceVersion
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	return c.patchService(ctx, svc, patch)
}

// removeFinalizer drops the finalizer and the claim record.
func (c *Controller) removeFinalizer(ctx context.Context, svc *corev1.Service) error {
	_, recorded := svc.Annotations[claim.ClaimedByKey]
	if !claim.HasCleanupFinalizer(svc) && !recorded {
		return nil
	}
	finalizers := slices.DeleteFunc(slices.Clone(svc.Finalizers), func(f string) bool { return f == claim.CleanupFinalizer })
	return c.patchClaim(ctx, svc, finalizers, nil)
}

// patchClaim sets the finalizers and the claim annotation (nil deletes it).
func (c *Controller) patchClaim(ctx context.Context, svc *corev1.Service, finalizers []string, owner any) error {
	// The resourceVersion makes the patch fail on a concurrent change
	// rather than drop another controller's finalizer.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers":      finalizers,
		"annotations":     map[string]any{claim.ClaimedByKey: owner},
		"resourceVersion": svc.ResourceVersion,
	}})
	if err != nil {
		return err
	}
	return c.patchService(ctx, svc, patch)
}

// setStatus writes the VIPs into status.loadBalancer.ingress and sets the
// npl.io/LoadBalancerSynced condition, in one patch and only when either
// changes.
func (c *Controller) setStatus(ctx context.Context, svc *corev1.Service, vips []string, ok bool, reason, message string) error {
	ingress := make([]corev1.LoadBalancerIngress, 0, len(vips))
	for _, v := range vips {
		ingress = append(ingress, corev1.LoadBalancerIngress{IP: v})
	}
	status := map[string]any{}
	if !equalIngress(svc.Status.LoadBalancer.Ingress, ingress) {
		status["loadBalancer"] = map[string]any{"ingress": ingress}
		klog.FromContext(ctx).V(2).Info("Writing load balancer status", "service", klog.KObj(svc), "vips", vips)
	}
	if conditions, changed := c.nextConditions(svc, ok, reason, message); changed {
		status["conditions"] = conditions
	}
	if len(status) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	return c.patchService(ctx, svc, patch, "status")
}

func (c *Controller) clearStatus(ctx context.Context, svc *corev1.Service) error {
	hasCondition := slices.ContainsFunc(svc.Status.Conditions, func(cd metav1.Condition) bool { return cd.Type == claim.SyncedConditionType })
	if len(svc.Status.LoadBalancer.Ingress) == 0 && !hasCondition {
		return nil
	}
	conditions := slices.DeleteFunc(slices.Clone(svc.Status.Conditions), func(cd metav1.Condition) bool { return cd.Type == claim.SyncedConditionType })
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": nil}, "conditions": conditions}})
	if err != nil {
		return err
	}
	return c.patchService(ctx, svc, patch, "status")
}

func equalIngress(a, b []corev1.LoadBalancerIngress) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].IP != b[i].IP || a[i].Hostname != b[i].Hostname {
			return false
		}
	}
	return true
}

// setCondition sets the npl.io/LoadBalancerSynced condition alone, writing
// only when its status, reason or message changes.
func (c *Controller) setCondition(ctx context.Context, svc *corev1.Service, ok bool, reason, message string) error {
	conditions, changed := c.nextConditions(svc, ok, reason, message)
	if !changed {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conditions}})
	if err != nil {
		return err
	}
	return c.patchService(ctx, svc, patch, "status")
}

// nextConditions returns the Service's conditions with the
// npl.io/LoadBalancerSynced condition set, and whether that changed them.
func (c *Controller) nextConditions(svc *corev1.Service, ok bool, reason, message string) ([]metav1.Condition, bool) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	conditions := slices.Clone(svc.Status.Conditions)
	i := slices.IndexFunc(conditions, func(cd metav1.Condition) bool { return cd.Type == claim.SyncedConditionType })
	next := metav1.Condition{
		Type: claim.SyncedConditionType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: svc.Generation, LastTransitionTime: metav1.Now(),
	}
	if i >= 0 {
		cur := conditions[i]
		if cur.Status == status && cur.Reason == reason && cur.Message == message && cur.ObservedGeneration == svc.Generation {
			return conditions, false
		}
		if cur.Status == status {
			next.LastTransitionTime = cur.LastTransitionTime
		}
		conditions[i] = next
	} else {
		conditions = append(conditions, next)
	}
	return conditions, true
}
