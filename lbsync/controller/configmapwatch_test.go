package controller

import (
	"context"
	"maps"
	"slices"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
)

// TestConfigMapWatch_oneInformerPerConfigMapOfEveryKind: the ConfigMaps
// that BackendTLSPolicies and Gateways name are watched together, one
// informer each however many kinds name it, and a ConfigMap stops being
// watched only when no kind names it any more.
func TestConfigMapWatch_oneInformerPerConfigMapOfEveryKind(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newConfigMapWatch(fake.NewClientset(), func(string) {})
	w.run(ctx)
	running := func() []string {
		w.mu.Lock()
		defer w.mu.Unlock()
		return slices.Sorted(maps.Keys(w.running))
	}
	step := func(kind string, keys []string, want ...string) {
		t.Helper()
		w.set(kind, keys)
		if got := running(); !slices.Equal(got, want) {
			t.Errorf("after %s names %v: watched %v, want %v", kind, keys, got, want)
		}
	}
	step("BackendTLSPolicy", []string{"a/ca"}, "a/ca")
	step("Gateway", []string{"a/ca", "b/client-ca"}, "a/ca", "b/client-ca")
	first := w.running["a/ca"]
	step("BackendTLSPolicy", nil, "a/ca", "b/client-ca")
	if w.running["a/ca"] != first {
		t.Errorf("a/ca's informer was replaced while the Gateways still name it")
	}
	step("Gateway", []string{"b/client-ca"}, "b/client-ca")
	step("Gateway", nil)
}
