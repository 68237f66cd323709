package avi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avischema"
)

// schemaField returns a field of the pinned Avi schema, by path from an
// object type.
func schemaField(t *testing.T, typ string, path ...string) *avischema.Prop {
	t.Helper()
	s, err := avischema.Pinned()
	if err != nil {
		t.Fatalf("the pinned Avi schema: %v", err)
	}
	d, err := s.Type(typ)
	if err != nil || d == nil {
		t.Fatalf("schema of %s: %v", typ, err)
	}
	var p *avischema.Prop
	for _, name := range path {
		if p = d.Props[name]; p == nil {
			t.Fatalf("%s has no field %s", typ, strings.Join(path, "."))
		}
		if p.Object != nil {
			d = p.Object
		} else if p.Items != nil && p.Items.Object != nil {
			d = p.Items.Object
		}
	}
	return p
}

// The provider's limits and enum values are the controller's own, as its
// schema says them.
func TestConstants_matchTheSchema(t *testing.T) {
	if p := schemaField(t, "pool", "servers"); p.MaxItems != maxPoolServers {
		t.Errorf("maxPoolServers %d, the schema's pool servers limit %d", maxPoolServers, p.MaxItems)
	}
	if p := schemaField(t, "poolgroup", "members", "ratio"); p.Range == nil || p.Range[1] != maxRatio {
		t.Errorf("maxRatio %d, the schema's pool group member ratio %v", maxRatio, p.Range)
	}
	if p := schemaField(t, "pool", "graceful_disable_timeout"); gracefulDisableTimeout < p.Range[0] || gracefulDisableTimeout > p.Range[1] {
		t.Errorf("gracefulDisableTimeout %d is outside %v", gracefulDisableTimeout, p.Range)
	}
	methods := schemaField(t, "httppolicyset", "http_request_policy", "rules", "match", "method", "methods").Items.Enum
	var ours []string
	for _, m := range aviMethods {
		ours = append(ours, "HTTP_METHOD_"+m)
	}
	if !slices.Equal(ours, methods) {
		t.Errorf("aviMethods %v, the schema's methods %v", ours, methods)
	}
	for name, tc := range map[string]struct {
		ours  map[int32]string
		field []string
	}{
		"redirectCodes": {redirectCodes, []string{"http_request_policy", "rules", "redirect_action", "status_code"}},
		"localCodes":    {localCodes, []string{"http_request_policy", "rules", "switching_action", "status_code"}},
	} {
		enum := schemaField(t, "httppolicyset", tc.field...).Enum
		for code, v := range tc.ours {
			if !slices.Contains(enum, v) {
				t.Errorf("%s[%d] = %s is not in the schema's %v", name, code, v, enum)
			}
		}
	}
}

// A pool of more members than an Avi pool holds is refused, naming the
// pool and the limit, and never sent.
func TestProvider_refusesPoolsOverTheServerLimit(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	members := make([]lbmodel.Member, maxPoolServers+1)
	for i := range members {
		members[i] = member(fmt.Sprintf("198.18.%d.%d", 10+i/250, 1+i%250), 61000)
	}
	lb := webLB("big", tcp(80, members...))
	_, err := f.v.Ensure(context.Background(), lb)
	if !errors.Is(err, lbmodel.ErrUnsupported) || !strings.Contains(err.Error(), "5001 members, an Avi pool holds at most 5000 servers") {
		t.Fatalf("Ensure: %v, want ErrUnsupported naming the limit", err)
	}
	if n := len(f.sim.Requests()); n != 0 {
		t.Errorf("%d requests reached the controller, want none", n)
	}
	f.ensure(webLB("big", tcp(80, members[:maxPoolServers]...)))
}
