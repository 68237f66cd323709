package contract

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse_acceptsWhatAntreaWrites(t *testing.T) {
	cases := []struct {
		name  string
		value string
		want  []Entry
	}{
		{
			name:  "current format with ipFamily",
			value: `[{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":61002,"protocol":"tcp","ipFamily":"IPv4"}]`,
			want:  []Entry{{PodPort: 8080, NodeIP: "198.18.0.11", NodePort: 61002, Protocol: "tcp", IPFamily: "IPv4"}},
		},
		{
			name:  "antrea before v2.6: no ipFamily means IPv4",
			value: `[{"podPort":80,"nodeIP":"198.18.0.12","nodePort":61000,"protocol":"udp"}]`,
			want:  []Entry{{PodPort: 80, NodeIP: "198.18.0.12", NodePort: 61000, Protocol: "udp", IPFamily: "IPv4"}},
		},
		{
			name:  "uppercase protocol is normalised",
			value: `[{"podPort":80,"nodeIP":"198.18.0.12","nodePort":61000,"protocol":"TCP"}]`,
			want:  []Entry{{PodPort: 80, NodeIP: "198.18.0.12", NodePort: 61000, Protocol: "tcp", IPFamily: "IPv4"}},
		},
		{
			name:  "IPv6 node IP without ipFamily is IPv6",
			value: `[{"podPort":80,"nodeIP":"fd12:3456:789a:1::1","nodePort":61000,"protocol":"tcp"}]`,
			want:  []Entry{{PodPort: 80, NodeIP: "fd12:3456:789a:1::1", NodePort: 61000, Protocol: "tcp", IPFamily: "IPv6"}},
		},
		{
			name: "unordered entries come back sorted",
			value: `[{"podPort":9090,"nodeIP":"198.18.0.11","nodePort":61001,"protocol":"udp","ipFamily":"IPv4"},` +
				`{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":61000,"protocol":"tcp","ipFamily":"IPv4"}]`,
			want: []Entry{
				{PodPort: 8080, NodeIP: "198.18.0.11", NodePort: 61000, Protocol: "tcp", IPFamily: "IPv4"},
				{PodPort: 9090, NodeIP: "198.18.0.11", NodePort: 61001, Protocol: "udp", IPFamily: "IPv4"},
			},
		},
		{name: "empty array", value: `[]`, want: []Entry{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.value)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParse_rejectsUnusableEntries(t *testing.T) {
	cases := map[string]struct {
		value   string
		wantErr string
	}{
		"not JSON":           {`{oops`, "parse nodeportlocal.antrea.io"},
		"object not array":   {`{"podPort":1}`, "cannot unmarshal"},
		"trailing data":      {`[] []`, "trailing data"},
		"sctp":               {`[{"podPort":80,"nodeIP":"198.18.0.1","nodePort":61000,"protocol":"sctp"}]`, `protocol "sctp"`},
		"zero podPort":       {`[{"podPort":0,"nodeIP":"198.18.0.1","nodePort":61000,"protocol":"tcp"}]`, "podPort 0"},
		"nodePort too large": {`[{"podPort":80,"nodeIP":"198.18.0.1","nodePort":70000,"protocol":"tcp"}]`, "nodePort 70000"},
		"missing nodeIP":     {`[{"podPort":80,"nodePort":61000,"protocol":"tcp"}]`, `nodeIP ""`},
		"family mismatch":    {`[{"podPort":80,"nodeIP":"198.18.0.1","nodePort":61000,"protocol":"tcp","ipFamily":"IPv6"}]`, "is not of ipFamily IPv6"},
		"unknown family":     {`[{"podPort":80,"nodeIP":"198.18.0.1","nodePort":61000,"protocol":"tcp","ipFamily":"v4"}]`, `ipFamily "v4"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.value)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Parse(%s) error = %v, want it to contain %q", tc.value, err, tc.wantErr)
			}
		})
	}
}

func TestFormat_isAntreaByteCompatibleAndOrderInsensitive(t *testing.T) {
	a := []Entry{
		{PodPort: 9090, NodeIP: "198.18.0.11", NodePort: 61001, Protocol: "udp", IPFamily: "IPv4"},
		{PodPort: 8080, NodeIP: "198.18.0.11", NodePort: 61000, Protocol: "tcp", IPFamily: "IPv4"},
	}
	b := []Entry{a[1], a[0]}
	fa, err := Format(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, _ := Format(b)
	want := `[{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":61000,"protocol":"tcp","ipFamily":"IPv4"},` +
		`{"podPort":9090,"nodeIP":"198.18.0.11","nodePort":61001,"protocol":"udp","ipFamily":"IPv4"}]`
	if fa != want || fb != want {
		t.Errorf("Format = %s / %s, want %s", fa, fb, want)
	}
	if !Equal(a, b) {
		t.Error("Equal(a, reordered a) = false")
	}
	if Equal(a, a[:1]) {
		t.Error("Equal of different lengths = true")
	}
	if s, _ := Format(nil); s != "" {
		t.Errorf("Format(nil) = %q, want empty", s)
	}
}

func TestServiceEnabled_isExactlyTrue(t *testing.T) {
	for value, want := range map[string]bool{"true": true, "True": false, "TRUE": false, "false": false, "": false, "yes": false} {
		if got := ServiceEnabled(map[string]string{ServiceEnabledKey: value}); got != want {
			t.Errorf("ServiceEnabled(%q) = %v, want %v", value, got, want)
		}
	}
	if ServiceEnabled(nil) {
		t.Error("ServiceEnabled(nil) = true")
	}
}

// FuzzParse checks that any input either fails cleanly or round-trips: what
// Parse accepts, Format writes back into something Parse reads the same.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`[{"podPort":8080,"nodeIP":"198.18.0.11","nodePort":61002,"protocol":"tcp","ipFamily":"IPv4"}]`,
		`[{"podPort":80,"nodeIP":"198.18.0.12","nodePort":61000,"protocol":"udp"}]`,
		`[{"podPort":80,"nodeIP":"fd12::1","nodePort":61000,"protocol":"TCP","ipFamily":"IPv6"}]`,
		`[]`, `null`, `{`, `[{}]`, `[{"podPort":-1}]`, `[{"nodeIP":"::ffff:198.18.0.1","podPort":1,"nodePort":1,"protocol":"tcp"}]`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		entries, err := Parse(value)
		if err != nil {
			return
		}
		s, err := Format(entries)
		if err != nil {
			t.Fatalf("Format after Parse: %v", err)
		}
		if len(entries) == 0 {
			return
		}
		again, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(Format(Parse(%q))) = %v", value, err)
		}
		if !Equal(entries, again) {
			t.Fatalf("round trip changed entries: %v -> %v", entries, again)
		}
	})
}
