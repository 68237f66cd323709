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
)

// fill sets every field reachable from v to a non-zero value: pointers
// allocated, slices and maps of one element.
func fill(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct && v.Type().Elem().PkgPath() == "time" {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type().PkgPath() == "time" {
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), depth+1)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Bool:
		v.SetBool(true)
	}
}

// shared returns the paths at which a and b share memory.
func shared(a, b reflect.Value, path string) []string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return []string{path}
		}
		return shared(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		var out []string
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				out = append(out, shared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)...)
			}
		}
		return out
	case reflect.Slice:
		if a.Len() == 0 {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return []string{path}
		}
		var out []string
		for i := range a.Len() {
			out = append(out, shared(a.Index(i), b.Index(i), path+"[]")...)
		}
		return out
	case reflect.Map:
		if a.Len() > 0 && a.Pointer() == b.Pointer() {
			return []string{path}
		}
	}
	return nil
}

// A copy equals its original and shares no memory with it: a field added
// without its copy fails this.
func TestDeepCopy_sharesNothing(t *testing.T) {
	var p LoadBalancerPolicy
	fill(reflect.ValueOf(&p).Elem(), 0)
	c := p.DeepCopy()
	if diff := cmp.Diff(&p, c); diff != "" {
		t.Fatalf("copy differs (-original +copy):\n%s", diff)
	}
	if s := shared(reflect.ValueOf(&p).Elem(), reflect.ValueOf(c).Elem(), "policy"); len(s) > 0 {
		t.Errorf("the copy shares %v", s)
	}
	list := &LoadBalancerPolicyList{Items: []LoadBalancerPolicy{p}}
	lc := list.DeepCopyObject().(*LoadBalancerPolicyList)
	if s := shared(reflect.ValueOf(list).Elem(), reflect.ValueOf(lc).Elem(), "list"); len(s) > 0 {
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
