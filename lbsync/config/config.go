// Package config loads npl-lbsync's configuration file: YAML decoded
// strictly (unknown keys are errors), defaults applied and everything
// validated once, including the chosen provider's section. The result is
// read through getters, so it cannot change after Load.
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/internal/strictjson"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/registry"
)

// Defaults of the optional fields.
const (
	DefaultServiceType       = builder.ServiceTypeNodePortLocal
	DefaultLoadBalancerClass = "npl.io/lb"
	DefaultIngressClass      = "npl"
	DefaultResyncPeriod      = 10 * time.Minute
	DefaultDrainSeconds      = 30
	DefaultIPFamily          = contract.FamilyIPv4
	// MaxClusterNameLength keeps object names short enough for the load
	// balancers once namespace and Service name are added.
	MaxClusterNameLength = lbmodel.MaxClusterNameLength
)

// Config is npl-lbsync's validated configuration. It is immutable: getters
// return copies.
type Config struct {
	dir                 string
	clusterName         string
	serviceType         string
	loadBalancerClass   string
	defaultLoadBalancer bool
	ingressClass        string
	ingressSharedVIP    bool
	gatewayAPI          bool
	vipPool             []netip.Prefix
	allowedVIPs         []netip.Prefix
	nodePortRange       contract.PortRange
	resyncPeriod        time.Duration
	drainSeconds        int
	ipFamily            string
	providerName        string
	provider            providers.Config
}

// ClusterName prefixes every load balancer object and marks ownership.
func (c *Config) ClusterName() string { return c.clusterName }

// ServiceType is what pool members are: one of builder's ServiceType
// constants.
func (c *Config) ServiceType() string { return c.serviceType }

// LoadBalancerClass is the spec.loadBalancerClass of the Services we serve.
func (c *Config) LoadBalancerClass() string { return c.loadBalancerClass }

// DefaultLoadBalancer reports whether LoadBalancer Services with no class
// are ours too.
func (c *Config) DefaultLoadBalancer() bool { return c.defaultLoadBalancer }

// IngressClass is the IngressClass name of the Ingresses we serve.
func (c *Config) IngressClass() string { return c.ingressClass }

// IngressSharedVIP serves all Ingresses of our class on one load balancer
// and VIP instead of one each.
func (c *Config) IngressSharedVIP() bool { return c.ingressSharedVIP }

// GatewayAPIEnabled reports whether npl-lbsync serves the Gateways of
// GatewayClasses whose controllerName is npl.io/gateway-controller
// (gatewayAPI.enabled).
func (c *Config) GatewayAPIEnabled() bool { return c.gatewayAPI }

// VIPPool returns the ranges VIPs are taken from, for providers that do not
// allocate them.
func (c *Config) VIPPool() []netip.Prefix { return slices.Clone(c.vipPool) }

// AllowedVIPs returns the ranges a requested VIP (spec.loadBalancerIP,
// npl.io/load-balancer-ip, a Gateway's spec.addresses) must lie in:
// allowedVIPs when set, else vipPool; none refuses every requested VIP.
func (c *Config) AllowedVIPs() []netip.Prefix {
	if len(c.allowedVIPs) > 0 {
		return slices.Clone(c.allowedVIPs)
	}
	return c.VIPPool()
}

// NodePortRange is the range npl-agent allocates node ports from
// (nodePortRange, default contract.DefaultPortRange): an annotation entry
// outside it is no member.
func (c *Config) NodePortRange() contract.PortRange { return c.nodePortRange }

// ResyncPeriod is how often every Service is synced again.
func (c *Config) ResyncPeriod() time.Duration { return c.resyncPeriod }

// DrainPeriod is how long a draining (disabled) member stays in its pool.
func (c *Config) DrainPeriod() time.Duration { return time.Duration(c.drainSeconds) * time.Second }

// IPFamily is the family of pool members: contract.FamilyIPv4 or IPv6.
func (c *Config) IPFamily() string { return c.ipFamily }

// ProviderName is provider.name.
func (c *Config) ProviderName() string { return c.providerName }

// Provider is the chosen provider's parsed configuration; Open it to get the
// providers.Provider.
func (c *Config) Provider() providers.Config { return c.provider }

