package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/internal/cli"
)

func TestCleanupCommand_badConfigExits2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("clusterName: c1\nprovider: {name: nope}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newCommand()
	cmd.SetArgs([]string{"cleanup", "--config", path, "--kubeconfig", filepath.Join(t.TempDir(), "none")})
	var stderr bytes.Buffer
	if code := cli.Execute(cmd, &stderr); code != 2 {
		t.Errorf("exit code = %d; want 2 (stderr %q)", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "provider.name") {
		t.Errorf("stderr = %q; want it to name provider.name", stderr.String())
	}
}
