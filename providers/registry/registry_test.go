package registry

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/mock"
)

func TestNames_listsEveryProviderSorted(t *testing.T) {
	if diff := cmp.Diff([]string{"avi", "bigip", "mock"}, Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	for _, n := range Names() {
		if !Known(n) {
			t.Errorf("Known(%q) = false", n)
		}
	}
	if Known("f5") {
		t.Error(`Known("f5") = true`)
	}
}

func TestParse_buildsTheNamedProvider(t *testing.T) {
	common := providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/29")}}
	cfg, err := Parse("mock", common, []byte(`{"failCalls":1}`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	mc, ok := cfg.(*mock.Config)
	if !ok {
		t.Fatalf("Parse(mock) = %T, want *mock.Config", cfg)
	}
	if mc.FailCalls != 1 || mc.Common.ClusterName != "c1" {
		t.Errorf("mock config = %+v, want failCalls 1 and the common part", mc)
	}
	if _, err := cfg.Open(context.Background()); err != nil {
		t.Errorf("Open: %v", err)
	}
}

func TestParse_errors(t *testing.T) {
	tests := []struct {
		name, provider, section, wantErr string
	}{
		{"unknown provider lists the valid ones", "f5", `{}`, `unknown provider "f5" (valid: avi, bigip, mock)`},
		{"empty name", "", `{}`, `unknown provider "" (valid: avi, bigip, mock)`},
		{"the provider's own error is kept as is", "mock", `{"latency":"x"}`, `latency: time: invalid duration "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.provider, providers.Common{ClusterName: "c1"}, []byte(tt.section))
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
