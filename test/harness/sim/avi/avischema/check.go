package avischema

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// Violation is one way a body breaks the schema.
type Violation struct {
	// Path is where, as a JSON path: servers[3].port.
	Path string
	Msg  string
}

func (v Violation) String() string {
	if v.Path == "" {
		return v.Msg
	}
	return v.Path + ": " + v.Msg
}

// Error joins violations into one error, nil when there are none.
func Error(vs []Violation) error {
	if len(vs) == 0 {
		return nil
	}
	msgs := make([]string, len(vs))
	for i, v := range vs {
		msgs[i] = v.String()
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// Check returns how body, a decoded JSON object sent to POST or PUT
// /api/<typ> with X-Avi-Version version, breaks the schema: unknown fields,
// fields the version does not have, missing required fields, wrong JSON
// types, enum values, ranges, item counts. Read-only fields the controller
// sets (uuid, url, _last_modified) are accepted, as the controller ignores
// them. An unknown typ has no violations.
func (s *Schema) Check(typ string, body map[string]any, version Version) ([]Violation, error) {
	d, err := s.Type(typ)
	if err != nil || d == nil {
		return nil, err
	}
	c := &checker{version: version}
	c.object("", d, body)
	sort.SliceStable(c.out, func(i, j int) bool { return c.out[i].Path < c.out[j].Path })
	return c.out, nil
}

type checker struct {
	version Version
	out     []Violation
}

func (c *checker) add(path, format string, args ...any) {
	c.out = append(c.out, Violation{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func (c *checker) object(path string, d *Def, obj map[string]any) {
	for _, req := range requiredIn(d, c.version) {
		if v, ok := obj[req]; !ok || v == nil {
			c.add(join(path, req), "This field is required.")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		p := d.Props[k]
		switch {
		case p == nil || removedIn(d, k, c.version):
			c.add(join(path, k), "unknown field of %s in API version %s", d.Name, c.version)
		case !knownIn(p.Introduced, c.version):
			c.add(join(path, k), "field introduced in %s, not in API version %s", versions(p.Introduced), c.version)
		case v == nil:
			// null is "not set" to the controller, as the alb-sdk sends
			// unset fields without omitempty.
		default:
			c.value(join(path, k), d, p, v)
		}
	}
}

// value checks v, the value of field p of an object of definition owner.
func (c *checker) value(path string, owner *Def, p *Prop, v any) {
	switch p.Kind {
	case "string":
		s, ok := v.(string)
		if !ok {
			c.add(path, "expected a string, got %s", jsonType(v))
			return
		}
		if enum := enumIn(owner, p, c.version); len(enum) > 0 && !slices.Contains(enum, s) {
			c.add(path, "%q is not one of %s", s, strings.Join(enum, ", "))
		}
	case "integer", "number":
		n, ok := number(v)
		if !ok {
			c.add(path, "expected a number, got %s", jsonType(v))
			return
		}
		if p.Kind == "integer" && n != math.Trunc(n) {
			c.add(path, "expected an integer, got %v", v)
			return
		}
		if p.Range != nil && (n < float64(p.Range[0]) || n > float64(p.Range[1])) && !slices.Contains(p.Special, int64(n)) {
			c.add(path, "%v is not allowed: %s", v, allowed(p))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			c.add(path, "expected true or false, got %s", jsonType(v))
		}
	case "array":
		items, ok := v.([]any)
		if !ok {
			c.add(path, "expected an array, got %s", jsonType(v))
			return
		}
		if p.MaxItems > 0 && len(items) > p.MaxItems {
			c.add(path, "%d items, at most %d allowed", len(items), p.MaxItems)
		}
		if p.MinItems > 0 && len(items) < p.MinItems {
			c.add(path, "%d items, at least %d required", len(items), p.MinItems)
		}
		if p.Items == nil {
			return
		}
		for i, it := range items {
			if it == nil {
				c.add(fmt.Sprintf("%s[%d]", path, i), "null item")
				continue
			}
			c.value(fmt.Sprintf("%s[%d]", path, i), owner, p.Items, it)
		}
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			c.add(path, "expected an object, got %s", jsonType(v))
			return
		}
		if p.Object != nil {
			c.object(path, p.Object, obj)
		}
	}
}

func allowed(p *Prop) string {
	var parts []string
	if p.Range[0] <= p.Range[1] {
		parts = append(parts, fmt.Sprintf("%d-%d", p.Range[0], p.Range[1]))
	}
	for _, s := range p.Special {
		parts = append(parts, fmt.Sprint(s))
	}
	return "allowed values are " + strings.Join(parts, ", ")
}

func versions(vs []Version) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return strings.Join(out, ", ")
}

// number reads a decoded JSON number (float64 or json.Number).
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	}
	return 0, false
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	case nil:
		return "null"
	}
	if _, ok := number(v); ok {
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// Ref is one reference field met in an object.
type Ref struct {
	// Path is where it is, as in Violation.
	Path string
	// Type is the object type it must name ("pool"), from its description.
	Type string
	// Value is the reference as sent.
	Value string
}

// Refs lists the references in obj, an object of type typ, with the object
// type each must name.
func (s *Schema) Refs(typ string, obj map[string]any) ([]Ref, error) {
	d, err := s.Type(typ)
	if err != nil || d == nil {
		return nil, err
	}
	var out []Ref
	var walk func(path string, d *Def, obj map[string]any)
	var value func(path string, p *Prop, v any)
	value = func(path string, p *Prop, v any) {
		switch t := v.(type) {
		case string:
			if p.RefType != "" {
				out = append(out, Ref{Path: path, Type: p.RefType, Value: t})
			}
		case []any:
			if p.Items != nil {
				for i, it := range t {
					value(fmt.Sprintf("%s[%d]", path, i), p.Items, it)
				}
			}
		case map[string]any:
			if p.Object != nil {
				walk(path, p.Object, t)
			}
		}
	}
	walk = func(path string, d *Def, obj map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if p := d.Props[k]; p != nil {
				value(join(path, k), p, obj[k])
			}
		}
	}
	walk("", d, obj)
	return out, nil
}

// FillDefaults sets, in obj (an object of type typ) and in every object it
// holds, the scalar fields the schema gives a default and obj leaves out,
// as the controller does before it stores an object: what a client reads
// back holds them.
func (s *Schema) FillDefaults(typ string, obj map[string]any, version Version) error {
	d, err := s.Type(typ)
	if err != nil || d == nil {
		return err
	}
	var walk func(d *Def, obj map[string]any)
	walk = func(d *Def, obj map[string]any) {
		for name, p := range d.Props {
			v, present := obj[name]
			if (!present || v == nil) && p.Default != nil && !p.ReadOnly && p.Kind != "array" && p.Kind != "object" &&
				knownIn(p.Introduced, version) {
				obj[name] = p.Default
				continue
			}
			switch t := v.(type) {
			case map[string]any:
				if p.Object != nil {
					walk(p.Object, t)
				}
			case []any:
				if p.Items != nil && p.Items.Object != nil {
					for _, it := range t {
						if m, ok := it.(map[string]any); ok {
							walk(p.Items.Object, m)
						}
					}
				}
			}
		}
	}
	walk(d, obj)
	return nil
}
