package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/claim"
)

func injector(t *testing.T) *Injector {
	t.Helper()
	nsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	svcIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "on", Labels: map[string]string{NamespaceLabel: "enabled"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "off"}},
	} {
		_ = nsIdx.Add(ns)
	}
	class := "npl.io/lb"
	for _, ns := range []string{"on", "off"} {
		_ = svcIdx.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: map[string]string{"app": "web"}}})
		_ = svcIdx.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "other"}}})
	}
	return &Injector{Services: corelisters.NewServiceLister(svcIdx), Namespaces: corelisters.NewNamespaceLister(nsIdx),
		Claim: claim.ClaimConfig{LoadBalancerClass: class}}
}

func TestPatch(t *testing.T) {
	i := injector(t)
	pod := func(app string, gates ...corev1.PodConditionType) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}}
		for _, g := range gates {
			p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: g})
		}
		return p
	}
	cases := []struct {
		name, ns string
		pod      *corev1.Pod
		want     string
	}{
		{"selected by ours in a labelled namespace", "on", pod("web"), `[{"op":"add","path":"/spec/readinessGates","value":[{"conditionType":"npl.io/lb-registered"}]}]`},
		{"appended to other gates", "on", pod("web", "example.com/x"), `[{"op":"add","path":"/spec/readinessGates/-","value":{"conditionType":"npl.io/lb-registered"}}]`},
		{"already gated", "on", pod("web", contract.RegisteredReadinessGate), ""},
		{"namespace not labelled", "off", pod("web"), ""},
		{"selected only by another class", "on", pod("other"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := i.Patch(tc.ns, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("patch = %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := i.Patch("missing", pod("web")); err == nil {
		t.Error("no error for an unknown namespace")
	}
}

func TestServeHTTP_answersAnAdmissionReview(t *testing.T) {
	raw, _ := json.Marshal(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Labels: map[string]string{"app": "web"}}})
	review, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: "u1", Namespace: "on", Object: runtime.RawExtension{Raw: raw}},
	})
	rec := httptest.NewRecorder()
	injector(t).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(review)))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response %s: %v", rec.Body.String(), err)
	}
	if !out.Response.Allowed || out.Response.UID != "u1" || out.Response.PatchType == nil || len(out.Response.Patch) == 0 {
		t.Errorf("response = %+v, want allowed with a JSON patch", out.Response)
	}
	rec = httptest.NewRecorder()
	injector(t).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader([]byte("{"))))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("malformed review: status %d, want 400", rec.Code)
	}
}
