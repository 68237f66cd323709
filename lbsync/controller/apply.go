package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/providers"
)

// applier is the one path from built models to the provider: it owns what
// npl-lbsync knows of the load balancers (the models applied, those
// refused, the draining members), behind its own lock, the first pass over
// every key and the garbage collection of the load balancers nothing
// claims. The reconcilers reach the provider only through it.
type applier struct {
	*cluster
	provider providers.Provider
	// pending is the first pass over every key, which the first garbage
	// collection waits for.
	pending firstPass

	mu sync.Mutex
	// applied holds the hash of the model last applied per key, to skip
	// no-op provider calls.
	applied map[queueKey]string
	// rejected holds, per key, why its last model broke the rules, so the
	// Warning Event fires once per reason.
	rejected map[queueKey]string
	// drains holds each load balancer's draining members (drain.go).
	drains map[queueKey]*drainTracker
	// moved holds when each member's Pod mapping moved to another node
	// port (drain.go), for the drain period.
	moved map[memberAddr]time.Time
	// longestDrain is the longest drain of a pool's policy applied so far
	// (a time.Duration): moves are remembered that long.
	longestDrain atomic.Int64
	// vips decides whether a model may have the VIP it requests (vips.go).
	vips *vipGuard
	// entries tells Pods why entries of their annotation are no members.
	entries untrustedEntries
}

func newApplier(cl *cluster, provider providers.Provider) *applier {
	return &applier{cluster: cl, provider: provider,
		applied: map[queueKey]string{}, rejected: map[queueKey]string{},
		drains: map[queueKey]*drainTracker{}, moved: map[memberAddr]time.Time{},
		vips: newVIPGuard(cl.settings.AllowedVIPs)}
}

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
func (a *applier) apply(ctx context.Context, m model) (*lbmodel.LoadBalancer, syncResult) {
	a.entries.tell(a.cluster, m.report)
	lb := m.lb
	a.applyDrains(m.key, lb)
	hash := modelHash(lb)
	a.mu.Lock()
	unchanged := a.applied[m.key] == hash
	a.mu.Unlock()
	if unchanged && !m.needsStatus {
		return lb, synced() // applied, so it passed the check then
	}
	// A VIP the model may not have leaves the load balancer as it is.
	if f := a.vips.claim(m.key, lb); f != nil {
		return nil, a.refuse(ctx, m, *f)
	}
	// The provider is behind providers.Validated: the one check of the
	// model runs there, before any call to the load balancer.
	status, err := a.provider.Ensure(ctx, lb)
	if err != nil {
		a.vips.release(m.key)
	} else {
		a.vips.applied(m.key, status.VIPs, lb)
	}
	var invalid *lbmodel.InvalidModelError
	if errors.As(err, &invalid) {
		return nil, a.rejectModel(ctx, m, err)
	}
	if err != nil {
		for _, o := range m.objects {
			a.recorder.Eventf(o, corev1.EventTypeWarning, "SyncFailed", "Load balancer %s: %v", lb.Name, err)
		}
		if m.setFailed != nil {
			f := failure{reason: "SyncFailed", message: err.Error(), refused: errors.Is(err, lbmodel.ErrUnsupported)}
			if cerr := m.setFailed(ctx, f); cerr != nil {
				klog.FromContext(ctx).Error(cerr, "Set condition", "key", m.key)
			}
		}
		return nil, retryOn(fmt.Errorf("ensure load balancer %s: %w", lb.Name, err))
	}
	a.mu.Lock()
	first := a.applied[m.key] == ""
	a.applied[m.key] = hash
	delete(a.rejected, m.key)
	a.mu.Unlock()
	if !unchanged {
		// What the load balancer does not serve of the model (UDP on
		// HAProxy): said once per applied change.
		for _, w := range status.Warnings {
			for _, o := range m.objects {
				a.recorder.Eventf(o, corev1.EventTypeWarning, "NotServed", "Load balancer %s: %s", lb.Name, w)
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
			a.recorder.Eventf(o, corev1.EventTypeNormal, "Synced", "Load balancer %s applied: %d ready backend(s)", lb.Name, m.report.ReadyBackends)
		}
	}
	return lb, synced()
}

// rejectModel reports a model that breaks the rules, once per distinct
// reason, and records it in the condition. Retrying cannot help until the
// objects change, which queues them again.
func (a *applier) rejectModel(ctx context.Context, m model, err error) syncResult {
	reason, message := "InvalidModel", err.Error()
	if errors.Is(err, lbmodel.ErrNoListeners) {
		reason = "NothingToServe"
		message = "no port can be served"
		if skipped := skippedPorts(m.report); skipped != "" {
			message += " (skipped: " + skipped + ")"
		}
		message += "; the load balancer is left as it is"
	}
	return a.refuse(ctx, m, failure{reason: reason, message: message, refused: true})
}

// refuse reports a model at fault (f.refused), once per distinct reason
// and message, and records it in the condition.
func (a *applier) refuse(ctx context.Context, m model, f failure) syncResult {
	a.mu.Lock()
	repeated := a.rejected[m.key] == f.reason+": "+f.message
	a.rejected[m.key] = f.reason + ": " + f.message
	a.mu.Unlock()
	if !repeated {
		for _, o := range m.objects {
			a.recorder.Event(o, corev1.EventTypeWarning, f.reason, f.message)
		}
		klog.FromContext(ctx).Info("Model not applied", "key", m.key, "reason", f.reason, "message", f.message)
	}
	if m.setFailed != nil {
		return refused(m.setFailed(ctx, f))
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

// delete deletes a load balancer.
func (a *applier) delete(ctx context.Context, name string, kind lbmodel.Kind) error {
	return a.provider.Delete(ctx, name, kind)
}

// deleteFor deletes the load balancer of obj, which we stop serving, and
// tells obj in an Event.
func (a *applier) deleteFor(ctx context.Context, obj runtime.Object, name string, kind lbmodel.Kind) error {
	if err := a.provider.Delete(ctx, name, kind); err != nil {
		a.recorder.Eventf(obj, corev1.EventTypeWarning, "DeleteFailed", "Load balancer %s: %v", name, err)
		return fmt.Errorf("delete load balancer %s: %w", name, err)
	}
	a.recorder.Eventf(obj, corev1.EventTypeNormal, "Deleted", "Load balancer %s deleted", name)
	return nil
}

// hasApplied reports whether a model of key was applied since it was last
// forgotten (or since the last resync).
func (a *applier) hasApplied(key queueKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.applied[key]
	return ok
}

// forget drops what is known of key's load balancer: it is deleted, or no
// longer ours.
func (a *applier) forget(key queueKey) {
	a.vips.forget(key)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.applied, key)
	delete(a.rejected, key)
	delete(a.drains, key)
}

// forceAll disables the no-op skip until each key is applied again, so the
// provider compares every model with what the load balancer has.
func (a *applier) forceAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.applied)
}

