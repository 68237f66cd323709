package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
)

// Reasons of the npl.io/lb-registered Pod condition.
const (
	reasonRegistered    = "Registered"
	reasonNotRegistered = "NotRegistered"
)

func hasRegistrationGate(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool {
		return g.ConditionType == contract.RegisteredReadinessGate
	})
}

// registeredIn reports whether the load balancer lb, as the provider
// confirmed it, holds every member that pod contributes to svc, enabled. It
// builds the Pod's own members with the same builder, so membership and
// registration cannot disagree. A Pod that contributes no member (no
// annotation yet, containers not ready) is not registered; in NodePort mode
// members are nodes, so the applied load balancer is enough.
func registeredIn(s Settings, svc *corev1.Service, pod *corev1.Pod, lb *lbmodel.LoadBalancer) bool {
	if s.ServiceType == builder.ServiceTypeNodePort {
		return true
	}
	own, _ := builder.Build(builder.Input{
		ClusterName: s.ClusterName, ServiceType: s.ServiceType, Family: s.Family,
		Service: svc, Pods: []*corev1.Pod{pod},
	})
	if own == nil {
		return false
	}
	applied := map[string]map[lbmodel.Member]bool{}
	for _, l := range lb.Listeners {
		set := map[lbmodel.Member]bool{}
		for _, m := range l.Pool.Members {
			set[m] = true
		}
		applied[l.Pool.Name] = set
	}
	count := 0
	for _, l := range own.Listeners {
		for _, m := range l.Pool.Members {
			if !m.Enabled || !applied[l.Pool.Name][m] {
				return false
			}
			count++
		}
	}
	return count > 0
}

// registration is the npl.io/lb-registered condition one Pod should have.
type registration struct {
	pod     *corev1.Pod
	ok      bool
	message string
}

// updateRegistrations records, after the provider confirmed lb for svc,
// which of svc's gated Pods it holds, and sets each such Pod's
// npl.io/lb-registered condition: True once every Service of ours that
// selects it has it registered, False with a reason before. The patches go
// out statusWriters at a time, the True ones first: those hold Pods back
// from Ready, and one after another a Deployment's tenth new Pod would wait
// for the nine patches before it, and the Service's next sync (the next
// Pods' members) behind them all.
func (r *serviceReconciler) updateRegistrations(ctx context.Context, svc *corev1.Service, lb *lbmodel.LoadBalancer) error {
	key := keyOf(svc)
	var regs []registration
	for _, pod := range r.store.PodsFor(svc) {
		if !hasRegistrationGate(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		reg := registeredIn(r.settings, svc, pod, lb)
		podKey := keyOf(pod)
		r.mu.Lock()
		byService := r.registered[podKey]
		if byService == nil {
			byService = map[string]bool{}
			r.registered[podKey] = byService
		}
		byService[key] = reg
		ok, waiting := true, ""
		for _, other := range r.store.ServicesSelecting(pod) {
			if !claim.Ours(other, r.settings.Claim) || other.DeletionTimestamp != nil {
				continue
			}
			if !byService[keyOf(other)] {
				ok, waiting = false, keyOf(other)
				break
			}
		}
		r.mu.Unlock()
		message := "a member of every pool that should hold it"
		if !ok {
			message = "not yet a member of the pools of Service " + waiting
		}
		regs = append(regs, registration{pod: pod, ok: ok, message: message})
	}
	slices.SortStableFunc(regs, func(a, b registration) int {
		if a.ok == b.ok {
			return 0
		}
		if a.ok {
			return -1
		}
		return 1
	})
	var g errgroup.Group
	g.SetLimit(statusWriters)
	var failed atomic.Int32
	for _, reg := range regs {
		g.Go(func() error {
			err := r.setRegistered(ctx, reg.pod, reg.ok, reg.message)
			if err != nil {
				failed.Add(1)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("set %s on %d Pod(s): %w", contract.RegisteredReadinessGate, failed.Load(), err)
	}
	return nil
}

// setRegistered patches the Pod condition through pods/status when it changes.
func (r *serviceReconciler) setRegistered(ctx context.Context, pod *corev1.Pod, ok bool, message string) error {
	status, reason := corev1.ConditionFalse, reasonNotRegistered
	if ok {
		status, reason = corev1.ConditionTrue, reasonRegistered
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == contract.RegisteredReadinessGate && cond.Status == status && cond.Reason == reason {
			return nil
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: contract.RegisteredReadinessGate, Status: status, Reason: reason, Message: message,
		LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return err
	}
	// Conditions merge by type in a strategic merge patch: the kubelet's
	// own conditions are kept.
	_, err = r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch %s of pod %s/%s: %w", contract.RegisteredReadinessGate, pod.Namespace, pod.Name, err)
	}
	r.metrics.ReadinessGatePatches.WithLabelValues(string(status)).Inc()
	klog.FromContext(ctx).V(2).Info("Set the registration condition", "pod", klog.KObj(pod), "status", status)
	return nil
}
