// Package copytest checks deep copies in tests: Fill gives every field of a
// value something to copy, Shared names what a copy still shares with its
// original. A type's copy test fills one, copies it and wants nothing
// shared, so a field added without its line in the copy fails it.
package copytest

import "reflect"

// maxDepth bounds Fill on recursive types.
const maxDepth = 12

// Fill sets every exported field reachable from ptr (a pointer) to a value
// that is not zero: pointers allocated, slices and maps of one element,
// strings "x", numbers 1, booleans true. time's types are left zero.
func Fill(ptr any) { fill(reflect.ValueOf(ptr).Elem(), 0) }

func fill(v reflect.Value, depth int) {
	if depth > maxDepth {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem().PkgPath() == "time" {
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

// Shared returns the paths (from root) of the pointers, slices and maps
// that a and b, pointers to equal values, share.
func Shared(a, b any, root string) []string {
	return shared(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), root)
}

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
