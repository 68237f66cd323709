package lbsyncbed

import (
	"bytes"
	"encoding/json"
	"errors"
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
