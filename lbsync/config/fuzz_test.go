package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// FuzzParse feeds arbitrary files to Parse (seeds in testdata/fuzz/FuzzParse).
// Parse must not panic; an error is one line starting with "config: "; a
// file it accepts must satisfy the documented rules, checked here without
// the package's own validation code, and keep the values the file gives
// (read with a generic YAML decode) or the documented defaults.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "testdata")
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "config: ") || strings.Contains(msg, "\n") {
				t.Fatalf("error %q is not one line starting with \"config: \"", msg)
			}
			return
		}
		if r := configViolation(c); r != "" {
			t.Fatalf("Parse accepted %q: %s", data, r)
		}
		var fields map[string]any
		if err := yaml.Unmarshal(data, &fields); err != nil {
			t.Fatalf("Parse accepted %q, which is not a YAML mapping: %v", data, err)
		}
		for _, k := range []struct {
			key, got, def string
		}{
			{"clusterName", c.ClusterName(), ""},
			{"serviceType", c.ServiceType(), "NodePortLocal"},
			{"loadBalancerClass", c.LoadBalancerClass(), "npl.io/lb"},
			{"ingressClass", c.IngressClass(), "npl"},
			{"ipFamily", c.IPFamily(), "IPv4"},
		} {
			want := k.def
			if v, ok := fields[k.key].(string); ok && v != "" {
				want = v
			}
			if k.got != want {
				t.Errorf("Parse(%q): %s = %q, want %q", data, k.key, k.got, want)
			}
		}
		if v, ok := fields["drainSeconds"].(float64); ok && c.DrainPeriod() != time.Duration(v)*time.Second {
			t.Errorf("Parse(%q): drain period %s, want drainSeconds %v", data, c.DrainPeriod(), v)
		}
		provider, _ := fields["provider"].(map[string]any)
		if name, _ := provider["name"].(string); c.ProviderName() != name {
			t.Errorf("Parse(%q): provider %q, want %q", data, c.ProviderName(), name)
		}
	})
}

// configViolation names a documented rule an accepted configuration breaks,
// or returns "".
func configViolation(c *Config) string {
	name := c.ClusterName()
	switch {
	case name == "" || len(name) > 32:
		return fmt.Sprintf("clusterName %q is not 1-32 characters", name)
	case strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "":
		return fmt.Sprintf("clusterName %q has a character other than a-z, 0-9 and -", name)
	case strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--"):
		return fmt.Sprintf("clusterName %q starts or ends with - or holds --", name)
	case !slices.Contains([]string{"NodePortLocal", "NodePort", "ClusterIP"}, c.ServiceType()):
		return fmt.Sprintf("serviceType %q", c.ServiceType())
	case !slices.Contains([]string{"IPv4", "IPv6"}, c.IPFamily()):
		return fmt.Sprintf("ipFamily %q", c.IPFamily())
	case c.ResyncPeriod() <= 0:
		return fmt.Sprintf("resyncPeriod %s is not positive", c.ResyncPeriod())
	case c.DrainPeriod() < 0:
		return fmt.Sprintf("drain period %s is negative", c.DrainPeriod())
	case c.LoadBalancerClass() == "" || c.IngressClass() == "":
		return "an empty class"
	case strings.Trim(c.IngressClass(), "abcdefghijklmnopqrstuvwxyz0123456789-.") != "":
		return fmt.Sprintf("ingressClass %q is not a lowercase DNS name", c.IngressClass())
	case !slices.Contains([]string{"mock", "avi", "bigip"}, c.ProviderName()) || c.Provider() == nil:
		return fmt.Sprintf("provider %q (%v)", c.ProviderName(), c.Provider())
	case c.Common().ClusterName != name:
		return "the providers' common section has another cluster name"
	}
	pool := c.VIPPool()
	for i, p := range pool {
		if !p.IsValid() || p.Addr() != netip.PrefixFrom(p.Addr(), p.Bits()).Masked().Addr() {
			return fmt.Sprintf("vipPool[%d] %s has host bits set", i, p)
		}
		for j := range i {
			q := pool[j]
			if p.Contains(q.Addr()) || q.Contains(p.Addr()) {
				return fmt.Sprintf("vipPool[%d] %s overlaps vipPool[%d] %s", i, p, j, q)
			}
		}
	}
	return ""
}
