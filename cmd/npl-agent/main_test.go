package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinary_linksOnlyTheAPIGroupsItUses: npl-agent links the types of
// core/v1 and discovery/v1 alone, and neither client-go's clientset nor its
// informers: with them (and the scheme of every API group they register)
// the binary was 51 MB and 33 MiB of its resident memory.
func TestBinary_linksOnlyTheAPIGroupsItUses(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for pkg := range strings.FieldsSeq(string(out)) {
		switch {
		case strings.HasPrefix(pkg, "k8s.io/api/") && pkg != "k8s.io/api/core/v1" && pkg != "k8s.io/api/discovery/v1",
			strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes"),
			strings.HasPrefix(pkg, "k8s.io/client-go/informers"),
			strings.HasPrefix(pkg, "k8s.io/client-go/applyconfigurations"):
			t.Errorf("npl-agent links %s", pkg)
		}
	}
}
