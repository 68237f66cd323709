// Package strictjson decodes a provider's configuration section strictly:
// npl-lbsync hands each provider its section as JSON, and a key that is
// misspelt, in another case, or of the wrong type must be an error naming
// it rather than a setting silently ignored. encoding/json alone matches
// keys case-insensitively, so the keys are compared exactly here, against
// the json tags of the target struct (the one list of valid keys).
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Decode decodes the JSON object data into v, a pointer to a struct. Empty
// data and null leave v as it is (an absent section is the defaults).
// prefix starts every error about a field ("provider.avi." gives
// "provider.avi.timeout: want a string, got a JSON number", "config: "
// gives "config: timeout: ..."); errors about the whole section start with
// prefix, a final dot turned into ": " ("provider.avi: "). The errors:
//
//	<key>: unknown field (valid: <keys of v in field order>)
//	<key>: want <a string|true or false|an integer|a number|...>, got a JSON <kind>
//	want a mapping, got a JSON <kind>   (or "want a mapping: <syntax error>")
//	unexpected data after the section
//
// Only the top-level keys are compared exactly; nested objects decode as
// encoding/json decodes them.
func Decode(data []byte, v any, prefix string) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "null" {
		return nil
	}
	section := prefix
	if p, ok := strings.CutSuffix(prefix, "."); ok {
		section = p + ": "
	}
	var keys map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&keys); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return fmt.Errorf("%swant a mapping, got a JSON %s", section, typeErr.Value)
		}
		return fmt.Errorf("%swant a mapping: %w", section, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%sunexpected data after the section", section)
	}
	valid := Keys(v)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !slices.Contains(valid, k) {
			return fmt.Errorf("%s%s: unknown field (valid: %s)", prefix, k, strings.Join(valid, ", "))
		}
	}
	if err := json.Unmarshal(data, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return fmt.Errorf("%s%s: want %s, got a JSON %s", prefix, typeErr.Field, want(typeErr.Type), typeErr.Value)
		}
		return fmt.Errorf("%s%w", section, err)
	}
	return nil
}

// Keys returns the JSON keys of the struct v points to, in field order.
func Keys(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// want spells what a field of type t takes, as a user writes it in YAML.
func want(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}
