package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/providers"
)

// model is one built load balancer and the objects it is applied for: a
// Service, an Ingress, or the Ingresses that share a VIP.
type model struct {
	key    queueKey
	lb     *lbmodel.LoadBalancer
	report builder.Report
	// objects receive the Events.
	objects []runtime.Object
	// needsStatus is set when an object lacks the VIP in its status: the
	// model is then applied even when unchanged, to learn the VIP.
	needsStatus bool
	// syncedEvents sends a Normal Event to the objects when a changed model
	// is applied (not for the shared load balancer: one change would send an
	// Event to every Ingress).
	syncedEvents bool
	// setStatus writes the VIPs (and the condition, with the provider's
	// warnings) after an apply.
	setStatus func(ctx context.Context, status providers.Status) error
	// setFailed records on the objects why the model was not applied (the
	// Service condition); nil where there is none.
	setFailed func(ctx context.Context, f failure) error
}

// failure is why a model was not applied.
type failure struct {
	reason, message string
	// refused is set when the model is at fault: it breaks the rules, or
	// the provider cannot express it (lbmodel.ErrUnsupported). Otherwise
	// the provider failed (unreachable, an error of its API) and a retry
	// of the same model may succeed.
	refused bool
}

// apply is the one path from a built model to the load balancer, for every
// kind of key: the draining members are kept, an unchanged model is
// skipped, the provider's Ensure is called (behind providers.Validated,
// which checks the model first), the result is recorded and written into
// the objects' status, and Events tell what happened.
//
// A model that breaks the rules (a Service whose only ports are SCTP has
// nothing to serve) reaches no provider: the objects get a Warning Event
// and condition naming the skipped ports, and the existing load balancer
// stays as it is: the key is not retried. It returns the model as applied,
// nil when it was not.
func (c *Controller) apply(ctx context.Context, m model) (*lbmodel.LoadBalancer, syncResult) {
	lb := m.lb
	c.applyDrains(m.key, lb)
	hash := modelHash(lb)
	c.mu.Lock()
	unchanged := c.applied[m.key] == hash
	c.mu.Unlock()
	if unchanged && !m.needsStatus {
		return lb, synced() // applied, so it passed the check then
	}
	// The provider is behind providers.Validated: the one check of the
	// model runs there, before any call to the load balancer.
	status, err := c.provider.Ensure(ctx, lb)
	var invalid *lbmodel.InvalidModelError
	if errors.As(err, &invalid) {
		return nil, c.rejectModel(ctx, m, err)
	}
	if err != nil {
		for _, o := range m.objects {
			c.recorder.Eventf(o, corev1.EventTypeWarning, "SyncFailed", "Load balancer %s: %v", lb.Name, err)
		}
		if m.setFailed != nil {
			f := failure{reason: "SyncFailed", message: err.Error(), refused: errors.Is(err, lbmodel.ErrUnsupported)}
			if cerr := m.setFailed(ctx, f); cerr != nil {
				klog.FromContext(ctx).Error(cerr, "Set condition", "key", m.key)
			}
		}
		return nil, retryOn(fmt.Errorf("ensure load balancer %s: %w", lb.Name, err))
	}
	c.mu.Lock()
	first := c.applied[m.key] == ""
	c.applied[m.key] = hash
	delete(c.rejected, m.key)
	c.mu.Unlock()
	if !unchanged {
		// What the load balancer does not serve of the model (UDP on
		// HAProxy): said once per applied change.
		for _, w := range status.Warnings {
			for _, o := range m.objects {
				c.recorder.Eventf(o, corev1.EventTypeWarning, "NotServed", "Load balancer %s: %s", lb.Name, w)
			}
		}
	}
	if err := m.setStatus(ctx, status); err != nil {
		return nil, retryOn(err)
	}
	switch {
	case first:
		klog.FromContext(ctx).V(2).Info("Applied load balancer", "key", m.key, "lb", lb.Name, "readyBackends", m.report.ReadyBackends)
	case !unchanged && m.syncedEvents:
		for _, o := range m.objects {
			c.recorder.Eventf(o, corev1.EventTypeNormal, "Synced", "Load balancer %s applied: %d ready backend(s)", lb.Name, m.report.ReadyBackends)
		}
	}
	return lb, synced()
}

// rejectModel reports a model that breaks the rules, once per distinct
// reason, and records it in the condition. Retrying cannot help until the
// objects change, which queues them again.
func (c *Controller) rejectModel(ctx context.Context, m model, err error) syncResult {
	reason, message := "InvalidModel", err.Error()
	if errors.Is(err, lbmodel.ErrNoListeners) {
		reason = "NothingToServe"
		message = "no port can be served"
		if skipped := skippedPorts(m.report); skipped != "" {
			message += " (skipped: " + skipped + ")"
		}
		message += "; the load balancer is left as it is"
	}
	c.mu.Lock()
	repeated := c.rejected[m.key] == message
	c.rejected[m.key] = message
	c.mu.Unlock()
	if !repeated {
		for _, o := range m.objects {
			c.recorder.Event(o, corev1.EventTypeWarning, reason, message)
		}
		klog.FromContext(ctx).Info("Model not applied", "key", m.key, "reason", reason, "message", message)
	}
	if m.setFailed != nil {
		return refused(m.setFailed(ctx, failure{reason: reason, message: message, refused: true}))
	}
	return refused(nil)
}

// skippedPorts names the ports the builder left out, with the reason.
func skippedPorts(r builder.Report) string {
	var parts []string
	for _, s := range r.Skipped {
		if s.Kind == builder.SkipPort {
			parts = append(parts, s.Name+": "+s.Reason)
		}
	}
	return strings.Join(parts, ", ")
}
