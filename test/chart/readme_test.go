package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// markdownTable returns the rows of the first table after the heading, as
// cells with surrounding spaces and backquotes removed.
func markdownTable(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no heading %q", heading)
	}
	var rows [][]string
	inTable := false
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i, c := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(c), "`")
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("no table under %q", heading)
	}
	return rows[1:] // without the header
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func chartValues(t *testing.T) map[string]any {
	t.Helper()
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(chartDir, "values.yaml"))), &vals); err != nil {
		t.Fatal(err)
	}
	return vals
}

// leaves lists the dotted paths of the values that are not maps (or are
// empty maps), with their values.
func leaves(prefix string, m map[string]any, out map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			leaves(prefix+k+".", sub, out)
			continue
		}
		out[prefix+k] = v
	}
}

func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func TestREADME_valuesTableListsEveryValueWithItsDefault(t *testing.T) {
	vals := chartValues(t)
	rows := markdownTable(t, readFile(t, filepath.Join(chartDir, "README.md")), "## Values")
	documented := map[string]bool{}
	for _, row := range rows {
		if len(row) != 3 {
			t.Errorf("row %v: want key, default, description", row)
			continue
		}
		key, def, desc := row[0], row[1], row[2]
		documented[key] = true
		v, ok := lookup(vals, key)
		if !ok {
			t.Errorf("README documents %s, which values.yaml does not have", key)
			continue
		}
		var got any
		if err := json.Unmarshal([]byte(def), &got); err != nil {
			t.Errorf("%s: default %s is not JSON: %v", key, def, err)
		} else if diff := cmp.Diff(v, got); diff != "" {
			t.Errorf("%s: README default differs from values.yaml (-values +README):\n%s", key, diff)
		}
		if desc == "" {
			t.Errorf("%s: no description", key)
		}
	}
	all := map[string]any{}
	leaves("", vals, all)
	var missing []string
	for path := range all {
		covered := false
		// A Kubernetes object passed through as is (resources, a security
		// context) is documented whole, with its default.
		for p := path; p != ""; p = parent(p) {
			covered = covered || documented[p]
		}
		if !covered {
			missing = append(missing, path)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("values.yaml keys missing from the README values table: %v", missing)
	}
}

func parent(path string) string {
	i := strings.LastIndex(path, ".")
	if i < 0 {
		return ""
	}
	return path[:i]
}
