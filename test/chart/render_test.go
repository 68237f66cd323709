package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/test/harness/chartrender"
)

// chartDir is the chart under test, from this package's directory.
const chartDir = "../../charts/npl"

// testNamespace is the release namespace of rendered releases.
const testNamespace = "npl-system"

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := chartrender.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// ciValueFiles lists charts/npl/ci/*.yaml, the value files every test covers.
func ciValueFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no value files in %s/ci: %v", chartDir, err)
	}
	sort.Strings(files)
	return files
}

// object is one rendered manifest.
type object struct {
	// template is the chart file it came from.
	template string
	u        *unstructured.Unstructured
	// typed is the object decoded into its client-go type; nil for kinds
	// client-go does not know (ServiceMonitor).
	typed runtime.Object
}

func (o object) String() string {
	return fmt.Sprintf("%s %s (%s)", o.u.GetKind(), o.u.GetName(), o.template)
}

// release is a rendered chart.
type release struct {
	name, namespace string
	values          chartutil.Values
	objects         []object
}

// readValues reads a value file and applies overrides (dotted paths).
func readValues(t testing.TB, file string, overrides map[string]any) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if file != "" {
		v, err := chartutil.ReadValuesFile(file)
		if err != nil {
			t.Fatalf("read %s: %v", file, err)
		}
		vals = v
	}
	for path, v := range overrides {
		setPath(vals, path, v)
	}
	return vals
}

// setPath sets a dotted path in nested maps, creating them as needed.
func setPath(m map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

// renderValues renders the chart as `helm install --dry-run` would, with
// schema validation, and strict templates (a missing value is an error, as
// with `helm lint --strict`), as release npl in testNamespace.
func renderValues(t testing.TB, vals map[string]any) (*release, error) {
	return renderRelease(t, vals, "npl", testNamespace)
}

func renderRelease(t testing.TB, vals map[string]any, name, namespace string) (*release, error) {
	t.Helper()
	return renderReleaseWith(t, engine.Engine{Strict: true}, vals, name, namespace)
}

// renderReleaseWith renders with eng: engine.New gives one whose lookup
// reads a cluster, as `helm install` and `helm upgrade` do; the zero
// Engine's lookup finds nothing, as with `helm template`.
func renderReleaseWith(t testing.TB, eng engine.Engine, vals map[string]any, name, namespace string) (*release, error) {
	t.Helper()
	rel := &release{name: name, namespace: namespace}
	values, docs, err := chartrender.Render(eng, loadChart(t), vals, name, namespace)
	if err != nil {
		return nil, err
	}
	rel.values = values
	for _, d := range docs {
		obj, err := decode(d.Template, d.YAML)
		if err != nil {
			return nil, err
		}
		rel.objects = append(rel.objects, obj)
	}
	return rel, nil
}

// render renders a value file, failing the test on error.
func render(t testing.TB, file string, overrides map[string]any) *release {
	t.Helper()
	rel, err := renderValues(t, readValues(t, file, overrides))
	if err != nil {
		t.Fatalf("render %s %v: %v", filepath.Base(file), overrides, err)
	}
	return rel
}

func decode(template, doc string) (object, error) {
	var m map[string]any
	if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
		return object{}, fmt.Errorf("%s: not valid YAML: %w\n%s", template, err, doc)
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
		return object{}, fmt.Errorf("%s: a document without apiVersion, kind or name:\n%s", template, doc)
	}
	obj := object{template: template, u: u}
	if scheme.Scheme.Recognizes(u.GroupVersionKind()) {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return object{}, err
		}
		// Strict: a misspelt field of a known kind is an error here, before
		// the API server would drop or reject it.
		typed, _, err := serializerStrict.Decode(js, nil, nil)
		if err != nil {
			return object{}, fmt.Errorf("%s: %s %s: %w", template, u.GetKind(), u.GetName(), err)
		}
		obj.typed = typed
	}
	return obj, nil
}

var serializerStrict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	kjson.SerializerOptions{Strict: true})

// find returns the objects of a kind.
func (r *release) find(kind string) []object {
	var out []object
	for _, o := range r.objects {
		if o.u.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one returns the object of a kind and name, failing the test if missing.
func (r *release) one(t testing.TB, kind, name string) object {
	t.Helper()
	for _, o := range r.find(kind) {
		if o.u.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered; have %v", kind, name, r.objects)
	return object{}
}

func (r *release) has(kind, name string) bool {
	for _, o := range r.find(kind) {
		if o.u.GetName() == name {
			return true
		}
	}
	return false
}

// podSpec returns the Pod template of a workload.
func podSpec(o object) (*corev1.PodSpec, map[string]string) {
	switch w := o.typed.(type) {
	case *appsv1.DaemonSet:
		return &w.Spec.Template.Spec, w.Spec.Template.Labels
	case *appsv1.Deployment:
		return &w.Spec.Template.Spec, w.Spec.Template.Labels
	case *batchv1.Job:
		return &w.Spec.Template.Spec, w.Spec.Template.Labels
	}
	return nil, nil
}

func workloads(r *release) []object {
	var out []object
	for _, o := range r.objects {
		if spec, _ := podSpec(o); spec != nil {
			out = append(out, o)
		}
	}
	return out
}

// writeFile writes a file, creating its directory.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
