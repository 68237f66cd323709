package layering

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nodeportlocal/npl/"

// allowed says, for each product package (by the longest matching prefix
// of its path within the module), which npl packages it may depend on,
// directly or not: "x" is the package x, "x/..." x and every package below
// it. Anything not listed (test/, cmd/, hack/) is not checked: the
// binaries and the tests sit on top of everything.
var allowed = map[string][]string{
	"lbmodel":  {},
	"contract": {},
	// The small pieces every binary shares use only each other.
	"internal": {"internal/..."},
	// npl-edge serves the model it receives over its own wire format; it
	// knows nothing of npl-lbsync or its providers.
	"edge": {"edge/...", "lbmodel", "internal/..."},
	// The provider interface and its check sit right above the model.
	"providers": {"lbmodel"},
	// Each provider sees the interface and the model, never a sibling
	// provider; vippool is their shared VIP allocation, and the haproxy
	// provider speaks npl-edge's wire format.
	"providers/avi":          {"providers/avi/...", "providers", "lbmodel", "internal/..."},
	"providers/bigip":        {"providers/bigip/...", "providers", "providers/vippool", "lbmodel", "internal/..."},
	"providers/haproxy":      {"providers/haproxy/...", "providers", "providers/vippool", "edge/api", "lbmodel", "internal/..."},
	"providers/mock":         {"providers/mock/...", "providers", "providers/vippool", "lbmodel", "internal/..."},
	"providers/providertest": {"providers", "lbmodel"},
	"providers/vippool":      {},
	// The registry is the one place that knows every provider.
	"providers/registry": {"providers/...", "edge/api", "lbmodel", "internal/..."},
	"agent":              {"agent/...", "contract", "internal/..."},
	// npl-lbsync builds models and hands them to a Provider; only its
	// configuration opens the registry.
	"lbsync":        {"lbsync/...", "providers", "lbmodel", "contract", "internal/..."},
	"lbsync/config": {"lbsync/...", "providers/...", "edge/api", "lbmodel", "contract", "internal/..."},
}

func rule(pkg string) (string, bool) {
	best := ""
	for prefix := range allowed {
		if matches(pkg, prefix+"/...") && len(prefix) > len(best) {
			best = prefix
		}
	}
	return best, best != ""
}

// matches reports whether pkg is what pattern names ("x" or "x/...").
func matches(pkg, pattern string) bool {
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == tree || strings.HasPrefix(pkg, tree+"/")
	}
	return pkg == pattern
}

func TestImportGraph_nothingImportsUpward(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			continue
		}
		prefix, ok := rule(pkg)
		if !ok {
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			d, ok := strings.CutPrefix(dep, module)
			if !ok || slices.ContainsFunc(allowed[prefix], func(p string) bool { return matches(d, p) }) {
				continue
			}
			t.Errorf("%s depends on %s, which its layer (%s) may not use", pkg, d, prefix)
		}
	}
	if checked < 30 {
		t.Fatalf("checked %d packages; go list gave:\n%s", checked, out)
	}
}
