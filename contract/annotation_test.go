package contract

import (
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
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
		"zoned nodeIP":       {`[{"podPort":80,"nodeIP":"fe80::1%eth0","nodePort":61000,"protocol":"tcp"}]`, "has a zone"},
		"trailing bracket":   {`[]]`, "trailing data"},
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

// FuzzParse checks that Parse accepts exactly the values the rules of the
// annotation allow and returns their entries normalised and sorted; the
// seeds are in testdata/fuzz/FuzzParse. The rules are computed here from a
// generic decode of the JSON, not by Parse's own code, so a Parse that
// stopped checking one of them fails, even though it would still round-trip.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, value string) {
		entries, err := Parse(value)
		want, ok, reason := expectedEntries(value)
		switch {
		case ok && err != nil:
			t.Fatalf("Parse(%q) rejected a valid value: %v", value, err)
		case !ok && reason != "" && err == nil:
			t.Fatalf("Parse(%q) = %+v, want an error: %s", value, entries, reason)
		case err != nil:
			return
		}
		for i, e := range entries {
			if r := violation(e); r != "" {
				t.Errorf("Parse(%q) entry %d %+v: %s", value, i, e, r)
			}
			if i > 0 && entryLess(e, entries[i-1]) {
				t.Errorf("Parse(%q) entries not sorted: %+v before %+v", value, entries[i-1], e)
			}
		}
		if ok && !cmp.Equal(sortedCopy(want), sortedCopy(entries)) {
			t.Errorf("Parse(%q) entries (-want +got):\n%s", value, cmp.Diff(sortedCopy(want), sortedCopy(entries)))
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

// The annotation's rules, written out independently of Parse.
var (
	wantKeys     = []string{"podPort", "nodeIP", "nodePort", "protocol", "ipFamily"}
	wantProtocol = map[string]bool{"tcp": true, "udp": true}
)

// familyOf returns the family of a node IP by the standard library's reading
// (an IPv4-mapped IPv6 address is IPv4), or "" when s is not an IP address.
func familyOf(s string) string {
	ip := net.ParseIP(s)
	switch {
	case ip == nil:
		return ""
	case ip.To4() != nil:
		return "IPv4"
	default:
		return "IPv6"
	}
}

// violation names the rule a parsed entry breaks, or returns "".
func violation(e Entry) string {
	switch {
	case !wantProtocol[string(e.Protocol)]:
		return "protocol is not lowercase tcp or udp"
	case e.PodPort < 1 || e.PodPort > 65535:
		return "podPort out of 1-65535"
	case e.NodePort < 1 || e.NodePort > 65535:
		return "nodePort out of 1-65535"
	case familyOf(e.NodeIP) == "":
		return "nodeIP is not an IP address"
	case string(e.IPFamily) != familyOf(e.NodeIP):
		return "ipFamily is not the family of nodeIP"
	}
	return ""
}

// entryLess is the documented order: family, protocol, podPort, nodeIP,
// nodePort.
func entryLess(a, b Entry) bool {
	// NUL sorts before every character, so a node IP that is a prefix of
	// another sorts first, as in a plain string comparison.
	ka := fmt.Sprintf("%s\x00%s\x00%05d\x00%s\x00%05d", a.IPFamily, a.Protocol, a.PodPort, a.NodeIP, a.NodePort)
	kb := fmt.Sprintf("%s\x00%s\x00%05d\x00%s\x00%05d", b.IPFamily, b.Protocol, b.PodPort, b.NodeIP, b.NodePort)
	return ka < kb
}

func sortedCopy(es []Entry) []Entry {
	out := append([]Entry{}, es...)
	sort.Slice(out, func(i, j int) bool { return entryLess(out[i], out[j]) })
	return out
}

// expectedEntries decides from a generic JSON decode whether value is a
// valid annotation (ok, with its normalised entries) or not (reason says
// which rule it breaks). Both are false/empty when the value uses a key in
// another case, which encoding/json matches case-insensitively: the test
// leaves that matching to encoding/json and checks only the rules then; so
// too when an object repeats a key, where a struct and a generic decode may
// disagree.
func expectedEntries(value string) (want []Entry, ok bool, reason string) {
	if !json.Valid([]byte(value)) {
		return nil, false, "not one JSON value"
	}
	if ambiguousKeys(value) {
		return nil, false, ""
	}
	var raw any
	dec := json.NewDecoder(strings.NewReader(value))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, false, "not JSON: " + err.Error()
	}
	if raw == nil {
		return nil, true, "" // null: no entries
	}
	list, isList := raw.([]any)
	if !isList {
		return nil, false, "not a JSON array"
	}
	want = []Entry{}
	for i, item := range list {
		obj, isObj := item.(map[string]any)
		if !isObj {
			return nil, false, fmt.Sprintf("entry %d is not an object", i)
		}
		e, r := expectedEntry(obj)
		if r != "" {
			return nil, false, fmt.Sprintf("entry %d: %s", i, r)
		}
		want = append(want, e)
	}
	return want, true, ""
}

// ambiguousKeys reports whether an object of the JSON value repeats a key,
// or names one of the entry's keys in another case.
func ambiguousKeys(value string) bool {
	type frame struct {
		object, wantKey bool
		keys            map[string]bool
	}
	var stack []*frame
	dec := json.NewDecoder(strings.NewReader(value))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantKey {
			key, _ := tok.(string)
			folded := strings.ToLower(key)
			if top.keys[folded] {
				return true
			}
			top.keys[folded] = true
			for _, w := range wantKeys {
				if key != w && strings.EqualFold(key, w) {
					return true
				}
			}
			top.wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantKey: true, keys: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return false
			}
			top = stack[len(stack)-1]
		}
		if top != nil && top.object {
			top.wantKey = true
		}
	}
}

func expectedEntry(obj map[string]any) (Entry, string) {
	var e Entry
	str := func(k string) (string, bool) {
		switch v := obj[k].(type) {
		case nil:
			return "", true
		case string:
			return v, true
		}
		return "", false
	}
	port := func(k string) (int, string) {
		switch v := obj[k].(type) {
		case nil:
			return 0, k + " is missing"
		case json.Number:
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, k + " is not an integer"
			}
			if n < 1 || n > 65535 {
				return 0, k + " is out of 1-65535"
			}
			return int(n), ""
		}
		return 0, k + " is not a number"
	}
	var r string
	if e.PodPort, r = port("podPort"); r != "" {
		return e, r
	}
	if e.NodePort, r = port("nodePort"); r != "" {
		return e, r
	}
	proto, isStr := str("protocol")
	if !isStr || !wantProtocol[strings.ToLower(proto)] {
		return e, "protocol is not tcp or udp in any case"
	}
	e.Protocol = Protocol(strings.ToLower(proto))
	ip, isStr := str("nodeIP")
	if !isStr || familyOf(ip) == "" {
		return e, "nodeIP is not an IP address"
	}
	e.NodeIP = ip
	family, isStr := str("ipFamily")
	switch {
	case !isStr:
		return e, "ipFamily is not a string"
	case family == "":
		family = familyOf(ip)
	case family != familyOf(ip):
		return e, "ipFamily is not the family of nodeIP"
	}
	e.IPFamily = Family(family)
	return e, ""
}
