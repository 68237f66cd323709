package strictjson

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type section struct {
	URL      string   `json:"url"`
	Verify   *bool    `json:"verify,omitempty"`
	Retries  int      `json:"retries"`
	Hosts    []string `json:"hosts"`
	Untagged string
	Ignored  string `json:"-"`
}

func TestDecode_acceptsTheExactKeys(t *testing.T) {
	yes := true
	tests := []struct {
		name, data string
		want       section
	}{
		{"empty is the defaults", "", section{Retries: 7}},
		{"null is the defaults", " null\n", section{Retries: 7}},
		{"an empty mapping keeps the defaults", "{}", section{Retries: 7}},
		{"every key", `{"url":"u","verify":true,"retries":3,"hosts":["a"],"Untagged":"x"}`,
			section{URL: "u", Verify: &yes, Retries: 3, Hosts: []string{"a"}, Untagged: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := section{Retries: 7}
			if err := Decode([]byte(tt.data), &got, "provider.x."); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecode_errorsNameTheKey(t *testing.T) {
	tests := []struct {
		name, data, prefix, want string
	}{
		{"unknown key", `{"url":"u","hots":[]}`, "provider.x.",
			"provider.x.hots: unknown field (valid: url, verify, retries, hosts, Untagged)"},
		{"a key in another case", `{"URL":"u"}`, "provider.x.", "provider.x.URL: unknown field"},
		{"an ignored field is unknown", `{"Ignored":"u"}`, "", "Ignored: unknown field"},
		{"a string for a bool", `{"verify":"yes"}`, "provider.x.", "provider.x.verify: want true or false, got a JSON string"},
		{"a number for a string", `{"url":5}`, "provider.x.", "provider.x.url: want a string, got a JSON number"},
		{"a string for an int", `{"retries":"3"}`, "", "retries: want an integer, got a JSON string"},
		{"a mapping for a list", `{"hosts":{}}`, "", "hosts: want a list, got a JSON object"},
		{"not a mapping", `["x"]`, "provider.x.", "provider.x: want a mapping, got a JSON array"},
		{"not a mapping without a prefix", `"x"`, "", "want a mapping, got a JSON string"},
		{"broken JSON", `{"url":`, "", "want a mapping: "},
		{"trailing data", `{"url":"u"} {}`, "provider.x.", "provider.x: unexpected data after the section"},
		{"a prefix without a dot, for a field", `{"url":5}`, "config: ", "config: url: want a string"},
		{"a prefix without a dot, for the section", `[]`, "config: ", "config: want a mapping, got a JSON array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s section
			err := Decode([]byte(tt.data), &s, tt.prefix)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Decode = %v, want an error starting with %q", err, tt.want)
			}
		})
	}
}
