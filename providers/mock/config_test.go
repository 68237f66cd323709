package mock

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeportlocal/npl/providers"
)

func TestParse(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := common("203.0.113.0/29")
	tests := []struct {
		name    string
		section string
		want    *Config
		wantErr string
	}{
		{name: "absent section", section: "", want: &Config{Common: c}},
		{name: "null section", section: "null", want: &Config{Common: c}},
		{name: "empty section", section: "{}", want: &Config{Common: c}},
		{
			name:    "every field",
			section: `{"stateFile":"` + filepath.Join(dir, "state.json") + `","latency":"150ms","failCalls":3,"allowFaultInjection":true}`,
			want: &Config{Common: c, StateFile: filepath.Join(dir, "state.json"), Latency: 150 * time.Millisecond,
				FailCalls: 3, AllowFaultInjection: true},
		},
		{name: "unknown field", section: `{"latency":"1s","stateFIle":"x"}`, wantErr: "stateFIle: unknown field"},
		{name: "field name case matters", section: `{"Latency":"1s"}`, wantErr: "Latency: unknown field"},
		{name: "wrong type", section: `{"failCalls":"3"}`, wantErr: "failCalls: want an integer, got a JSON string"},
		{name: "bad latency", section: `{"latency":"fast"}`, wantErr: `latency: time: invalid duration "fast"`},
		{name: "negative latency", section: `{"latency":"-1s"}`, wantErr: "latency: -1s is negative"},
		{name: "negative failCalls", section: `{"failCalls":-2}`, wantErr: "failCalls: -2 is negative"},
		{name: "not a mapping", section: `["x"]`, wantErr: "want a mapping"},
		{
			name:    "stateFile in a missing directory",
			section: `{"stateFile":"` + filepath.Join(dir, "missing", "state.json") + `"}`,
			wantErr: "stateFile: stat " + filepath.Join(dir, "missing") + ": no such file or directory",
		},
		{
			name:    "stateFile under a file",
			section: `{"stateFile":"` + filepath.Join(file, "state.json") + `"}`,
			wantErr: "stateFile: " + file + " is not a directory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(c, []byte(tt.section))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(providers.Config(tt.want), got, cmpopts.EquateComparable(netip.Prefix{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
