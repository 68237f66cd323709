package avi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
)

// preflightConfig is a provider.avi configuration for sim, logging in as
// user with password; change edits it.
func preflightConfig(t *testing.T, sim *avisim.Server, user, password string, change func(*Config)) *Config {
	t.Helper()
	dir := t.TempDir()
	cfg := &Config{Controller: sim.Host(), Tenant: "admin", Cloud: "Default-Cloud", ServiceEngineGroup: "Default-Group",
		VIPNetwork: "vip-net", UsernameFile: writeFile(t, dir, "u", user), PasswordFile: writeFile(t, dir, "p", password),
		CAFile: writeFile(t, dir, "ca", string(sim.CACertPEM())), Timeout: 5 * time.Second, ClusterName: cluster}
	if change != nil {
		change(cfg)
	}
	return cfg
}

func startSim(t *testing.T, opts avisim.Options) *avisim.Server {
	t.Helper()
	sim := avisim.New(opts)
	if _, err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	return sim
}

// results renders checks as "name result" lines, and the details of the
// problems and warnings.
func results(checks []providers.Check) []string {
	var out []string
	for _, c := range checks {
		line := c.Name + " " + c.Result
		if c.Result != providers.CheckOK {
			line += ": " + c.Detail
		}
		out = append(out, line)
	}
	return out
}

func TestPreflight(t *testing.T) {
	sim := startSim(t, avisim.Options{Username: "admin", Password: "admin"})
	if _, err := sim.Create("admin", "role", map[string]any{"name": "read-only", "privileges": []any{
		map[string]any{"resource": "PERMISSION_VIRTUALSERVICE", "type": "READ_ACCESS"},
		map[string]any{"resource": "PERMISSION_POOL", "type": "WRITE_ACCESS"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := sim.AddUser("viewer", "view", "read-only", "admin"); err != nil {
		t.Fatal(err)
	}
	if err := sim.AddUser("operator", "op", "System-Admin", "admin"); err != nil {
		t.Fatal(err)
	}
	untrusted := func(c *Config) { c.CAFile = caFile(t, t.TempDir()) }
	for _, tc := range []struct {
		name           string
		user, password string
		change         func(*Config)
		want           []string
	}{
		{"everything there", "admin", "admin", nil, []string{"tls ok", "login ok", "version ok", "tenant ok", "cloud ok",
			"serviceEngineGroup ok", "vipNetwork ok", "rights ok"}},
		{"a user with the System-Admin role", "operator", "op", nil, []string{"tls ok", "login ok", "version ok", "tenant ok",
			"cloud ok", "serviceEngineGroup ok", "vipNetwork ok", "rights ok"}},
		{"a read-only account", "viewer", "view", nil, []string{"tls ok", "login ok", "version ok", "tenant ok", "cloud ok",
			"serviceEngineGroup ok", "vipNetwork ok",
			"rights problem: viewer may not create and delete what npl makes in tenant admin: no WRITE_ACCESS to " +
				"PERMISSION_VIRTUALSERVICE, PERMISSION_POOLGROUP, PERMISSION_L4POLICYSET, PERMISSION_HTTPPOLICYSET, PERMISSION_SSLKEYANDCERTIFICATE"}},
		{"a missing cloud", "admin", "admin", func(c *Config) { c.Cloud = "vcenter" }, []string{"tls ok", "login ok", "version ok",
			"tenant ok", `cloud problem: cloud "vcenter" does not exist in tenant admin (or the account cannot see it)`,
			`serviceEngineGroup problem: serviceenginegroup "Default-Group" does not exist in tenant admin, cloud vcenter (or the account cannot see it)`,
			"vipNetwork ok", "rights ok"}},
		{"a wrong password", "admin", "nope", nil, []string{"tls ok", "login problem: log in as admin: Avi 401: Invalid credentials"}},
		{"an untrusted certificate", "admin", "admin", untrusted, []string{
			fmt.Sprintf("tls problem: connect to %s: tls: failed to verify certificate: x509: certificate signed by unknown authority", sim.Host())}},
		{"no verification", "admin", "admin", func(c *Config) { untrusted(c); c.InsecureSkipVerify = true }, []string{
			fmt.Sprintf("tls warning: %s: the certificate is not verified: insecureSkipVerify is set", sim.Host()),
			"login ok", "version ok", "tenant ok", "cloud ok", "serviceEngineGroup ok", "vipNetwork ok", "rights ok"}},
		{"a version newer than the controller's", "admin", "admin", func(c *Config) { c.Version = "30.2.1" }, []string{"tls ok", "login ok",
			"version problem: provider.avi.version 30.2.1: the controller runs 20.1.7 and answers no newer version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim.ResetCounters()
			checks := preflightConfig(t, sim, tc.user, tc.password, tc.change).Preflight(context.Background())
			if diff := cmp.Diff(tc.want, results(checks)); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
			if n := sim.Writes(); n != 0 {
				t.Errorf("the preflight made %d writes", n)
			}
		})
	}
	// The simulator refuses what the read-only account may not do, as
	// the preflight said.
	p, err := preflightConfig(t, sim, "viewer", "view", nil).open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Ensure(context.Background(), webLB("web", tcp(80, member("198.18.0.11", 61000))))
	if err == nil || !strings.Contains(err.Error(), "Avi 403: User viewer has no write access to VsVip (PERMISSION_VIRTUALSERVICE)") {
		t.Errorf("Ensure as the read-only account: %v", err)
	}
}
