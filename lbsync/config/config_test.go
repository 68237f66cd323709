package config

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/mock"
)

// view is everything a Config exposes, for comparing whole configurations.
type view struct {
	Dir                 string
	ClusterName         string
	ServiceType         string
	LoadBalancerClass   string
	DefaultLoadBalancer bool
	IngressClass        string
	VIPPool             []netip.Prefix
	ResyncPeriod        time.Duration
	DrainPeriod         time.Duration
	IPFamily            string
	IngressSharedVIP    bool
	GatewayAPIEnabled   bool
	ProviderName        string
	Provider            providers.Config
	Common              providers.Common
	Claim               claim.ClaimConfig
}

func viewOf(c *Config) view {
	return view{
		Dir: c.Dir(), ClusterName: c.ClusterName(), ServiceType: c.ServiceType(),
		LoadBalancerClass: c.LoadBalancerClass(), DefaultLoadBalancer: c.DefaultLoadBalancer(),
		IngressClass: c.IngressClass(), VIPPool: c.VIPPool(), ResyncPeriod: c.ResyncPeriod(),
		DrainPeriod: c.DrainPeriod(), IPFamily: c.IPFamily(), IngressSharedVIP: c.IngressSharedVIP(), GatewayAPIEnabled: c.GatewayAPIEnabled(),
		ProviderName: c.ProviderName(),
		Provider:     providerConfig(c.Provider()), Common: c.Common(), Claim: c.Claim(),
	}
}

// providerConfig is the provider's own configuration behind the registry's
// wrapper (which opens the provider behind providers.Validated).
func providerConfig(c providers.Config) providers.Config {
	if u, ok := c.(interface{ Unwrap() providers.Config }); ok {
		return u.Unwrap()
	}
	return c
}

var cmpPrefix = cmpopts.EquateComparable(netip.Prefix{})

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestLoad_minimalFileGetsTheDefaults(t *testing.T) {
	c, err := Load("testdata/minimal.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	common := providers.Common{ClusterName: "demo"}
	want := view{
		Dir: "testdata", ClusterName: "demo", ServiceType: "NodePortLocal", LoadBalancerClass: "npl.io/lb",
		IngressClass: "npl", ResyncPeriod: 10 * time.Minute, DrainPeriod: 30 * time.Second, IPFamily: "IPv4",
		ProviderName: "mock", Provider: &mock.Config{Common: common}, Common: common,
		Claim: claim.ClaimConfig{LoadBalancerClass: "npl.io/lb"},
	}
	if diff := cmp.Diff(want, viewOf(c), cmpPrefix, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

func TestLoad_fullFile(t *testing.T) {
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	common := providers.Common{ClusterName: "prod-eu1", VIPPool: prefixes("203.0.113.0/28", "2001:db8:1::/120")}
	want := view{
		Dir: "testdata", ClusterName: "prod-eu1", ServiceType: "NodePort", LoadBalancerClass: "example.com/lb",
		DefaultLoadBalancer: true, IngressClass: "edge", VIPPool: common.VIPPool, ResyncPeriod: 90 * time.Second,
		DrainPeriod: 0, IPFamily: "IPv6", IngressSharedVIP: true, GatewayAPIEnabled: true, ProviderName: "mock",
		Provider: &mock.Config{Common: common, StateFile: "testdata/mock-state.json", Latency: 20 * time.Millisecond,
			FailCalls: 2, AllowFaultInjection: true},
		Common: common,
		Claim:  claim.ClaimConfig{LoadBalancerClass: "example.com/lb", DefaultLoadBalancer: true},
	}
	if diff := cmp.Diff(want, viewOf(c), cmpPrefix); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

func TestLoad_missingFile(t *testing.T) {
	_, err := Load("testdata/absent.yaml")
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "config: open testdata/absent.yaml") {
		t.Errorf("err = %v, want config: open testdata/absent.yaml: not exist", err)
	}
}

func TestConfig_gettersReturnCopies(t *testing.T) {
	c, err := Parse([]byte("clusterName: a\nvipPool: [203.0.113.0/28]\nprovider: {name: mock}\n"), ".")
	if err != nil {
		t.Fatal(err)
	}
	c.VIPPool()[0] = netip.MustParsePrefix("10.0.0.0/8")
	c.Common().VIPPool[0] = netip.MustParsePrefix("10.0.0.0/8")
	if diff := cmp.Diff(prefixes("203.0.113.0/28"), c.VIPPool(), cmpPrefix); diff != "" {
		t.Errorf("VIPPool changed through a getter (-want +got):\n%s", diff)
	}
}

func TestParse_accepts(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		check func(*Config) bool
	}{
		{"provider section null", "clusterName: a\nprovider: {name: mock, mock: null}\n",
			func(c *Config) bool { return c.ProviderName() == "mock" }},
		{"explicit empty strings take the defaults", "clusterName: a\nserviceType: ''\nipFamily: ''\nprovider: {name: mock}\n",
			func(c *Config) bool { return c.ServiceType() == "NodePortLocal" && c.IPFamily() == "IPv4" }},
		{"drainSeconds 0 is kept, not defaulted", "clusterName: a\ndrainSeconds: 0\nprovider: {name: mock}\n",
			func(c *Config) bool { return c.DrainPeriod() == 0 }},
		{"32-character cluster name", "clusterName: " + strings.Repeat("a", 32) + "\nprovider: {name: mock}\n",
			func(c *Config) bool { return len(c.ClusterName()) == 32 }},
		{"ClusterIP service type", "clusterName: a\nserviceType: ClusterIP\nprovider: {name: mock}\n",
			func(c *Config) bool { return c.ServiceType() == "ClusterIP" }},
		{"class without a prefix", "clusterName: a\nloadBalancerClass: mylb\nprovider: {name: mock}\n",
			func(c *Config) bool { return c.Claim().LoadBalancerClass == "mylb" }},
		{"requested VIPs from vipPool by default", "clusterName: a\nvipPool: [203.0.113.0/28]\nprovider: {name: mock}\n",
			func(c *Config) bool { return slices.Equal(c.AllowedVIPs(), prefixes("203.0.113.0/28")) }},
		{"requested VIPs from allowedVIPs", "clusterName: a\nvipPool: [203.0.113.0/28]\nallowedVIPs: [198.51.100.0/24, 2001:db8::/64]\nprovider: {name: mock}\n",
			func(c *Config) bool {
				return slices.Equal(c.AllowedVIPs(), prefixes("198.51.100.0/24", "2001:db8::/64"))
			}},
		{"no requested VIP without either", "clusterName: a\nprovider: {name: mock}\n",
			func(c *Config) bool { return len(c.AllowedVIPs()) == 0 }},
		{"nodePortRange defaults to npl-agent's", "clusterName: a\nprovider: {name: mock}\n",
			func(c *Config) bool { return c.NodePortRange() == contract.PortRange{Start: 61000, End: 62000} }},
		{"nodePortRange", "clusterName: a\nnodePortRange: 40000-40999\nprovider: {name: mock}\n",
			func(c *Config) bool { return c.NodePortRange() == contract.PortRange{Start: 40000, End: 40999} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), ".")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !tt.check(c) {
				t.Errorf("unexpected config %+v", viewOf(c))
			}
		})
	}
}

