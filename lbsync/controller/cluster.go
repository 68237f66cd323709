package controller

import (
	"context"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/lbsync/inputs"
)

// cluster is the Kubernetes side that the shell, the reconcilers and the
// applier share: the settings, the API client, the informers' caches, the
// Event recorder and the work queue. It holds no state of the syncs: each
// reconciler, and the applier, keeps its own.
type cluster struct {
	settings Settings
	client   kubernetes.Interface
	// store holds the caches builds read (package inputs, shared with
	// nplctl).
	store inputs.Store
	// gwp holds the Gateway API part (gwState); nil until EnableGatewayAPI
	// or ServeGatewayAPI. ServeGatewayAPI replaces it whole when CRDs
	// appear after the start.
	gwp atomic.Pointer[gatewayState]
	// polp holds the LoadBalancerPolicy part (polState); nil until
	// EnablePolicies or ServePolicies, and again after StopPolicies.
	polp     atomic.Pointer[policyState]
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[queueKey]
	// writes are the objects our writes returned, until the caches show
	// them (pending).
	writes ownWrites
}

// statusWriters is how many status writes one sync sends at once: a
// Gateway's route statuses, a Service's Pod registration conditions. Each
// waits for the API server, so one after another the last would wait for
// all; the client's rate limit still applies.
const statusWriters = 8

// queueKeys queues keys and returns them.
func (c *cluster) queueKeys(keys []queueKey) []queueKey {
	for _, k := range keys {
		c.queue.Add(k)
	}
	return keys
}

// inputSettings are the settings builds read their inputs with.
func (c *cluster) inputSettings() inputs.Settings {
	return inputs.Settings{ClusterName: c.settings.ClusterName, ServiceType: c.settings.ServiceType,
		Family: c.settings.Family, IngressClass: c.settings.IngressClass, AgentPorts: c.settings.NodePortRange}
}

// The marks themselves (claim, opt-in, status, condition) are built by
// package claim, which uninstall shares; the reconcilers only send them.

// patchService sends a merge patch built by package claim; a nil patch
// means nothing to change.
func (c *cluster) patchService(ctx context.Context, svc *corev1.Service, patch []byte, subresources ...string) error {
	if patch == nil {
		return nil
	}
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, subresources...)
	if err != nil {
		return fmt.Errorf("patch service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	c.writes.wrote(out)
	return nil
}

// optIn adds, in NodePortLocal mode, the opt-in that we manage to the
// backends of an Ingress or route that want it (ingress.WantsOptIn): the
// load balancer sends to their Pods' node ports. The Service reconciler
// takes it away when none needs it (optOut).
func (c *cluster) optIn(ctx context.Context, backends []*corev1.Service) error {
	if c.settings.ServiceType != builder.ServiceTypeNodePortLocal {
		return nil
	}
	for _, svc := range backends {
		if !ingress.WantsOptIn(svc) {
			continue
		}
		patch, _ := claim.AnnotationPatch(svc, true)
		if err := c.patchService(ctx, svc, patch); err != nil {
			return err
		}
	}
	return nil
}
