package lbmodel

import (
	"reflect"
	"testing"
)

// TestClone_sharesNothing fills every field of a load balancer, down to the
// last pointer, slice and map, clones it and checks that the copy shares
// none of them with the original: a field added to the model without its
// line in Clone fails here.
func TestClone_sharesNothing(t *testing.T) {
	var lb LoadBalancer
	fill(reflect.ValueOf(&lb).Elem(), 0)
	clone := lb.Clone()
	if !reflect.DeepEqual(&lb, clone) {
		t.Fatalf("the clone differs from the original")
	}
	checkNotShared(t, "LoadBalancer", reflect.ValueOf(&lb).Elem(), reflect.ValueOf(clone).Elem())
}

// fill sets every field of v to a value that is not zero: one element per
// slice and map, a new value behind every pointer.
func fill(v reflect.Value, depth int) {
	if depth > 12 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), depth+1)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	}
}

// checkNotShared fails for every pointer, slice or map that a and b (equal
// values) share.
func checkNotShared(t *testing.T, path string, a, b reflect.Value) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the pointer", path)
			return
		}
		checkNotShared(t, path, a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				checkNotShared(t, path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
			}
		}
	case reflect.Slice:
		if a.Len() == 0 {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the slice", path)
			return
		}
		for i := range a.Len() {
			checkNotShared(t, path+"[]", a.Index(i), b.Index(i))
		}
	case reflect.Map:
		if a.Len() == 0 {
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s: the clone shares the map", path)
		}
	}
}
