package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
)

// runNplctl runs nplctl with args and returns its exit code and output.
func runNplctl(args ...string) (int, string, string) {
	cmd := newCommand("nplctl")
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	code := cli.Execute(cmd, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestProviderCheck(t *testing.T) {
	sim := avisim.New(avisim.Options{Username: "admin", Password: "s3cret"})
	if _, err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user, password, ca := write("username", "admin\n"), write("password", "s3cret\n"), write("ca.crt", string(sim.CACertPEM()))
	config := func(cloud string) string {
		return write("config-"+cloud+".yaml", fmt.Sprintf(`clusterName: c1
provider:
  name: avi
  avi:
    controller: %s
    cloud: %s
    vipNetwork: vip-net
    usernameFile: %s
    passwordFile: %s
    caFile: %s
`, sim.Host(), cloud, user, password, ca))
	}

	code, out, errOut := runNplctl("provider", "check", "--config", config("Default-Cloud"))
	if code != 0 || out != "ok: avi: 8 checks passed\n" {
		t.Errorf("check of a good configuration: exit %d, %q %q", code, out, errOut)
	}

	code, out, _ = runNplctl("provider", "check", "--config", config("vcenter"))
	want := `problem: cloud: cloud "vcenter" does not exist in tenant admin (or the account cannot see it)
problem: serviceEngineGroup: serviceenginegroup "Default-Group" does not exist in tenant admin, cloud vcenter (or the account cannot see it)
`
	if code != 1 || out != want {
		t.Errorf("check of a missing cloud: exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}

	code, out, _ = runNplctl("provider", "check", "--config", config("vcenter"), "-o", "json")
	var report checkReport
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 1 || report.OK || report.Provider != "avi" || len(report.Checks) != 8 {
		t.Errorf("-o json: exit %d, %v, %+v", code, err, report)
	}
	if n := sim.Writes(); n != 0 {
		t.Errorf("the checks made %d writes", n)
	}

	if code, _, errOut := runNplctl("provider", "check"); code != 2 || !strings.Contains(errOut, "--config is required") {
		t.Errorf("without --config: exit %d, %q", code, errOut)
	}
}
