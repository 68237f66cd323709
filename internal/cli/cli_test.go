package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nodeportlocal/npl/internal/buildinfo"
)

// TestNewRoot_versionPrintsTheBuildAlone: --version prints the build's
// description and nothing else, exits 0 and runs nothing, whatever comes
// with it, as cobra's Command.Version with the template "{{.Version}}\n"
// did; the flag is the root's alone and is listed in its help.
func TestNewRoot_versionPrintsTheBuildAlone(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"extra", "--version"}, {"--version", "--node-name", "n"}} {
		ran := false
		cmd := NewRoot(&cobra.Command{
			Use:  "npl-test",
			Args: cobra.NoArgs,
			RunE: func(*cobra.Command, []string) error { ran = true; return errors.New("ran") },
		})
		cmd.Flags().String("node-name", "", "")
		var stdout, stderr bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetArgs(args)
		if code := Execute(cmd, &stderr); code != 0 || ran {
			t.Errorf("%q: exit %d, ran %v, stderr %q; want 0 without running", args, code, ran, stderr.String())
		}
		if want := buildinfo.String("npl-test") + "\n"; stdout.String() != want {
			t.Errorf("%q printed %q, want %q", args, stdout.String(), want)
		}
	}

	cmd := NewRoot(&cobra.Command{Use: "npl-test", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }})
	sub := &cobra.Command{Use: "sub", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	cmd.AddCommand(sub)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if code := Execute(cmd, &out); code != 0 || !strings.Contains(out.String(), "--version   version for npl-test") {
		t.Errorf("help (exit %d) lacks the --version flag:\n%s", code, out.String())
	}
	var stderr bytes.Buffer
	cmd.SetArgs([]string{"sub", "--version"})
	if code := Execute(cmd, &stderr); code != 2 || !strings.Contains(stderr.String(), "unknown flag: --version") {
		t.Errorf("sub --version: exit %d, %q; want 2, unknown flag", code, stderr.String())
	}
}
