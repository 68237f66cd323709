package chart

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/charts"
)

// The chart installs the LoadBalancerPolicy CRD by default, as the file the
// tests install (package charts), kept on helm uninstall;
// loadBalancerPolicy.installCRD false leaves it out. npl-lbsync's grants on
// the policies do not depend on it: the CRD may be installed otherwise.
func TestChart_loadBalancerPolicyCRD(t *testing.T) {
	var want map[string]any
	if err := yaml.Unmarshal(charts.LoadBalancerPolicyCRD, &want); err != nil {
		t.Fatal(err)
	}
	for _, install := range []bool{true, false} {
		r := render(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), map[string]any{"loadBalancerPolicy.installCRD": install})
		crds := r.find("CustomResourceDefinition")
		if !install {
			if len(crds) != 0 {
				t.Errorf("installCRD false rendered %v", crds)
			}
			checkRBAC(t, r)
			continue
		}
		if len(crds) != 1 {
			t.Fatalf("rendered %d CRDs, want the LoadBalancerPolicy one", len(crds))
		}
		got := crds[0].u.DeepCopy()
		if got.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("annotations %v: not kept on uninstall", got.GetAnnotations())
		}
		unstructured.RemoveNestedField(got.Object, "metadata", "annotations")
		unstructured.RemoveNestedField(got.Object, "metadata", "labels")
		if diff := cmp.Diff(want, got.Object); diff != "" {
			t.Errorf("rendered CRD differs from charts/npl/files (-file +rendered):\n%s", diff)
		}
	}
}