// Common is the part of the configuration every provider sees.
func (c *Config) Common() providers.Common {
	return providers.Common{ClusterName: c.clusterName, VIPPool: c.VIPPool()}
}

// Claim is the part of the configuration that decides which Services are
// ours.
func (c *Config) Claim() claim.ClaimConfig {
	return claim.ClaimConfig{LoadBalancerClass: c.loadBalancerClass, DefaultLoadBalancer: c.defaultLoadBalancer}
}

// Dir is the directory the configuration was read from (baseDir).
func (c *Config) Dir() string { return c.dir }

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, filepath.Dir(path))
}

// file is the YAML shape of the configuration. Optional fields that have a
// non-zero default are pointers, so an explicit zero is told from absence.
type file struct {
	ClusterName         string          `json:"clusterName"`
	ServiceType         string          `json:"serviceType"`
	LoadBalancerClass   string          `json:"loadBalancerClass"`
	DefaultLoadBalancer bool            `json:"defaultLoadBalancer"`
	IngressClass        string          `json:"ingressClass"`
	IngressSharedVIP    bool            `json:"ingressSharedVIP"`
	GatewayAPI          json.RawMessage `json:"gatewayAPI"`
	VIPPool             []string        `json:"vipPool"`
	AllowedVIPs         []string        `json:"allowedVIPs"`
	NodePortRange       string          `json:"nodePortRange"`
	ResyncPeriod        string          `json:"resyncPeriod"`
	DrainSeconds        *int            `json:"drainSeconds"`
	IPFamily            string          `json:"ipFamily"`
	Provider            json.RawMessage `json:"provider"`
}

// gatewayAPI is the gatewayAPI section.
type gatewayAPI struct {
	Enabled bool `json:"enabled"`
}

