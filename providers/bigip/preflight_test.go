package bigip

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

func TestPreflight(t *testing.T) {
	results := func(checks []providers.Check) []string {
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
	for _, tc := range []struct {
		name     string
		opts     bigipsim.Options
		section  map[string]any
		setup    func(t *testing.T, sim *bigipsim.Server)
		password string
		want     []string
	}{
		{name: "an admin, the partition to create", want: []string{"tls ok", "login ok", "version ok", "rights ok", "partition ok"}},
		{name: "basic authentication, the partition there", section: map[string]any{"tokenAuth": false},
			setup: func(t *testing.T, sim *bigipsim.Server) {
				if status, out := sim.Do("POST", "/mgmt/tm/sys/folder", map[string]any{"name": testPartition, "partition": "/"}); status != 200 {
					t.Fatalf("create the partition: %d %s", status, out)
				}
			},
			want: []string{"tls ok", "login ok", "version ok", "rights ok", "partition ok"}},
		{name: "a read-only account", opts: bigipsim.Options{Role: "guest"}, want: []string{"tls ok", "login ok", "version ok",
			"rights problem: admin has the role guest on partition npl-c1: it may not create and delete pools, virtual servers and policies (needs admin, resource-admin, manager)",
			"partition problem: partition npl-c1 does not exist, and admin (role guest) may not create it: create it, or use an account with the admin role"}},
		{name: "a manager may not create the partition", opts: bigipsim.Options{Role: "manager"}, want: []string{"tls ok", "login ok", "version ok",
			"rights ok", "partition problem: partition npl-c1 does not exist, and admin (role manager) may not create it: create it, or use an account with the admin role"}},
		{name: "no partition and createPartition false", section: map[string]any{"createPartition": false}, want: []string{"tls ok",
			"login ok", "version ok", "rights ok", "partition problem: partition npl-c1 does not exist and createPartition is false"}},
		{name: "a wrong password", password: "nope", want: []string{"tls ok",
			"login problem: log in as admin: HTTP 401: Authentication failed."}},
		{name: "too old a BIG-IP", opts: bigipsim.Options{Version: "12.1.2"}, want: []string{"tls ok", "login ok",
			"version problem: BIG-IP 12.1.2 is older than 13.1, the oldest npl supports"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.TLS, opts.Username, opts.Password = true, "admin", "s3cret"
			sim := bigipsim.New(opts)
			if err := sim.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sim.Close)
			e := &env{sim: sim, dir: t.TempDir()}
			if tc.setup != nil {
				tc.setup(t, sim)
			}
			password := "s3cret"
			if tc.password != "" {
				password = tc.password
			}
			section := map[string]any{"url": sim.URL(), "usernameFile": e.write(t, "username", "admin\n"),
				"passwordFile": e.write(t, "password", password+"\n"), "caFile": e.write(t, "ca.pem", string(sim.CACertPEM()))}
			for k, v := range tc.section {
				section[k] = v
			}
			cfg, err := parseSection(section)
			if err != nil {
				t.Fatal(err)
			}
			sim.ResetCounters()
			checks := providers.PreflighterOf(cfg).Preflight(context.Background())
			if diff := cmp.Diff(tc.want, results(checks)); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
			if n := sim.Writes(); n != 0 {
				t.Errorf("the preflight made %d writes", n)
			}
		})
	}
}

// The account the preflight calls read-only is refused by the BIG-IP as it
// said: with BIG-IP's 401 "Authorization failed".
func TestPreflight_readOnlyAccountIsRefused(t *testing.T) {
	sim := bigipsim.New(bigipsim.Options{Username: "admin", Password: "s3cret", Role: "guest"})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := parseSection(map[string]any{"url": sim.URL(), "insecure": true, "usernameFile": write("u", "admin"), "passwordFile": write("p", "s3cret")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Ensure(context.Background(), newLB("shop/web", tcp(80, member("198.18.0.11", 61000))))
	if err == nil || !strings.Contains(err.Error(), "Authorization failed: user=admin resource=/tm/auth/partition verb=POST") {
		t.Errorf("Ensure as a guest: %v", err)
	}
}
