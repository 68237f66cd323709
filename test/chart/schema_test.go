package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSchema_rejectsBadValues(t *testing.T) {
	mock := filepath.Join(chartDir, "ci", "mock-values.yaml")
	for _, tc := range []struct {
		name      string
		overrides map[string]any
		// want are substrings of the error: the offending path and why.
		want []string
	}{
		{"bad serviceType", map[string]any{"serviceType": "LoadBalancer"}, []string{"/serviceType", "NodePortLocal"}},
		{"unknown top-level key", map[string]any{"clustername": "typo"}, []string{"clustername"}},
		{"unknown nested key", map[string]any{"agent.portrange": "1-2"}, []string{"/agent", "portrange"}},
		{"unknown key in a provider section", map[string]any{"provider.avi.passwd": "x"}, []string{"/provider/avi", "passwd"}},
		{"unknown key in the mock section", map[string]any{"provider.mock.stateFile": "/tmp/x"}, []string{"/provider/mock", "stateFile"}},
		{"unknown key in a security context", map[string]any{"lbsync.securityContext.priviledged": true}, []string{"/lbsync/securityContext", "priviledged"}},
		{"missing clusterName", map[string]any{"clusterName": ""}, []string{"/clusterName"}},
		{"clusterName with --", map[string]any{"clusterName": "a--b"}, []string{"/clusterName"}},
		{"clusterName too long", map[string]any{"clusterName": strings.Repeat("a", 33)}, []string{"/clusterName"}},
		{"bad provider name", map[string]any{"provider.name": "nsx"}, []string{"/provider/name"}},
		{"bad iptablesMode", map[string]any{"agent.iptablesMode": "auto-detect"}, []string{"/agent/iptablesMode"}},
		{"bad datapath", map[string]any{"agent.datapath": "ebpf"}, []string{"/agent/datapath"}},
		{"bad duration", map[string]any{"lbsync.resyncPeriod": "10 minutes"}, []string{"/lbsync/resyncPeriod"}},
		{"bad port", map[string]any{"agent.metricsPort": 70000}, []string{"/agent/metricsPort"}},
		{"replicas as a string", map[string]any{"lbsync.replicas": "2"}, []string{"/lbsync/replicas"}},
		{"bad webhook failurePolicy", map[string]any{"lbsync.webhook.failurePolicy": "Never"}, []string{"/lbsync/webhook/failurePolicy", "Ignore"}},
		{"webhook failurePolicy in lowercase", map[string]any{"lbsync.webhook.failurePolicy": "ignore"}, []string{"/lbsync/webhook/failurePolicy"}},
		{"webhook timeout above the API server's 30 s", map[string]any{"lbsync.webhook.timeoutSeconds": 31}, []string{"/lbsync/webhook/timeoutSeconds"}},
		{"webhook timeout of 0", map[string]any{"lbsync.webhook.timeoutSeconds": 0}, []string{"/lbsync/webhook/timeoutSeconds"}},
		{"bad webhook port", map[string]any{"lbsync.webhook.port": 0}, []string{"/lbsync/webhook/port"}},
		{"unknown key in the webhook section", map[string]any{"lbsync.webhook.caData": "x"}, []string{"/lbsync/webhook", "caData"}},
		{"webhook annotation that is not a string", map[string]any{"lbsync.webhook.annotations": map[string]any{"a": 1}}, []string{"/lbsync/webhook/annotations"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderValues(t, readValues(t, mock, tc.overrides))
			if err == nil {
				t.Fatalf("values %v rendered; want a schema error", tc.overrides)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), "schema") {
				t.Errorf("error %q is not from values.schema.json", err)
			}
		})
	}
}

func TestSchema_missingClusterNameFailsWithoutValueFile(t *testing.T) {
	// The chart's own defaults leave clusterName empty: installing without
	// setting it must fail, naming it.
	_, err := renderValues(t, readValues(t, "", nil))
	if err == nil || !strings.Contains(err.Error(), "clusterName") {
		t.Errorf("render with default values: %v; want an error naming clusterName", err)
	}
}

// opaqueObjects are the only schema objects whose content is not listed:
// affinity terms, passed to the Pod spec as they are.
var opaqueObjects = []string{
	"definitions.affinity.properties.nodeAffinity",
	"definitions.affinity.properties.podAffinity",
	"definitions.affinity.properties.podAntiAffinity",
}

func TestSchema_closesEveryObject(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	objects := 0
	var walk func(path string, node map[string]any)
	walk = func(path string, node map[string]any) {
		isObject := node["type"] == "object"
		if types, ok := node["type"].([]any); ok {
			isObject = slices.Contains(types, any("object"))
		}
		if isObject {
			objects++
			ap, hasAP := node["additionalProperties"]
			_, hasProps := node["properties"]
			switch {
			case slices.Contains(opaqueObjects, path):
			case hasProps && ap != false:
				t.Errorf("%s: lists properties but additionalProperties is %v; want false", path, ap)
			case !hasProps && !hasAP:
				t.Errorf("%s: an object with neither properties nor an additionalProperties schema", path)
			case !hasProps && ap == true:
				t.Errorf("%s: additionalProperties true; want false or a schema for map values", path)
			}
		}
		for _, key := range []string{"properties", "definitions"} {
			if props, ok := node[key].(map[string]any); ok {
				for name, sub := range props {
					if m, ok := sub.(map[string]any); ok {
						walk(joinPath(path, key, name), m)
					}
				}
			}
		}
		for _, key := range []string{"items", "additionalProperties", "not"} {
			if m, ok := node[key].(map[string]any); ok {
				walk(joinPath(path, key), m)
			}
		}
	}
	walk("", schema)
	if objects < 20 {
		t.Errorf("walked %d object schemas; the walk is broken", objects)
	}
}

func joinPath(parts ...string) string {
	return strings.TrimPrefix(strings.Join(parts, "."), ".")
}
