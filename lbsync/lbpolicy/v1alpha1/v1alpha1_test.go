package v1alpha1

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/charts"
	"github.com/nodeportlocal/npl/internal/copytest"
)

// A copy equals its original and shares no memory with it: a field added
// without its copy fails this.
func TestDeepCopy_sharesNothing(t *testing.T) {
	var p LoadBalancerPolicy
	copytest.Fill(&p)
	c := p.DeepCopy()
	if diff := cmp.Diff(&p, c); diff != "" {
		t.Fatalf("copy differs (-original +copy):\n%s", diff)
	}
	if s := copytest.Shared(&p, c, "policy"); len(s) > 0 {
		t.Errorf("the copy shares %v", s)
	}
	list := &LoadBalancerPolicyList{Items: []LoadBalancerPolicy{p}}
	lc := list.DeepCopyObject().(*LoadBalancerPolicyList)
	if s := copytest.Shared(list, lc, "list"); len(s) > 0 {
		t.Errorf("the list's copy shares %v", s)
	}
	var nilPolicy *LoadBalancerPolicy
	if nilPolicy.DeepCopy() != nil {
		t.Error("a nil policy's copy is not nil")
	}
}

// jsonFields returns the JSON names of the fields of t, inline structs
// flattened, with the type of each.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" && strings.Contains(opts, "inline") {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		out[name] = f.Type
	}
	return out
}

// compare checks that the schema s describes exactly the JSON fields of t,
// down to the leaves, and returns the paths that differ.
func compare(s apiextensionsv1.JSONSchemaProps, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[metav1.Condition]():
		return nil // the standard condition
	case t.Kind() == reflect.Slice:
		if s.Type != "array" || s.Items == nil || s.Items.Schema == nil {
			return []string{path + ": not an array in the schema"}
		}
		return compare(*s.Items.Schema, t.Elem(), path+"[]")
	case t.Kind() == reflect.Struct:
		if s.Type != "object" {
			return []string{path + ": not an object in the schema"}
		}
		var out []string
		fields := jsonFields(t)
		for name, ft := range fields {
			ps, ok := s.Properties[name]
			if !ok {
				out = append(out, path+"."+name+": missing from the schema")
				continue
			}
			out = append(out, compare(ps, ft, path+"."+name)...)
		}
		for name := range s.Properties {
			if _, ok := fields[name]; !ok {
				out = append(out, path+"."+name+": not in the Go type")
			}
		}
		return out
	case t.Kind() == reflect.String && s.Type != "string",
		(t.Kind() == reflect.Int32 || t.Kind() == reflect.Int64) && s.Type != "integer":
		return []string{path + ": schema type " + s.Type + " for Go " + t.Kind().String()}
	}
	return nil
}

// The CRD the chart installs describes the Go types field by field.
func TestCRD_matchesTheGoTypes(t *testing.T) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(charts.LoadBalancerPolicyCRD, &crd); err != nil {
		t.Fatalf("decode the CRD: %v", err)
	}
	if crd.Name != CRDName || crd.Spec.Group != GroupName || crd.Spec.Names.Kind != Kind || crd.Spec.Names.Plural != Resource.Resource ||
		crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("CRD %s: group %s, kind %s, plural %s, scope %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural, crd.Spec.Scope)
	}
	i := slices.IndexFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return v.Name == SchemeGroupVersion.Version
	})
	if i < 0 || !crd.Spec.Versions[i].Served || !crd.Spec.Versions[i].Storage || crd.Spec.Versions[i].Subresources == nil ||
		crd.Spec.Versions[i].Subresources.Status == nil {
		t.Fatalf("no served, stored %s with a status subresource", SchemeGroupVersion.Version)
	}
	root := crd.Spec.Versions[i].Schema.OpenAPIV3Schema
	var diffs []string
	diffs = append(diffs, compare(root.Properties["spec"], reflect.TypeFor[LoadBalancerPolicySpec](), "spec")...)
	diffs = append(diffs, compare(root.Properties["status"], reflect.TypeFor[PolicyStatus](), "status")...)
	slices.Sort(diffs)
	for _, d := range diffs {
		t.Error(d)
	}
}
