package chart

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/engine"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/internal/chartpkg"
	"github.com/nodeportlocal/npl/internal/gatewaycrds"
	"github.com/nodeportlocal/npl/test/harness/chartrender"
)

// TestChart_gatewayAPICRDsComeOnlyWithThePackagedChart checks the value
// gatewayAPI.installCRDs: the chart of the repository refuses it with a
// message naming `make chart`; the chart `make chart` packages renders the
// pinned module's standard CRDs unchanged but for helm's keep policy, and a
// real API server accepts them, strictly, and serves their kinds.
func TestChart_gatewayAPICRDsComeOnlyWithThePackagedChart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	vals := func(install bool) map[string]any {
		return readValues(t, filepath.Join(chartDir, "ci", "mock-values.yaml"),
			map[string]any{"gatewayAPI.enabled": true, "gatewayAPI.installCRDs": install})
	}

	t.Run("the repository's chart refuses the value", func(t *testing.T) {
		_, err := renderValues(t, vals(true))
		if err == nil || !strings.Contains(err.Error(), "make chart") {
			t.Fatalf("render with installCRDs: %v, want an error naming make chart", err)
		}
	})

	// What a user installs: the archive `make chart` writes, loaded back.
	archive, err := chartpkg.Package(ctx, chartDir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	packaged, err := loader.Load(archive)
	if err != nil {
		t.Fatal(err)
	}
	crdsOf := func(t *testing.T, install bool) []*unstructured.Unstructured {
		t.Helper()
		_, docs, err := chartrender.Render(engine.Engine{Strict: true}, packaged, vals(install), "npl", testNamespace)
		if err != nil {
			t.Fatal(err)
		}
		var crds []*unstructured.Unstructured
		for _, d := range docs {
			obj, err := decode(d.Template, d.YAML)
			if err != nil {
				t.Fatal(err)
			}
			// The Gateway API's, not npl's own LoadBalancerPolicy.
			if obj.u.GetKind() == "CustomResourceDefinition" && strings.HasSuffix(obj.u.GetName(), ".gateway.networking.k8s.io") {
				crds = append(crds, obj.u)
			}
		}
		return crds
	}

	t.Run("the packaged chart without the value renders no CRD", func(t *testing.T) {
		if got := crdsOf(t, false); len(got) != 0 {
			t.Fatalf("%d CRDs rendered with installCRDs false", len(got))
		}
	})

	files, err := gatewaycrds.Standard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := crdsOf(t, true)
	t.Run("the packaged chart renders every standard CRD unchanged, kept on uninstall", func(t *testing.T) {
		if len(got) != len(files) {
			t.Fatalf("%d CRDs rendered, the module has %d", len(got), len(files))
		}
		byName := map[string]*unstructured.Unstructured{}
		for _, u := range got {
			byName[u.GetName()] = u
		}
		for _, f := range files {
			want := map[string]any{}
			if err := yaml.Unmarshal(f.Data, &want); err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
			name, _, _ := unstructured.NestedString(want, "metadata", "name")
			u := byName[name]
			if u == nil {
				t.Errorf("%s (%s) not rendered", name, f.Name)
				continue
			}
			if p := u.GetAnnotations()["helm.sh/resource-policy"]; p != "keep" {
				t.Errorf("%s: helm.sh/resource-policy %q, want keep", name, p)
			}
			for k, v := range want["metadata"].(map[string]any)["annotations"].(map[string]any) {
				if u.GetAnnotations()[k] != v {
					t.Errorf("%s: annotation %s = %q, upstream %q", name, k, u.GetAnnotations()[k], v)
				}
			}
			if !reflect.DeepEqual(u.Object["spec"], want["spec"]) {
				t.Errorf("%s: spec differs from the module's %s", name, f.Name)
			}
		}
	})

	t.Run("an API server accepts them strictly and serves their kinds", func(t *testing.T) {
		c := localCluster(t)
		dyn, err := dynamic.NewForConfig(c.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
		for _, u := range got {
			if _, err := crds.Create(ctx, u, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("create %s: %v", u.GetName(), err)
			}
		}
		if err := c.WaitCRDsEstablished(ctx, names(got)...); err != nil {
			t.Fatal(err)
		}
	})
}

func names(us []*unstructured.Unstructured) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.GetName())
	}
	return out
}
