package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeportlocal/npl/lbsync/claim"
)

// The marks themselves (claim, opt-in, status, condition) are built by
// package claim, which uninstall shares; this file only sends them.

// statusWriters is how many status writes one sync sends at once: a
// Gateway's route statuses, a Service's Pod registration conditions. Each
// waits for the API server, so one after another the last would wait for
// all; the client's rate limit still applies.
const statusWriters = 8

// patchService sends a merge patch built by package claim; a nil patch
// means nothing to change.
func (c *Controller) patchService(ctx context.Context, svc *corev1.Service, patch []byte, subresources ...string) error {
	if patch == nil {
		return nil
	}
	_, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, subresources...)
	if err != nil {
		return fmt.Errorf("patch service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// patchIngress is patchService for Ingresses.
func (c *Controller) patchIngress(ctx context.Context, ing *networkingv1.Ingress, patch []byte, subresources ...string) error {
	if patch == nil {
		return nil
	}
	_, err := c.client.NetworkingV1().Ingresses(ing.Namespace).Patch(ctx, ing.Name, types.MergePatchType, patch, metav1.PatchOptions{}, subresources...)
	if err != nil {
		return fmt.Errorf("patch ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	return nil
}

// patchOptIn adds or removes the NodePortLocal opt-in that we manage.
func (c *Controller) patchOptIn(ctx context.Context, svc *corev1.Service, want bool) error {
	if !want && (c.referencedByNPLIngress(svc) || c.referencedByNPLRoute(svc)) {
		return nil // an npl Ingress or route still needs the Service's node ports
	}
	patch, _ := claim.AnnotationPatch(svc, want)
	return c.patchService(ctx, svc, patch)
}

// setStatus writes the VIPs into status.loadBalancer.ingress and sets the
// npl.io/LoadBalancerSynced condition, in one patch and only when either
// changes.
func (c *Controller) setStatus(ctx context.Context, svc *corev1.Service, vips []string, cond claim.Condition) error {
	if vips == nil {
		vips = []string{}
	}
	return c.patchService(ctx, svc, claim.ServiceStatusPatch(svc, vips, &cond), "status")
}

// setCondition sets the npl.io/LoadBalancerSynced condition alone, writing
// only when its status, reason or message changes.
func (c *Controller) setCondition(ctx context.Context, svc *corev1.Service, cond claim.Condition) error {
	return c.patchService(ctx, svc, claim.ServiceStatusPatch(svc, nil, &cond), "status")
}

// setIngressStatus writes the VIPs into the Ingress's status.
func (c *Controller) setIngressStatus(ctx context.Context, ing *networkingv1.Ingress, vips []string) error {
	return c.patchIngress(ctx, ing, claim.IngressStatusPatch(ing, vips), "status")
}
