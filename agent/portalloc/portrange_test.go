package portalloc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		in      string
		want    Range
		wantErr string
	}{
		{in: "61000-62000", want: Range{Start: 61000, End: 62000}},
		{in: " 1-65535 ", want: Range{Start: 1, End: 65535}},
		{in: "61000-61000", want: Range{Start: 61000, End: 61000}},
		{in: "62000-61000", wantErr: "reversed"},
		{in: "0-100", wantErr: "out of 1-65535"},
		{in: "61000-65536", wantErr: "out of 1-65535"},
		{in: "61000", wantErr: "want START-END"},
		{in: "", wantErr: "want START-END"},
		{in: "a-b", wantErr: "not a port number"},
		{in: "61000-", wantErr: "not a port number"},
		{in: "-1-5", wantErr: "not a port number"},
		{in: "61000:62000", wantErr: "want START-END"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRange(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRange(%q) = %v, %v; want an error mentioning %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRange(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseRange(%q) (-want +got):\n%s", tt.in, diff)
			}
			if round, err := ParseRange(got.String()); err != nil || round != got {
				t.Errorf("ParseRange(%q) does not round-trip: %v, %v", got.String(), round, err)
			}
		})
	}
}

func TestRange_Overlaps(t *testing.T) {
	npl := Range{Start: 61000, End: 62000}
	tests := []struct {
		name  string
		other Range
		want  bool
	}{
		{"default ephemeral range ends below", Range{Start: 32768, End: 60999}, false},
		{"ephemeral range reaching into it", Range{Start: 32768, End: 61000}, true},
		{"starts at its end", Range{Start: 62000, End: 65535}, true},
		{"starts after its end", Range{Start: 62001, End: 65535}, false},
		{"inside it", Range{Start: 61500, End: 61501}, true},
		{"around it", Range{Start: 1024, End: 65535}, true},
		{"NodePort range", DefaultNodePortRange, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := npl.Overlaps(tt.other); got != tt.want {
				t.Errorf("%v.Overlaps(%v) = %v, want %v", npl, tt.other, got, tt.want)
			}
			if got := tt.other.Overlaps(npl); got != tt.want {
				t.Errorf("%v.Overlaps(%v) = %v, want %v (symmetry)", tt.other, npl, got, tt.want)
			}
		})
	}
}

func TestReadLocalPortRange(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    Range
		wantErr string
	}{
		{name: "kernel format", content: "32768\t60999\n", want: Range{Start: 32768, End: 60999}},
		{name: "one field", content: "32768\n", wantErr: "unexpected content"},
		{name: "reversed", content: "60999 32768\n", wantErr: "reversed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ip_local_port_range")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readLocalPortRange(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readLocalPortRange = %v, %v; want an error mentioning %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("readLocalPortRange = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLocalPortRange_readsTheKernelSetting(t *testing.T) {
	r, err := LocalPortRange()
	if err != nil {
		t.Fatalf("LocalPortRange: %v", err)
	}
	if err := r.Validate(); err != nil {
		t.Errorf("LocalPortRange = %v: %v", r, err)
	}
}

func TestCheckRange(t *testing.T) {
	local, err := LocalPortRange()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		r       Range
		wantErr string
	}{
		{name: "overlaps the NodePort range", r: Range{Start: 30000, End: 30010}, wantErr: "NodePort range"},
		{name: "overlaps the ephemeral range", r: Range{Start: local.End, End: local.End}, wantErr: "ephemeral port range"},
		{name: "reversed", r: Range{Start: 62000, End: 61000}, wantErr: "reversed"},
	}
	// A range clear of both, when the machine's ephemeral range leaves one.
	if clear := (Range{Start: local.End + 1, End: local.End + 1}); local.End < 65535 && !clear.Overlaps(DefaultNodePortRange) {
		tests = append(tests, struct {
			name    string
			r       Range
			wantErr string
		}{name: "clear of both", r: clear})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRange(tt.r, DefaultNodePortRange)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckRange(%v) = %v, want nil", tt.r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckRange(%v) = %v, want an error mentioning %q", tt.r, err, tt.wantErr)
			}
		})
	}
}
