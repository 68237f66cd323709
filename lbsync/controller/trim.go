package controller

import (
	"encoding/json"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
)

// trimmer is the informer transform: it keeps only what npl-lbsync reads, to
// bound the memory of its caches (a Pod costs a few hundred bytes instead of
// tens of KiB with managedFields, env, volumes and status details), and
// hands the Pods of one template one copy of their labels and containers,
// and the Pods of one readiness one copy of their conditions.
type trimmer struct {
	mu sync.Mutex
	// labels, containers and conditions hold one copy of each value seen,
	// by its JSON.
	// The cache's objects are read only, as every informer cache's, so Pods
	// may share them. Each table is emptied when it reaches sharedMax
	// entries, so that it stays bounded whatever the cluster's label sets
	// (a StatefulSet's Pods each have their own): Pods keep what they got.
	labels     map[string]map[string]string
	containers map[string][]corev1.Container
	conditions map[string][]corev1.PodCondition
}

// sharedMax bounds each table of the trimmer.
const sharedMax = 4096

func newTrimmer() *trimmer {
	return &trimmer{labels: map[string]map[string]string{}, containers: map[string][]corev1.Container{},
		conditions: map[string][]corev1.PodCondition{}}
}

func (t *trimmer) trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		pod := trimPod(o)
		t.mu.Lock()
		pod.Labels = shared(t.labels, pod.Labels)
		pod.Spec.Containers = shared(t.containers, pod.Spec.Containers)
		// Without readiness gates only the Ready condition's status is
		// kept: two values for most Pods.
		pod.Status.Conditions = shared(t.conditions, pod.Status.Conditions)
		t.mu.Unlock()
		return pod, nil
	case *corev1.Service:
		out := o.DeepCopy()
		out.ManagedFields = nil
		delete(out.Annotations, "kubectl.kubernetes.io/last-applied-configuration")
		return out, nil
	case *corev1.Node:
		out := &corev1.Node{}
		out.Name, out.UID, out.ResourceVersion, out.Labels = o.Name, o.UID, o.ResourceVersion, o.Labels
		out.Spec.Unschedulable = o.Spec.Unschedulable
		out.Status.Addresses = o.Status.Addresses
		for _, c := range o.Status.Conditions {
			if c.Type == corev1.NodeReady {
				out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
			}
		}
		return out, nil
	}
	return obj, nil
}

// shared returns the copy of v that table holds, after adding v when it
// holds none. Empty values are returned as they are.
func shared[V any](table map[string]V, v V) V {
	key, err := json.Marshal(v)
	if err != nil || string(key) == "null" || string(key) == "{}" {
		return v
	}
	if s, ok := table[string(key)]; ok {
		return s
	}
	if len(table) >= sharedMax {
		clear(table)
	}
	table[string(key)] = v
	return v
}

// trimPod keeps what contract.TrimPod keeps, and what decides membership
// and registration (builder.podReady, readiness.go): the readiness gates,
// the Ready condition's status, and with gates their conditions and
// ContainersReady (the Reasons too: a registration compares its own); and
// the host IP.
func trimPod(pod *corev1.Pod) *corev1.Pod {
	out := contract.TrimPod(pod)
	out.Spec.ReadinessGates = pod.Spec.ReadinessGates
	out.Status.HostIP = pod.Status.HostIP
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady:
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status})
		case len(pod.Spec.ReadinessGates) == 0:
		case c.Type == corev1.ContainersReady || gated(pod, c.Type):
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
	}
	return out
}

// gated reports whether t is one of pod's readiness gates.
func gated(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == t {
			return true
		}
	}
	return false
}
