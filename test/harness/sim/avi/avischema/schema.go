// Package avischema checks Avi Controller request bodies against the
// vendor's own schema: the Swagger 2.0 files (swagger/<Type>.json) of the
// alb-sdk module npl pins, read from the module cache, never copied into the
// repository. Swagger has no enum or range keywords for Avi: the limits live
// in the descriptions ("Enum options - …", "Allowed values are 1-65535.
// Special values are 0- …", "Maximum of 5000 items allowed", "It is a
// reference to an object of type Pool", "Field introduced in 20.1.5"), and
// this package parses them too.
//
// The Avi simulator validates every body with it, so every test that talks
// to the simulator (the provider's unit tests and the end-to-end suites)
// checks every request npl sends; the provider's own tests use it to check
// their constants (pool size limits, enum values) against the schema.
package avischema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
)

// Module is the Go module whose swagger directory holds the schema.
const Module = "github.com/vmware/alb-sdk"

// Schema is the object schema of one Avi API version. Types are read from
// their files on first use. It is safe for concurrent use.
type Schema struct {
	// Version is the API version the files describe (their info.version,
	// 20.1.7 for the pinned module).
	Version string
	dir     string

	mu    sync.Mutex
	files map[string]string // object type ("pool") -> file
	types map[string]*Def   // object type -> its root definition, once read
}

// Def is one definition: an object and its properties.
type Def struct {
	Name     string
	Required []string
	Props    map[string]*Prop
}

// Prop is one property with what its description says of it.
type Prop struct {
	Name string
	// Kind is the JSON type: string, integer, number, boolean, array or
	// object.
	Kind string
	// Object is the definition of an object property or of array items.
	Object *Def
	// Items is the element of an array.
	Items *Prop
	// Enum lists the values a string may take ("Enum options - …").
	Enum []string
	// Range is the interval of an integer ("Allowed values are 1-65535"),
	// Special its values outside it ("Special values are 0- …").
	Range   *[2]int64
	Special []int64
	// MaxItems and MinItems bound an array ("Maximum of 5000 items
	// allowed", "Minimum of 1 items required").
	MaxItems, MinItems int
	// RefType is the object type a reference names ("pool" for "It is a
	// reference to an object of type Pool").
	RefType string
	// Introduced is the versions the field appeared in ("Field introduced
	// in 17.2.12, 18.1.3, 18.2.1"), one per release branch.
	Introduced []Version
	ReadOnly   bool
	// Default is the value the controller fills in when the field is left
	// out.
	Default any
}

var (
	pinnedOnce sync.Once
	pinned     *Schema
	pinnedErr  error
)

// Pinned returns the schema of the alb-sdk version npl's go.mod pins: the
// module's directory in the module cache, from the version the running
// binary was built with, else from `go list -m`. It is read once per
// process.
func Pinned() (*Schema, error) {
	pinnedOnce.Do(func() {
		dir, ok := cachedModuleDir()
		if !ok {
			if dir, pinnedErr = moduleDir(); pinnedErr != nil {
				return
			}
		}
		pinned, pinnedErr = Open(filepath.Join(dir, "swagger"))
	})
	return pinned, pinnedErr
}

// cachedModuleDir finds the module in the module cache from the version
// the running binary links, without the go command.
func cachedModuleDir() (string, bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, dep := range info.Deps {
		if dep.Replace != nil {
			dep = dep.Replace
		}
		if dep.Path != Module || dep.Version == "" {
			continue
		}
		cache := os.Getenv("GOMODCACHE")
		if cache == "" {
			gopath := os.Getenv("GOPATH")
			if gopath == "" {
				home, err := os.UserHomeDir()
				if err != nil {
					return "", false
				}
				gopath = filepath.Join(home, "go")
			}
			cache = filepath.Join(filepath.SplitList(gopath)[0], "pkg", "mod")
		}
		dir := filepath.Join(cache, escapePath(dep.Path)+"@"+escapePath(dep.Version))
		if _, err := os.Stat(filepath.Join(dir, "swagger", "Pool.json")); err == nil {
			return dir, true
		}
	}
	return "", false
}

// escapePath spells a module path or version as the module cache does:
// an upper-case letter as ! and its lower case.
func escapePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// moduleDir asks the go command where the pinned alb-sdk module is.
func moduleDir() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-json", Module)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("avischema: go list -m %s: %w: %s", Module, err, strings.TrimSpace(stderr.String()))
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("avischema: go list -m %s: %w", Module, err)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("avischema: module %s is not downloaded (go mod download %s)", Module, Module)
	}
	return m.Dir, nil
}

