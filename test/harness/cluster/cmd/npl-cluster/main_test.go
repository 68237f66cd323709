package main

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     config
		wantHelp bool
		wantErr  string
	}{
		{name: "defaults", args: nil, want: config{nodes: 3, kubeProxyMode: "iptables"}},
		{name: "all flags", args: []string{"--nodes", "5", "--bin-dir", "/opt/k8s", "--keep-logs", "--dual-stack"},
			want: config{nodes: 5, binDir: "/opt/k8s", keepLogs: true, dualStack: true, kubeProxyMode: "iptables"}},
		{name: "help", args: []string{"-h"}, wantHelp: true, want: config{nodes: 3, kubeProxyMode: "iptables"}},
		{name: "unknown flag", args: []string{"--bogus"}, wantErr: "npl-cluster: flag provided but not defined: -bogus"},
		{name: "not a number", args: []string{"--nodes", "x"}, wantErr: `npl-cluster: invalid value "x" for flag -nodes: parse error`},
		{name: "zero nodes", args: []string{"--nodes", "0"}, wantErr: "npl-cluster: --nodes must be between 1 and 200, not 0"},
		{name: "too many nodes", args: []string{"--nodes", "201"}, wantErr: "npl-cluster: --nodes must be between 1 and 200, not 201"},
		{name: "stray argument", args: []string{"up"}, wantErr: `npl-cluster: unexpected argument "up"`},
		{name: "real nodes", args: []string{"--real-nodes", "3", "--kube-proxy-mode", "nftables"}, want: config{nodes: 3, realNodes: 3, kubeProxyMode: "nftables"}},
		{name: "bad kube-proxy mode", args: []string{"--real-nodes", "1", "--kube-proxy-mode", "ipvs"},
			wantErr: `npl-cluster: --kube-proxy-mode is "ipvs"; want iptables or nftables`},
		{name: "too many real nodes", args: []string{"--real-nodes", "11"}, wantErr: "npl-cluster: --real-nodes must be between 1 and 10, not 11"},
		{name: "dual-stack real nodes", args: []string{"--real-nodes", "1", "--dual-stack"},
			want: config{nodes: 3, realNodes: 1, dualStack: true, kubeProxyMode: "iptables"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, help, err := parseFlags(tt.args)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Fatalf("error = %q, want %q", gotErr, tt.wantErr)
			}
			if err != nil {
				return
			}
			if help != tt.wantHelp {
				t.Errorf("help = %t, want %t", help, tt.wantHelp)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(config{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRun_badInputExitsTwoWithOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad flag", []string{"--nodes", "-1"}, "npl-cluster: --nodes must be between 1 and 200, not -1"},
		{"missing binaries", []string{"--bin-dir", "/nonexistent"},
			"npl test cluster: /nonexistent/etcd not found: run 'make tools', or point BinDir (--bin-dir) at the binaries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if diff := cmp.Diff(tt.want+"\n", stderr.String()); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}
