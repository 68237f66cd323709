package main

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
)

func TestParseFlags(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		want    config
		wantErr string
	}{
		{
			name: "all flags",
			args: []string{"--listen", "127.0.0.1:9443", "--ca-out", "/tmp/ca.crt", "--username", "u", "--password", "p",
				"--version", "30.1.1", "--vip-network", "net", "--vip-subnet", "198.18.100.0/24"},
			want: config{caOut: "/tmp/ca.crt", opts: avisim.Options{Addr: "127.0.0.1:9443", Username: "u", Password: "p",
				Version: "30.1.1", VIPNetwork: "net", VIPSubnet: netip.MustParsePrefix("198.18.100.0/24")}},
		},
		{
			name: "password file",
			args: []string{"--password-file", pwFile},
			want: config{opts: avisim.Options{Addr: "127.0.0.1:8443", Username: "admin", Password: "from-file",
				VIPNetwork: "vip-net", VIPSubnet: netip.MustParsePrefix("198.18.200.0/24")}},
		},
		{name: "unknown flag", args: []string{"--password", "p", "--frob"}, wantErr: "flag provided but not defined: -frob"},
		{name: "no password", args: nil, wantErr: "--password or --password-file is required"},
		{name: "both passwords", args: []string{"--password", "p", "--password-file", pwFile}, wantErr: "exclusive"},
		{name: "bad subnet", args: []string{"--password", "p", "--vip-subnet", "nope"}, wantErr: "--vip-subnet"},
		{name: "argument", args: []string{"--password", "p", "extra"}, wantErr: `unexpected argument "extra"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(config{}), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMain_badFlagExitsTwoWithOneLine runs main in a child process.
func TestMain_badFlagExitsTwoWithOneLine(t *testing.T) {
	if os.Getenv("AVISIM_RUN_MAIN") == "1" {
		os.Args = append([]string{"avisim"}, strings.Fields(os.Getenv("AVISIM_ARGS"))...)
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMain_badFlagExitsTwoWithOneLine$")
	cmd.Env = append(os.Environ(), "AVISIM_RUN_MAIN=1", "AVISIM_ARGS=--password p --listen")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("got %v, want exit status 2", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "avisim: ") {
		t.Errorf("stderr: got %q, want one line starting with avisim:", stderr.String())
	}
}