// Open reads the schema in a swagger directory: which file describes which
// object type, and the API version from Pool.json.
func Open(dir string) (*Schema, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("avischema: %w", err)
	}
	s := &Schema{dir: dir, files: map[string]string{}, types: map[string]*Def{}}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			s.files[strings.ToLower(name)] = e.Name()
		}
	}
	var doc struct {
		Info struct{ Version string } `json:"info"`
	}
	if err := readJSON(filepath.Join(dir, "Pool.json"), &doc); err != nil {
		return nil, err
	}
	if doc.Info.Version == "" {
		return nil, errors.New("avischema: Pool.json has no info.version")
	}
	s.Version = doc.Info.Version
	return s, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("avischema: %w", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("avischema: %s: %w", filepath.Base(path), err)
	}
	return nil
}

// Type returns the root definition of the object type typ (the collection
// name: "pool", "virtualservice"), or nil when the schema has no file for it.
func (s *Schema) Type(typ string) (*Def, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.types[typ]; ok {
		return d, nil
	}
	file, ok := s.files[typ]
	if !ok {
		s.types[typ] = nil
		return nil, nil
	}
	var doc swaggerDoc
	if err := readJSON(filepath.Join(s.dir, file), &doc); err != nil {
		return nil, err
	}
	root, err := doc.rootOf(typ)
	if err != nil {
		return nil, fmt.Errorf("avischema: %s: %w", file, err)
	}
	d := newBuilder(doc.Definitions).def(root)
	s.types[typ] = d
	return d, nil
}

// swaggerDoc is the part of a swagger file the schema reads.
type swaggerDoc struct {
	Paths       map[string]map[string]swaggerOp `json:"paths"`
	Definitions map[string]swaggerDef           `json:"definitions"`
}

type swaggerOp struct {
	Parameters []struct {
		In     string `json:"in"`
		Schema struct {
			Ref string `json:"$ref"`
		} `json:"schema"`
	} `json:"parameters"`
}

type swaggerDef struct {
	Required   []string               `json:"required"`
	Properties map[string]swaggerProp `json:"properties"`
}

type swaggerProp struct {
	Description string       `json:"description"`
	Type        string       `json:"type"`
	Ref         string       `json:"$ref"`
	Items       *swaggerProp `json:"items"`
	ReadOnly    bool         `json:"readOnly"`
	Default     any          `json:"default"`
}

// rootOf finds the definition POST /<typ> takes.
func (d *swaggerDoc) rootOf(typ string) (string, error) {
	op, ok := d.Paths["/"+typ]["post"]
	if !ok {
		return "", fmt.Errorf("no POST /%s", typ)
	}
	for _, p := range op.Parameters {
		if p.In == "body" && p.Schema.Ref != "" {
			return refName(p.Schema.Ref), nil
		}
	}
	return "", fmt.Errorf("POST /%s takes no body", typ)
}

func refName(ref string) string { return ref[strings.LastIndexByte(ref, '/')+1:] }

// builder turns swagger definitions into Defs, each once, so that recursive
// definitions end.
type builder struct {
	raw  map[string]swaggerDef
	done map[string]*Def
}

func newBuilder(raw map[string]swaggerDef) *builder {
	return &builder{raw: raw, done: map[string]*Def{}}
}

func (b *builder) def(name string) *Def {
	if d, ok := b.done[name]; ok {
		return d
	}
	raw := b.raw[name]
	d := &Def{Name: name, Required: raw.Required, Props: make(map[string]*Prop, len(raw.Properties))}
	b.done[name] = d
	for pn, rp := range raw.Properties {
		d.Props[pn] = b.prop(pn, rp)
	}
	return d
}

func (b *builder) prop(name string, rp swaggerProp) *Prop {
	p := &Prop{Name: name, Kind: rp.Type, ReadOnly: rp.ReadOnly, Default: rp.Default}
	describe(p, rp.Description)
	switch {
	case rp.Ref != "":
		p.Kind, p.Object = "object", b.def(refName(rp.Ref))
	case rp.Type == "array" && rp.Items != nil:
		// An array's limits and reference type are in its own description;
		// its items have none.
		p.Items = b.prop(name, swaggerProp{Type: rp.Items.Type, Ref: rp.Items.Ref})
		p.Items.Enum, p.Items.Range, p.Items.Special, p.Items.RefType = p.Enum, p.Range, p.Special, p.RefType
		p.Enum, p.Range, p.Special, p.RefType = nil, nil, nil, ""
	case rp.Type == "":
		p.Kind = "object"
	}
	return p
}
