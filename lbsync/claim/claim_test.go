package claim

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeportlocal/npl/contract"
)

func lbService(class *string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: class,
		},
	}
}

func strPtr(s string) *string { return &s }

func TestOurs_selectsByClassAndDefault(t *testing.T) {
	ours := ClaimConfig{LoadBalancerClass: "npl.io/lb"}
	oursAndDefault := ClaimConfig{LoadBalancerClass: "npl.io/lb", DefaultLoadBalancer: true}
	deleting := lbService(strPtr("npl.io/lb"))
	deleting.DeletionTimestamp = &metav1.Time{}
	clusterIP := lbService(nil)
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	nodePort := lbService(strPtr("npl.io/lb"))
	nodePort.Spec.Type = corev1.ServiceTypeNodePort

	tests := []struct {
		name string
		svc  *corev1.Service
		cfg  ClaimConfig
		want bool
	}{
		{"our class", lbService(strPtr("npl.io/lb")), ours, true},
		{"our class, also default", lbService(strPtr("npl.io/lb")), oursAndDefault, true},
		{"another class", lbService(strPtr("ako.vmware.com/avi-lb")), oursAndDefault, false},
		{"no class, not default", lbService(nil), ours, false},
		{"no class, default", lbService(nil), oursAndDefault, true},
		{"empty class counts as none, default", lbService(strPtr("")), oursAndDefault, true},
		{"empty class counts as none, not default", lbService(strPtr("")), ours, false},
		{"being deleted is still ours", deleting, ours, true},
		{"ClusterIP is never ours", clusterIP, oursAndDefault, false},
		{"NodePort with our class is not ours", nodePort, ours, false},
		{"nil Service", nil, oursAndDefault, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Ours(tt.svc, tt.cfg); got != tt.want {
				t.Errorf("Ours() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHasFinalizer(t *testing.T) {
	with := lbService(nil)
	with.Finalizers = []string{"other.io/x", contract.CleanupFinalizer}
	other := lbService(nil)
	other.Finalizers = []string{"service.kubernetes.io/load-balancer-cleanup"}
	tests := []struct {
		name string
		svc  *corev1.Service
		want bool
	}{
		{"ours among others", with, true},
		{"only the cloud provider's", other, false},
		{"none", lbService(nil), false},
		{"nil Service", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HasFinalizer(tt.svc); got != tt.want {
				t.Errorf("HasFinalizer() = %v, want %v", got, tt.want)
			}
		})
	}
}

// applyMergePatch applies a JSON merge patch of metadata.annotations the way
// the API server does: a string sets a key, null deletes it.
func applyMergePatch(t *testing.T, annotations map[string]string, patch []byte) map[string]string {
	t.Helper()
	var p struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(bytes.NewReader(patch))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("patch %s is not a metadata.annotations merge patch: %v", patch, err)
	}
	out := map[string]string{}
	for k, v := range annotations {
		out[k] = v
	}
	for k, v := range p.Metadata.Annotations {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = *v
	}
	return out
}

func TestAnnotationPatch(t *testing.T) {
	const enabled = contract.ServiceEnabledKey
	tests := []struct {
		name        string
		annotations map[string]string
		want        bool
		wantChanged bool
		// wantAfter is the annotations after applying the patch.
		wantAfter map[string]string
	}{
		{
			name:        "want, absent: add opt-in and mark it ours",
			annotations: map[string]string{"team": "a"},
			want:        true,
			wantChanged: true,
			wantAfter:   map[string]string{"team": "a", enabled: "true", contract.AutoAnnotatedKey: "true"},
		},
		{
			name:        "want, no annotations at all",
			want:        true,
			wantChanged: true,
			wantAfter:   map[string]string{enabled: "true", contract.AutoAnnotatedKey: "true"},
		},
		{
			name:        "want, user's own opt-in: no change and never marked",
			annotations: map[string]string{enabled: "true"},
			want:        true,
			wantAfter:   map[string]string{enabled: "true"},
		},
		{
			name:        "want, already ours: no change",
			annotations: map[string]string{enabled: "true", contract.AutoAnnotatedKey: "true"},
			want:        true,
			wantAfter:   map[string]string{enabled: "true", contract.AutoAnnotatedKey: "true"},
		},
		{
			name:        "want, value other than true does not opt in: overwritten",
			annotations: map[string]string{enabled: "True"},
			want:        true,
			wantChanged: true,
			wantAfter:   map[string]string{enabled: "true", contract.AutoAnnotatedKey: "true"},
		},
		{
			name:        "want, our marker left but opt-in removed: restored",
			annotations: map[string]string{contract.AutoAnnotatedKey: "true"},
			want:        true,
			wantChanged: true,
			wantAfter:   map[string]string{enabled: "true", contract.AutoAnnotatedKey: "true"},
		},
		{
			name:        "not wanted, ours: both keys removed",
			annotations: map[string]string{"team": "a", enabled: "true", contract.AutoAnnotatedKey: "true"},
			wantChanged: true,
			wantAfter:   map[string]string{"team": "a"},
		},
		{
			name:        "not wanted, user's own opt-in: kept",
			annotations: map[string]string{enabled: "true"},
			wantAfter:   map[string]string{enabled: "true"},
		},
		{
			name:        "not wanted, marker not exactly true: kept",
			annotations: map[string]string{enabled: "true", contract.AutoAnnotatedKey: "false"},
			wantAfter:   map[string]string{enabled: "true", contract.AutoAnnotatedKey: "false"},
		},
		{
			name:      "not wanted, nothing there",
			wantAfter: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := lbService(nil)
			svc.Annotations = tt.annotations
			patch, changed := AnnotationPatch(svc, tt.want)
			if changed != tt.wantChanged {
				t.Fatalf("changed = %v, want %v (patch %s)", changed, tt.wantChanged, patch)
			}
			if !changed {
				if patch != nil {
					t.Fatalf("no change but patch %s", patch)
				}
				patch = []byte(`{"metadata":{"annotations":{}}}`)
			}
			got := applyMergePatch(t, tt.annotations, patch)
			if diff := cmp.Diff(tt.wantAfter, got); diff != "" {
				t.Errorf("annotations after patch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAnnotationPatch_nilService(t *testing.T) {
	if patch, changed := AnnotationPatch(nil, true); changed || patch != nil {
		t.Errorf("AnnotationPatch(nil) = %s, %v; want nil, false", patch, changed)
	}
}

func TestReleasable_onlyTheInstallationThatClaimed(t *testing.T) {
	withAnn := func(ann map[string]string, finalizers ...string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: ann, Finalizers: finalizers}}
	}
	cases := []struct {
		name string
		svc  *corev1.Service
		want bool
	}{
		{"claimed by us", withAnn(map[string]string{contract.ClaimedByKey: "prod"}, contract.CleanupFinalizer), true},
		{"claimed by another installation", withAnn(map[string]string{contract.ClaimedByKey: "other"}, contract.CleanupFinalizer), false},
		{"finalizer without a claim record", withAnn(nil, contract.CleanupFinalizer), true},
		{"never claimed", withAnn(nil), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Releasable(tc.svc, "prod"); got != tc.want {
				t.Errorf("Releasable = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClaimAndReleasePatches: the claim the controller writes and the
// release that the controller and uninstall share undo each other exactly,
// on Services and Ingresses alike, and keep other finalizers.
func TestClaimAndReleasePatches(t *testing.T) {
	svc := lbService(nil)
	svc.ResourceVersion = "7"
	svc.Finalizers = []string{"other.io/x"}
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "8", Finalizers: []string{"other.io/x"}}}
	for _, tc := range []struct {
		name        string
		obj         metav1.Object
		optIn       bool
		wantClaim   string
		wantRelease string
	}{
		{"service with opt-in", svc, true,
			`{"metadata":{"annotations":{"nodeportlocal.antrea.io/enabled":"true","` + contract.AutoAnnotatedKey + `":"true","` + contract.ClaimedByKey + `":"prod"},"finalizers":["other.io/x","` + contract.CleanupFinalizer + `"],"resourceVersion":"7"}}`,
			`{"metadata":{"annotations":{"` + contract.ClaimedByKey + `":null},"finalizers":["other.io/x"],"resourceVersion":"7"}}`},
		{"ingress", ing, false,
			`{"metadata":{"annotations":{"` + contract.ClaimedByKey + `":"prod"},"finalizers":["other.io/x","` + contract.CleanupFinalizer + `"],"resourceVersion":"8"}}`,
			`{"metadata":{"annotations":{"` + contract.ClaimedByKey + `":null},"finalizers":["other.io/x"],"resourceVersion":"8"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(ClaimPatch(tc.obj, "prod", tc.optIn)); got != tc.wantClaim {
				t.Errorf("ClaimPatch:\n got %s\nwant %s", got, tc.wantClaim)
			}
			if p := ReleasePatch(tc.obj); p != nil {
				t.Errorf("ReleasePatch of an unclaimed object = %s; want nil", p)
			}
			claimed := tc.obj.(interface{ DeepCopyObject() runtime.Object }).DeepCopyObject().(metav1.Object)
			claimed.SetFinalizers(append(claimed.GetFinalizers(), contract.CleanupFinalizer))
			claimed.SetAnnotations(map[string]string{contract.ClaimedByKey: "prod"})
			if p := ClaimPatch(claimed, "prod", false); p != nil {
				t.Errorf("ClaimPatch of a claimed object = %s; want nil", p)
			}
			if got := string(ReleasePatch(claimed)); got != tc.wantRelease {
				t.Errorf("ReleasePatch:\n got %s\nwant %s", got, tc.wantRelease)
			}
		})
	}
}

// The claim rides with a status write: one patch for the status
// subresource holding the claim's metadata beside the status, and the
// resourceVersion that guards its finalizers.
func TestWithClaim_onePatchForClaimAndStatus(t *testing.T) {
	svc := lbService(nil)
	svc.ResourceVersion = "7"
	claimPatch := ClaimPatch(svc, "prod", true)
	status := ServiceStatusPatch(svc, []string{"198.18.0.9"}, nil)
	want := `{"metadata":{"annotations":{"nodeportlocal.antrea.io/enabled":"true","` + contract.AutoAnnotatedKey + `":"true","` +
		contract.ClaimedByKey + `":"prod"},"finalizers":["` + contract.CleanupFinalizer + `"],"resourceVersion":"7"},` +
		`"status":{"loadBalancer":{"ingress":[{"ip":"198.18.0.9"}]}}}`
	if got := string(WithClaim(status, claimPatch)); got != want {
		t.Errorf("WithClaim:\n got %s\nwant %s", got, want)
	}
	// ClearServiceStatusPatch has metadata of its own: both are kept.
	svc.Status.Conditions = []metav1.Condition{{Type: contract.SyncedConditionType}}
	var merged map[string]map[string]any
	if err := json.Unmarshal(WithClaim(ClearServiceStatusPatch(svc, false), claimPatch), &merged); err != nil {
		t.Fatal(err)
	}
	if merged["metadata"]["resourceVersion"] != "7" || merged["metadata"]["finalizers"] == nil || merged["status"]["conditions"] != nil {
		t.Errorf("WithClaim of a clearing patch: %v", merged)
	}
	if p := WithClaim(nil, claimPatch); p != nil {
		t.Errorf("no status write: WithClaim = %s, want nil", p)
	}
	if got := WithClaim(status, nil); !bytes.Equal(got, status) {
		t.Errorf("nothing to claim: WithClaim = %s, want the status patch", got)
	}
}