func TestParse_errorsNameTheField(t *testing.T) {
	const ok = "clusterName: a\nprovider: {name: mock}\n"
	missingDir := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"empty file", "", "config: clusterName: required"},
		{"missing clusterName", "provider: {name: mock}\n", "config: clusterName: required"},
		{"clusterName too long", "clusterName: " + strings.Repeat("a", 33) + "\nprovider: {name: mock}\n",
			`config: clusterName: "` + strings.Repeat("a", 33) + `" is 33 characters long, at most 32`},
		{"clusterName uppercase", "clusterName: Prod\nprovider: {name: mock}\n",
			`config: clusterName: "Prod" must consist of lowercase letters, digits and '-', and start and end with a letter or digit`},
		{"clusterName with the separator", "clusterName: a--b\nprovider: {name: mock}\n",
			`config: clusterName: "a--b" must not contain "--"`},
		{"unknown top-level key", ok + "vipPools: [203.0.113.0/28]\n", "config: vipPools: unknown field"},
		{"unknown gatewayAPI key", ok + "gatewayAPI: {enable: true}\n", "config: gatewayAPI.enable: unknown field"},
		{"key case matters", "clusterName: a\nClusterName: b\nprovider: {name: mock}\n", "config: ClusterName: unknown field"},
		{"duplicate key", ok + "clusterName: b\n", `config: yaml: unmarshal errors: line 3: key "clusterName" already set in map`},
		{"not YAML", "clusterName: [a\n", "config: yaml: line 1: did not find expected ',' or ']'"},
		{"not a mapping", "- a\n- b\n", "config: want a mapping, got a JSON array"},
		{"wrong type", ok + "drainSeconds: soon\n", "config: drainSeconds: want an integer, got a JSON string"},
		{"wrong type in a list", ok + "vipPool: [1]\n", "config: vipPool: want a string, got a JSON number"},
		{"bad serviceType", ok + "serviceType: LoadBalancer\n",
			`config: serviceType: "LoadBalancer" is not one of NodePortLocal, NodePort, ClusterIP`},
		{"bad ipFamily", ok + "ipFamily: ipv6\n", `config: ipFamily: "ipv6" is not one of IPv4, IPv6`},
		{"bad loadBalancerClass", ok + "loadBalancerClass: npl.io/lb/x\n", "config: loadBalancerClass: \"npl.io/lb/x\": a valid label key"},
		{"bad ingressClass", ok + "ingressClass: Edge_1\n", `config: ingressClass: "Edge_1": a lowercase RFC 1123 subdomain`},
		{"bad CIDR", ok + "vipPool: [203.0.113.0/28, 203.0.113.300/28]\n",
			`config: vipPool[1]: netip.ParsePrefix("203.0.113.300/28"): ParseAddr("203.0.113.300"): IPv4 field has value >255`},
		{"address without a length", ok + "vipPool: [203.0.113.7]\n", `config: vipPool[0]: netip.ParsePrefix("203.0.113.7"): no '/'`},
		{"host bits set", ok + "vipPool: [203.0.113.5/28]\n",
			"config: vipPool[0]: 203.0.113.5/28 has host bits set; the range is 203.0.113.0/28"},
		{"overlapping ranges", ok + "vipPool: [203.0.113.0/28, 203.0.113.8/29]\n",
			"config: vipPool[1]: 203.0.113.8/29 overlaps vipPool[0] 203.0.113.0/28"},
		{"overlapping allowedVIPs", ok + "allowedVIPs: [203.0.113.0/28, 203.0.113.8/29]\n",
			"config: allowedVIPs[1]: 203.0.113.8/29 overlaps allowedVIPs[0] 203.0.113.0/28"},
		{"allowedVIPs host bits", ok + "allowedVIPs: [203.0.113.5/28]\n",
			"config: allowedVIPs[0]: 203.0.113.5/28 has host bits set; the range is 203.0.113.0/28"},
		{"bad nodePortRange", ok + "nodePortRange: 62000-61000\n", `config: nodePortRange: parse port range "62000-61000": range 62000-61000 is reversed`},
		{"nodePortRange of one number", ok + "nodePortRange: \"61000\"\n", `config: nodePortRange: parse port range "61000": want START-END`},
		{"bad duration", ok + "resyncPeriod: 10 minutes\n", `config: resyncPeriod: time: unknown unit " minutes" in duration "10 minutes"`},
		{"duration without a unit", ok + "resyncPeriod: 600\n", "config: resyncPeriod: want a string, got a JSON number"},
		{"zero resyncPeriod", ok + "resyncPeriod: 0s\n", "config: resyncPeriod: 0s is not positive"},
		{"negative drainSeconds", ok + "drainSeconds: -1\n", "config: drainSeconds: -1 is negative"},
		{"missing provider", "clusterName: a\n", "config: provider: required (valid names: avi, bigip, haproxy, mock)"},
		{"provider not a mapping", "clusterName: a\nprovider: mock\n", "config: provider: want a mapping with a name"},
		{"missing provider.name", "clusterName: a\nprovider: {mock: {}}\n", "config: provider.name: required (valid: avi, bigip, haproxy, mock)"},
		{"provider.name not a string", "clusterName: a\nprovider: {name: [mock]}\n", `config: provider.name: want a string, got ["mock"]`},
		{"unknown provider", "clusterName: a\nprovider: {name: f5}\n", `config: provider.name: unknown provider "f5" (valid: avi, bigip, haproxy, mock)`},
		{"another provider's section", "clusterName: a\nprovider: {name: mock, avi: {controller: x}}\n",
			`config: provider.avi: only the section of the chosen provider "mock" may be given`},
		{"unknown key in provider", "clusterName: a\nprovider: {name: mock, mock: {}, retries: 3}\n",
			`config: provider.retries: only the section of the chosen provider "mock" may be given`},
		{"unknown key in the provider section", "clusterName: a\nprovider: {name: mock, mock: {stateFile: x, fail: 1}}\n",
			"config: provider.mock.fail: unknown field (valid: stateFile, latency, failCalls, allowFaultInjection)"},
		{"provider section not a mapping", "clusterName: a\nprovider: {name: mock, mock: [x]}\n",
			"config: provider.mock: want a mapping, got a JSON array"},
		{"provider section error", "clusterName: a\nprovider: {name: mock, mock: {stateFile: " + missingDir + "/s.json}}\n",
			"config: provider.mock.stateFile: stat " + missingDir + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), ".")
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", viewOf(c))
			}
			if msg := err.Error(); !strings.HasPrefix(msg, tt.wantErr) {
				t.Errorf("err = %q\nwant prefix %q", msg, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("err spans lines: %q", err)
			}
		})
	}
}

func TestParse_providerErrorsKeepTheirCause(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	_, err := Parse([]byte("clusterName: a\nprovider: {name: mock, mock: {stateFile: "+dir+"/s.json}}\n"), ".")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want it to wrap os.ErrNotExist", err)
	}
}

func TestProviderError_placesTheFieldUnderTheProvider(t *testing.T) {
	tests := []struct {
		name string
		err  string
		want string
	}{
		{"field only", "passwordFile: open /x: no such file", "config: provider.avi.passwordFile: open /x: no such file"},
		{"nested field path", "pools[0].name: required", "config: provider.avi.pools[0].name: required"},
		{"whole path given by the provider", "provider.avi.passwordFile: open /x: no such file",
			"config: provider.avi.passwordFile: open /x: no such file"},
		{"section-level error with our prefix", "provider.avi: unexpected data", "config: provider.avi: unexpected data"},
		{"no field", "want a mapping: bad", "config: provider.avi: want a mapping: bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cause := errors.New(tt.err)
			got := providerError("avi", cause)
			if got.Error() != tt.want {
				t.Errorf("providerError = %q, want %q", got, tt.want)
			}
			if !errors.Is(got, cause) {
				t.Errorf("providerError does not wrap its cause")
			}
		})
	}
}