// Parse decodes a configuration file's content. baseDir is the directory it
// came from; it is only recorded (Dir): file paths in provider sections are
// used as given, so a relative path is relative to the working directory.
// Every error is one line that starts with "config: " and names the field.
func Parse(data []byte, baseDir string) (*Config, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		// YAML errors may span lines ("unmarshal errors:\n  line 3: ...").
		return nil, fmt.Errorf("config: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	var f file
	if err := strictjson.Decode(js, &f, "config: "); err != nil {
		return nil, err
	}
	c := &Config{
		dir:                 baseDir,
		clusterName:         f.ClusterName,
		serviceType:         or(f.ServiceType, DefaultServiceType),
		loadBalancerClass:   or(f.LoadBalancerClass, DefaultLoadBalancerClass),
		defaultLoadBalancer: f.DefaultLoadBalancer,
		ingressClass:        or(f.IngressClass, DefaultIngressClass),
		ingressSharedVIP:    f.IngressSharedVIP,
		resyncPeriod:        DefaultResyncPeriod,
		drainSeconds:        DefaultDrainSeconds,
		ipFamily:            or(f.IPFamily, string(DefaultIPFamily)),
		nodePortRange:       contract.DefaultPortRange,
	}
	if err := c.validate(&f); err != nil {
		return nil, err
	}
	if !isNull(f.GatewayAPI) {
		var g gatewayAPI
		if err := strictjson.Decode(f.GatewayAPI, &g, "config: gatewayAPI."); err != nil {
			return nil, err
		}
		c.gatewayAPI = g.Enabled
	}
	if err := c.parseProvider(f.Provider); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) validate(f *file) error {
	if err := lbmodel.CheckClusterName(c.clusterName); err != nil {
		return fieldError("clusterName", "%v", err)
	}
	if err := oneOf(c.serviceType, builder.ServiceTypeNodePortLocal, builder.ServiceTypeNodePort,
		builder.ServiceTypeClusterIP); err != nil {
		return fieldError("serviceType", "%v", err)
	}
	if msgs := content.IsLabelKey(c.loadBalancerClass); len(msgs) > 0 {
		return fieldError("loadBalancerClass", "%q: %s", c.loadBalancerClass, strings.Join(msgs, "; "))
	}
	if msgs := content.IsDNS1123Subdomain(c.ingressClass); len(msgs) > 0 {
		return fieldError("ingressClass", "%q: %s", c.ingressClass, strings.Join(msgs, "; "))
	}
	var err error
	if c.vipPool, err = parseRanges("vipPool", f.VIPPool); err != nil {
		return err
	}
	if c.allowedVIPs, err = parseRanges("allowedVIPs", f.AllowedVIPs); err != nil {
		return err
	}
	if f.NodePortRange != "" {
		if c.nodePortRange, err = contract.ParsePortRange(f.NodePortRange); err != nil {
			return fieldError("nodePortRange", "%v", err)
		}
	}
	if f.ResyncPeriod != "" {
		d, err := time.ParseDuration(f.ResyncPeriod)
		if err != nil {
			return fieldError("resyncPeriod", "%v", err)
		}
		if d <= 0 {
			return fieldError("resyncPeriod", "%s is not positive", f.ResyncPeriod)
		}
		c.resyncPeriod = d
	}
	if f.DrainSeconds != nil {
		if *f.DrainSeconds < 0 {
			return fieldError("drainSeconds", "%d is negative", *f.DrainSeconds)
		}
		c.drainSeconds = *f.DrainSeconds
	}
	if err := oneOf(c.ipFamily, string(contract.FamilyIPv4), string(contract.FamilyIPv6)); err != nil {
		return fieldError("ipFamily", "%v", err)
	}
	return nil
}

// parseRanges parses the list of address ranges of field: CIDRs without
// host bits that do not overlap.
func parseRanges(field string, list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fieldError(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		if p != p.Masked() {
			return nil, fieldError(fmt.Sprintf("%s[%d]", field, i), "%s has host bits set; the range is %s", s, p.Masked())
		}
		for j, q := range out {
			if p.Overlaps(q) {
				return nil, fieldError(fmt.Sprintf("%s[%d]", field, i), "%s overlaps %s[%d] %s", p, field, j, q)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// fieldPathRE matches an error message that starts with a field path such as
// "passwordFile: " or "pools[0].name: ".
var fieldPathRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\[[0-9]+\]|\.[A-Za-z][A-Za-z0-9_]*)*: `)

// parseProvider checks provider: {name: X, X: {section}} and hands the
// section to X's ParseFunc.
func (c *Config) parseProvider(raw json.RawMessage) error {
	if isNull(raw) {
		return fieldError("provider", "required (valid names: %s)", strings.Join(registry.Names(), ", "))
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(raw, &p); err != nil {
		return fieldError("provider", "want a mapping with a name")
	}
	nameRaw, ok := p["name"]
	if !ok || isNull(nameRaw) {
		return fieldError("provider.name", "required (valid: %s)", strings.Join(registry.Names(), ", "))
	}
	var name string
	if err := json.Unmarshal(nameRaw, &name); err != nil {
		return fieldError("provider.name", "want a string, got %s", nameRaw)
	}
	if !registry.Known(name) {
		return fieldError("provider.name", "unknown provider %q (valid: %s)", name, strings.Join(registry.Names(), ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(p)) {
		if k != "name" && k != name {
			return fieldError("provider."+k, "only the section of the chosen provider %q may be given", name)
		}
	}
	section := p[name]
	if isNull(section) {
		section = json.RawMessage("{}")
	}
	cfg, err := registry.Parse(name, c.Common(), section)
	if err != nil {
		return providerError(name, err)
	}
	c.providerName, c.provider = name, cfg
	return nil
}

// providerError places a provider's parse error under provider.<name>, so
// that it reads "config: provider.avi.passwordFile: open /x: no such file"
// whether the provider named the field only ("passwordFile: ..."), the whole
// path ("provider.avi.passwordFile: ..."), or no field at all.
func providerError(name string, err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "provider."+name+".") || strings.HasPrefix(msg, "provider."+name+": "):
		return fmt.Errorf("config: %w", err)
	case fieldPathRE.MatchString(msg):
		return fmt.Errorf("config: provider.%s.%w", name, err)
	default:
		return fmt.Errorf("config: provider.%s: %w", name, err)
	}
}

func isNull(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func oneOf(v string, valid ...string) error {
	if slices.Contains(valid, v) {
		return nil
	}
	return fmt.Errorf("%q is not one of %s", v, strings.Join(valid, ", "))
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func fieldError(path, format string, args ...any) error {
	return fmt.Errorf("config: %s: %s", path, fmt.Sprintf(format, args...))
}