// collectGarbage deletes this cluster's load balancers whose names claimed
// does not return. It runs only after the caches synced and the first
// pass, and does nothing when List fails: an error never deletes anything.
// claimed is asked after List, so that a load balancer applied in between
// is claimed. A load balancer under the name npl-lbsync 0.x gave it is
// claimed by its recorded owner's claim of the new name: that owner's
// next Ensure takes it over (lbmodel.RenamedTo).
func (a *applier) collectGarbage(ctx context.Context, claimed func() map[string]bool) {
	logger := klog.FromContext(ctx)
	lbs, err := a.provider.List(ctx)
	if err != nil {
		logger.Error(err, "Garbage collection skipped: list load balancers")
		return
	}
	names := claimed()
	for _, lb := range lbs {
		if names[lb.Name] {
			continue
		}
		if renamed := lbmodel.RenamedTo(a.settings.ClusterName, &lb); renamed != "" && names[renamed] {
			logger.V(2).Info("Keeping a load balancer its owner takes over under its new name", "lb", lb.Name, "newName", renamed)
			continue
		}
		logger.Info("Deleting orphaned load balancer", "lb", lb.Name, "service", lb.Service)
		if err := a.provider.Delete(ctx, lb.Name, lb.Kind); err != nil {
			logger.Error(err, "Delete orphaned load balancer", "lb", lb.Name)
		}
	}
}

func modelHash(lb *lbmodel.LoadBalancer) string {
	b, _ := json.Marshal(lb)
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// firstPass holds the keys the first pass queued that have not been synced
// once yet: events sync other keys, or the same ones again, meanwhile, so
// a count of syncs cannot say when the pass is done.
type firstPass struct {
	mu   sync.Mutex
	keys map[queueKey]bool
}

func (f *firstPass) start(keys []queueKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = make(map[queueKey]bool, len(keys))
	for _, k := range keys {
		f.keys[k] = true
	}
}

func (f *firstPass) synced(key queueKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.keys, key)
}

func (f *firstPass) done() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys) == 0
}
