package lbsyncbed

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// NplctlPools runs `bin/nplctl pools -o json` with args and returns its
// report, its stderr and its exit code.
func NplctlPools(t *testing.T, args ...string) (inspect.Report, string, int) {
	t.Helper()
	bin, err := stack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "nplctl"), append([]string{"pools", "-o", "json"}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	code := 0
	var exit *exec.ExitError
	if err := cmd.Run(); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run nplctl: %v", err)
	}
	var r inspect.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("nplctl pools %v: exit %d, output %q: %v\n%s", args, code, out.String(), err, stderr.String())
	}
	return r, stderr.String(), code
}

// EditMockState writes a copy of the mock's state file src to dst with
// edit applied to every pool (of any load balancer, a listener's or not):
// a load balancer that drifted, for nplctl to compare with, that
// npl-lbsync does not see. edit reports whether it changed the pool; the
// test fails when it changed none.
func EditMockState(t *testing.T, src, dst string, edit func(pool map[string]any) bool) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	edited := false
	apply := func(p any) {
		if m, ok := p.(map[string]any); ok && edit(m) {
			edited = true
		}
	}
	lbs, _ := st["loadBalancers"].([]any)
	for _, lb := range lbs {
		l, _ := lb.(map[string]any)
		ps, _ := l["pools"].([]any)
		for _, p := range ps {
			apply(p)
		}
		ls, _ := l["listeners"].([]any)
		for _, li := range ls {
			if m, ok := li.(map[string]any); ok {
				apply(m["pool"])
			}
		}
	}
	if !edited {
		t.Fatalf("no pool of %s changed", src)
	}
	out, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
