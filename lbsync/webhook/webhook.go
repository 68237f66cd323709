// Package webhook is npl-lbsync's mutating admission webhook: it adds the
// npl.io/lb-registered readiness gate to new Pods of namespaces labelled
// npl.io/readiness-gate-injection=enabled that a Service of ours selects, so
// their rollouts wait until the load balancer holds them.
package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/claim"
)

const (
	// NamespaceLabel opts a namespace's Pods in to the readiness gate.
	NamespaceLabel = "npl.io/readiness-gate-injection"
	// Path is where the webhook is served.
	Path = "/mutate-v1-pod"
	// maxBody bounds an AdmissionReview request.
	maxBody = 4 << 20
)

// Injector decides and writes the readiness-gate patch.
type Injector struct {
	Services   corelisters.ServiceLister
	Namespaces corelisters.NamespaceLister
	Claim      claim.ClaimConfig
}

// Patch returns the JSON patch that adds the gate to pod, or nil when the
// Pod does not need it: its namespace is not labelled, it has the gate
// already, or no LoadBalancer Service of ours selects it.
func (i *Injector) Patch(namespace string, pod *corev1.Pod) ([]byte, error) {
	ns, err := i.Namespaces.Get(namespace)
	if err != nil {
		return nil, fmt.Errorf("get namespace %s: %w", namespace, err)
	}
	if ns.Labels[NamespaceLabel] != "enabled" {
		return nil, nil
	}
	if slices.ContainsFunc(pod.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool {
		return g.ConditionType == contract.RegisteredReadinessGate
	}) {
		return nil, nil
	}
	svcs, err := i.Services.Services(namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list services of %s: %w", namespace, err)
	}
	// On create, an admitted Pod may not carry its namespace yet.
	inNS := *pod
	inNS.Namespace = namespace
	selected := slices.ContainsFunc(svcs, func(s *corev1.Service) bool {
		return claim.Ours(s, i.Claim) && contract.Selects(s, &inNS)
	})
	if !selected {
		return nil, nil
	}
	gate := corev1.PodReadinessGate{ConditionType: contract.RegisteredReadinessGate}
	op := map[string]any{"op": "add", "path": "/spec/readinessGates/-", "value": gate}
	if len(pod.Spec.ReadinessGates) == 0 {
		op = map[string]any{"op": "add", "path": "/spec/readinessGates", "value": []corev1.PodReadinessGate{gate}}
	}
	return json.Marshal([]any{op})
}

// ServeHTTP answers AdmissionReview v1 requests for Pods. It always allows
// the Pod: a failure to decide leaves it without the gate, never rejected.
func (i *Injector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
		resp.Warnings = []string{"npl.io readiness gate not injected: " + err.Error()}
	} else if patch, err := i.Patch(review.Request.Namespace, &pod); err != nil {
		logger.Error(err, "Readiness gate injection", "namespace", review.Request.Namespace)
		resp.Warnings = []string{"npl.io readiness gate not injected: " + err.Error()}
	} else if patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
		logger.V(2).Info("Injected the readiness gate", "namespace", review.Request.Namespace, "pod", pod.GenerateName+pod.Name)
	}
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}
