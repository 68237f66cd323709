package avi

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/vmware/alb-sdk/go/models"
)

// maxNameLength is the longest object name the controller accepts.
const maxNameLength = 255

// shortenedSuffixLength is what lbmodel.Shorten appends.
const shortenedSuffixLength = lbmodel.ShortenedSuffixLength

// The controller's system objects an L4 load balancer uses, as AKO uses them.
const (
	monitorTCP         = "System-TCP"
	monitorUDP         = "System-UDP"
	applicationProfile = "System-L4-Application"
	profileTCPProxy    = "System-TCP-Proxy"
	profileUDPFastPath = "System-UDP-Fast-Path"
	// gracefulDisableTimeout lets a disabled member (a terminating Pod)
	// finish its connections for one minute.
	gracefulDisableTimeout = 1
)

// Marker keys, as AKO sets them.
const (
	markerCluster = "clustername"
	markerService = "service"
	// markerIngress names the Ingress of an L7 load balancer of its own.
	markerIngress = "ingress"
	// markerLB names, on every object of an L7 load balancer, the load
	// balancer, so that List groups them even when names were shortened.
	markerLB = "loadbalancer"
	// markerSecret and markerHosts say which Secret and hosts a certificate
	// serves.
	markerSecret = "secret"
	markerHosts  = "hosts"
	// markerModelName holds an L7 pool's model name when its Avi name had
	// to be shortened, and on every pool and pool group of a Gateway's load
	// balancer the model pool it stands for.
	markerModelName = "modelname"
	// markerGateway names the Gateway ("namespace/name") of a Gateway's
	// load balancer, on each of its objects.
	markerGateway = "gateway"
	// markerWeight is the weight of every member of a pool of a Gateway's
	// load balancer, whose pool group gives it its share of requests.
	markerWeight = "weight"
)

// markers is what an object's markers say about its owner. The fields L4
// objects do not use are omitted from checksums, which stay as they were.
type markers struct {
	Cluster string   `json:"cluster"`
	Service string   `json:"service,omitempty"`
	Ingress string   `json:"ingress,omitempty"`
	LB      string   `json:"lb,omitempty"`
	Secret  string   `json:"secret,omitempty"`
	Hosts   []string `json:"hosts,omitempty"`
	Name    string   `json:"name,omitempty"`
	Gateway string   `json:"gateway,omitempty"`
	Weight  string   `json:"weight,omitempty"`
}

// The specs below are the part of each object the provider decides. A spec
// is built from the model for the desired state and read back from what the
// controller returns; equal checksums mean nothing to write. Reading it back
// (rather than trusting cloud_config_cksum alone) also repairs an object
// someone changed by hand.

type poolSpec struct {
	Name     string           `json:"name"`
	Cloud    string           `json:"cloud"`
	Monitors []string         `json:"monitors"`
	Members  []lbmodel.Member `json:"members"`
	Graceful int32            `json:"graceful"`
	Markers  markers          `json:"markers"`
	// Policy is what a traffic policy sets on the pool, and Record the
	// pool's description, which records the policy (policyRecord); both
	// omitted (so the checksums of pools without one stay as they were)
	// when it has none.
	Policy *poolPolicySpec `json:"policy,omitempty"`
	Record string          `json:"record,omitempty"`
}

type ruleSpec struct {
	Port     int32            `json:"port"`
	Protocol lbmodel.Protocol `json:"protocol"`
	Pool     string           `json:"pool"`
	// PoolGroup is the pool group of a Gateway's TCP or UDP listener,
	// omitted (so L4 checksums stay as they were) when empty.
	PoolGroup string `json:"poolGroup,omitempty"`
}

type policySpec struct {
	Name    string     `json:"name"`
	Rules   []ruleSpec `json:"rules"`
	Markers markers    `json:"markers"`
}

type serviceSpec struct {
	Port int32 `json:"port"`
	// NetworkProfile overrides the virtual service's one for this port.
	NetworkProfile string `json:"networkProfile,omitempty"`
	// SSL terminates TLS on this port (L7 only).
	SSL bool `json:"ssl,omitempty"`
}

type vsSpec struct {
	Name               string        `json:"name"`
	Cloud              string        `json:"cloud"`
	ServiceEngineGroup string        `json:"seGroup"`
	VsVip              string        `json:"vsVip"`
	PolicySet          string        `json:"policySet"`
	ApplicationProfile string        `json:"applicationProfile"`
	NetworkProfile     string        `json:"networkProfile"`
	Services           []serviceSpec `json:"services"`
	Markers            markers       `json:"markers"`
	// The L7 fields, omitted (so L4 checksums stay as they were) when empty.
	HTTPPolicySet    string   `json:"httpPolicySet,omitempty"`
	DefaultPool      string   `json:"defaultPool,omitempty"`
	DefaultPoolGroup string   `json:"defaultPoolGroup,omitempty"`
	Certificates     []string `json:"certificates,omitempty"`
	SSLProfile       string   `json:"sslProfile,omitempty"`
}

type vsvipSpec struct {
	Name  string `json:"name"`
	Cloud string `json:"cloud"`
	// Network is where an automatic address comes from; Address is a
	// requested one. Exactly one is set.
	Network string  `json:"network,omitempty"`
	Address string  `json:"address,omitempty"`
	Markers markers `json:"markers"`
}

// checksum is the cloud_config_cksum of a spec.
func checksum(spec any) string {
	b, err := json.Marshal(spec)
	if err != nil {
		panic(fmt.Sprintf("checksum of %T: %v", spec, err)) // specs are plain data
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// layout is every Avi object of one load balancer, as desired.
type layout struct {
	// name is the Avi name of the VsVip, policy set and virtual service.
	name   string
	vsvip  vsvipSpec
	pools  []poolSpec // sorted by name
	policy policySpec
	vs     vsSpec
	// objects are the monitors and persistence profiles of the pools'
	// policies.
	objects policyObjects
}

func (l *layout) poolNames() map[string]bool {
	return nameSet(l.pools, func(s poolSpec) string { return s.Name })
}

// nameSet is the set of the names of specs, as the reads of wanted objects
// take them.
func nameSet[Spec any](specs []Spec, name func(Spec) string) map[string]bool {
	out := make(map[string]bool, len(specs))
	for _, s := range specs {
		out[name(s)] = true
	}
	return out
}

// plan lays lb out, a model that passed lbmodel.Normalize (the registry
// opens the provider behind providers.Validated). It makes no call.
func (p *Provider) plan(lb *lbmodel.LoadBalancer) (*layout, error) {
	if !lbmodel.OwnedBy(p.cfg.ClusterName, lb.Name) {
		return nil, fmt.Errorf("name %q does not start with the cluster name %q and --", lb.Name, p.cfg.ClusterName)
	}
	name := lbmodel.Shorten(lb.Name, maxNameLength)
	mk := markers{Cluster: p.cfg.ClusterName, Service: lb.Service}
	l := &layout{name: name}

	l.vsvip = vsvipSpec{Name: name, Cloud: p.cfg.Cloud, Network: p.cfg.VIPNetwork, Markers: mk}
	if lb.RequestedVIP != "" {
		l.vsvip.Network, l.vsvip.Address = "", lb.RequestedVIP
	}

	l.policy = policySpec{Name: name, Markers: mk}
	l.vs = vsSpec{
		Name: name, Cloud: p.cfg.Cloud, ServiceEngineGroup: p.cfg.ServiceEngineGroup,
		VsVip: name, PolicySet: name, ApplicationProfile: applicationProfile, NetworkProfile: profileTCPProxy,
		Markers: mk,
	}
	allUDP := true
	for _, ln := range lb.Listeners {
		allUDP = allUDP && ln.Protocol == lbmodel.UDP
	}
	if allUDP {
		// As AKO does: a UDP-only virtual service takes the UDP profile
		// whole instead of overriding every port.
		l.vs.NetworkProfile = profileUDPFastPath
	}

	for _, ln := range lb.Listeners {
		monitor := monitorTCP
		if ln.Protocol == lbmodel.UDP {
			monitor = monitorUDP
		}
		poolName := lbmodel.Shorten(ln.Pool.Name, maxNameLength)
		if slices.ContainsFunc(l.pools, func(ps poolSpec) bool { return ps.Name == poolName }) {
			return nil, fmt.Errorf("pools of %s: two shorten to %s", lb.Name, poolName)
		}
		spec := poolSpec{Name: poolName, Cloud: p.cfg.Cloud, Members: ln.Pool.Members, Markers: mk}
		p.poolPolicy(&l.objects, &spec, ln.Pool, monitor, 1)
		l.pools = append(l.pools, spec)
		l.policy.Rules = append(l.policy.Rules, ruleSpec{Port: ln.Port, Protocol: ln.Protocol, Pool: poolName})
		svc := serviceSpec{Port: ln.Port}
		if ln.Protocol == lbmodel.UDP && !allUDP {
			svc.NetworkProfile = profileUDPFastPath
		}
		l.vs.Services = append(l.vs.Services, svc)
	}
	slices.SortFunc(l.pools, func(a, b poolSpec) int { return cmp.Compare(a.Name, b.Name) })
	sortRules(l.policy.Rules)
	sortServices(l.vs.Services)
	return l, nil
}

func sortRules(rules []ruleSpec) {
	slices.SortFunc(rules, func(a, b ruleSpec) int {
		if c := cmp.Compare(a.Protocol, b.Protocol); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	})
}

func sortServices(svcs []serviceSpec) {
	slices.SortFunc(svcs, func(a, b serviceSpec) int {
		if c := cmp.Compare(a.Port, b.Port); c != 0 {
			return c
		}
		return cmp.Compare(a.NetworkProfile, b.NetworkProfile)
	})
}

// Reading specs back from controller objects (fetched with include_name, so
// references end in #name).

// refName is the name a reference ends with (…/api/pool/pool-1#name).
func refName(ref *string) string {
	if ref == nil {
		return ""
	}
	_, name, _ := strings.Cut(*ref, "#")
	return name
}

func markersOf(labels []*models.RoleFilterMatchLabel) markers {
	var m markers
	for _, l := range labels {
		if l == nil || l.Key == nil || len(l.Values) == 0 {
			continue
		}
		switch *l.Key {
		case markerCluster:
			m.Cluster = l.Values[0]
		case markerService:
			m.Service = l.Values[0]
		case markerIngress:
			m.Ingress = l.Values[0]
		case markerLB:
			m.LB = l.Values[0]
		case markerSecret:
			m.Secret = l.Values[0]
		case markerHosts:
			m.Hosts = slices.Clone(l.Values)
		case markerModelName:
			m.Name = l.Values[0]
		case markerGateway:
			m.Gateway = l.Values[0]
		case markerWeight:
			m.Weight = l.Values[0]
		}
	}
	return m
}

// poolSpecOf reads a pool back; withPolicy reads what a traffic policy
// sets too, which a pool without one leaves to the controller.
func poolSpecOf(o *models.Pool, withPolicy bool) poolSpec {
	s := poolSpec{Name: deref(o.Name), Cloud: refName(o.CloudRef), Graceful: gracefulDisableTimeout, Markers: markersOf(o.Markers)}
	if o.GracefulDisableTimeout != nil {
		s.Graceful = *o.GracefulDisableTimeout
	}
	for _, ref := range o.HealthMonitorRefs {
		s.Monitors = append(s.Monitors, refName(&ref))
	}
	s.Members = membersOf(o)
	if withPolicy {
		s.Policy, s.Record = poolPolicySpecOf(o), deref(o.Description)
	}
	return s
}

// membersOf reads a pool's servers; a server without enabled is enabled, as
// the controller defaults it.
func membersOf(o *models.Pool) []lbmodel.Member {
	members := make([]lbmodel.Member, 0, len(o.Servers))
	for _, srv := range o.Servers {
		if srv == nil || srv.IP == nil || srv.IP.Addr == nil {
			continue
		}
		m := lbmodel.Member{IP: *srv.IP.Addr, Enabled: true}
		if ip, err := netip.ParseAddr(m.IP); err == nil {
			m.IP = ip.Unmap().String()
		}
		if srv.Port != nil {
			m.Port = *srv.Port
		}
		if srv.Enabled != nil {
			m.Enabled = *srv.Enabled
		}
		members = append(members, m)
	}
	return lbmodel.SortMembers(members)
}

// rulesOf reads the port, protocol and pool of each rule of a policy set.
func rulesOf(o *models.L4PolicySet) []ruleSpec {
	var rules []ruleSpec
	if o.L4ConnectionPolicy == nil {
		return nil
	}
	for _, r := range o.L4ConnectionPolicy.Rules {
		if r == nil || r.Match == nil || r.Match.Port == nil || len(r.Match.Port.Ports) != 1 {
			continue
		}
		rs := ruleSpec{Port: int32(r.Match.Port.Ports[0])}
		if r.Match.Protocol != nil {
			rs.Protocol = protocolOf(deref(r.Match.Protocol.Protocol))
		}
		if r.Action != nil && r.Action.SelectPool != nil {
			rs.Pool = refName(r.Action.SelectPool.PoolRef)
			rs.PoolGroup = refName(r.Action.SelectPool.PoolGroupRef)
		}
		rules = append(rules, rs)
	}
	sortRules(rules)
	return rules
}

func policySpecOf(o *models.L4PolicySet) policySpec {
	return policySpec{Name: deref(o.Name), Rules: rulesOf(o), Markers: markersOf(o.Markers)}
}

func vsSpecOf(o *models.VirtualService) vsSpec {
	s := vsSpec{
		Name: deref(o.Name), Cloud: refName(o.CloudRef), ServiceEngineGroup: refName(o.SeGroupRef),
		VsVip: refName(o.VsvipRef), ApplicationProfile: refName(o.ApplicationProfileRef),
		NetworkProfile: refName(o.NetworkProfileRef), Markers: markersOf(o.Markers),
	}
	if len(o.L4Policies) == 1 && o.L4Policies[0] != nil {
		s.PolicySet = refName(o.L4Policies[0].L4PolicySetRef)
	}
	if len(o.HTTPPolicies) == 1 && o.HTTPPolicies[0] != nil {
		s.HTTPPolicySet = refName(o.HTTPPolicies[0].HTTPPolicySetRef)
	}
	s.DefaultPool = refName(o.PoolRef)
	s.DefaultPoolGroup = refName(o.PoolGroupRef)
	s.SSLProfile = refName(o.SslProfileRef)
	for _, ref := range o.SslKeyAndCertificateRefs {
		s.Certificates = append(s.Certificates, refName(&ref))
	}
	slices.Sort(s.Certificates)
	for _, svc := range o.Services {
		if svc == nil || svc.Port == nil {
			continue
		}
		s.Services = append(s.Services, serviceSpec{Port: *svc.Port, NetworkProfile: refName(svc.OverrideNetworkProfileRef),
			SSL: svc.EnableSsl != nil && *svc.EnableSsl})
	}
	sortServices(s.Services)
	return s
}

func vsvipSpecOf(o *models.VsVip) vsvipSpec {
	s := vsvipSpec{Name: deref(o.Name), Cloud: refName(o.CloudRef), Markers: markersOf(o.Markers)}
	if len(o.Vip) != 1 || o.Vip[0] == nil {
		return s
	}
	vip := o.Vip[0]
	if vip.AutoAllocateIP != nil && *vip.AutoAllocateIP {
		if vip.IPAMNetworkSubnet != nil {
			s.Network = refName(vip.IPAMNetworkSubnet.NetworkRef)
		}
	} else if vip.IPAddress != nil && vip.IPAddress.Addr != nil {
		s.Address = *vip.IPAddress.Addr
		if ip, err := netip.ParseAddr(s.Address); err == nil {
			s.Address = ip.String()
		}
	}
	return s
}

// vipsOf returns the addresses a VsVip serves on.
func vipsOf(o *models.VsVip) []string {
	var out []string
	if o == nil {
		return nil
	}
	for _, vip := range o.Vip {
		if vip == nil {
			continue
		}
		for _, a := range []*models.IPAddr{vip.IPAddress, vip.Ip6Address} {
			if a != nil && a.Addr != nil && *a.Addr != "" {
				out = append(out, *a.Addr)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Building the objects to send.

// nameRef refers to an object by name; the controller resolves it.
func nameRef(typ, name string) *string {
	return ptr("/api/" + typ + "/?name=" + url.QueryEscape(name))
}

// objectRef refers to an object by the url the controller gave it.
func objectRef(u *string) *string {
	s, _, _ := strings.Cut(deref(u), "#")
	return &s
}

func markerLabels(m markers) []*models.RoleFilterMatchLabel {
	out := []*models.RoleFilterMatchLabel{{Key: ptr(markerCluster), Values: []string{m.Cluster}}}
	for _, kv := range []struct{ key, value string }{
		{markerService, m.Service}, {markerIngress, m.Ingress}, {markerLB, m.LB}, {markerSecret, m.Secret},
		{markerModelName, m.Name}, {markerGateway, m.Gateway}, {markerWeight, m.Weight},
	} {
		if kv.value != "" {
			out = append(out, &models.RoleFilterMatchLabel{Key: ptr(kv.key), Values: []string{kv.value}})
		}
	}
	if len(m.Hosts) > 0 {
		out = append(out, &models.RoleFilterMatchLabel{Key: ptr(markerHosts), Values: slices.Clone(m.Hosts)})
	}
	return out
}

func (p *Provider) poolModel(s poolSpec) *models.Pool {
	o := &models.Pool{
		Name:                   ptr(s.Name),
		CloudRef:               nameRef("cloud", s.Cloud),
		GracefulDisableTimeout: ptr(s.Graceful),
		CreatedBy:              ptr(p.owner),
		Markers:                markerLabels(s.Markers),
		CloudConfigCksum:       ptr(checksum(s)),
		Servers:                make([]*models.Server, 0, len(s.Members)),
	}
	setPoolPolicy(o, s.Policy)
	if s.Record != "" {
		o.Description = ptr(s.Record)
	}
	for _, m := range s.Monitors {
		o.HealthMonitorRefs = append(o.HealthMonitorRefs, *nameRef("healthmonitor", m))
	}
	for _, m := range s.Members {
		typ := "V4"
		if ip, err := netip.ParseAddr(m.IP); err == nil && ip.Is6() {
			typ = "V6"
		}
		o.Servers = append(o.Servers, &models.Server{
			IP:      &models.IPAddr{Addr: ptr(m.IP), Type: ptr(typ)},
			Port:    ptr(m.Port),
			Enabled: ptr(m.Enabled),
		})
	}
	return o
}

// vsvipModel builds the VsVip. current is the stored one, if any: an
// automatic address it already holds in the same network is kept.
func (p *Provider) vsvipModel(s vsvipSpec, current *models.VsVip) *models.VsVip {
	vip := &models.Vip{VipID: ptr("0")}
	if s.Address != "" {
		typ := "V4"
		if ip, _ := netip.ParseAddr(s.Address); ip.Is6() {
			typ = "V6"
		}
		vip.AutoAllocateIP = ptr(false)
		vip.IPAddress = &models.IPAddr{Addr: ptr(s.Address), Type: ptr(typ)}
	} else {
		vip.AutoAllocateIP = ptr(true)
		vip.IPAMNetworkSubnet = &models.IPNetworkSubnet{NetworkRef: nameRef("network", s.Network)}
		if current != nil && vsvipSpecOf(current).Network == s.Network && len(current.Vip) == 1 && current.Vip[0] != nil {
			vip.IPAddress = current.Vip[0].IPAddress
		}
	}
	return &models.VsVip{
		Name:     ptr(s.Name),
		CloudRef: nameRef("cloud", s.Cloud),
		Vip:      []*models.Vip{vip},
		Markers:  markerLabels(s.Markers),
	}
}

func (p *Provider) policyModel(s policySpec, poolURLs, groupURLs map[string]*string) *models.L4PolicySet {
	o := &models.L4PolicySet{
		Name:               ptr(s.Name),
		CreatedBy:          ptr(p.owner),
		Markers:            markerLabels(s.Markers),
		L4ConnectionPolicy: &models.L4ConnectionPolicy{},
	}
	for i, r := range s.Rules {
		o.L4ConnectionPolicy.Rules = append(o.L4ConnectionPolicy.Rules, &models.L4Rule{
			Name:   ptr(fmt.Sprintf("%s-%d", strings.ToLower(string(r.Protocol)), r.Port)),
			Index:  ptr(int32(i + 1)),
			Enable: ptr(true),
			Match: &models.L4RuleMatchTarget{
				Port:     &models.L4RulePortMatch{MatchCriteria: ptr("IS_IN"), Ports: []int64{int64(r.Port)}},
				Protocol: &models.L4RuleProtocolMatch{MatchCriteria: ptr("IS_IN"), Protocol: ptr("PROTOCOL_" + string(r.Protocol))},
			},
			Action: &models.L4RuleAction{SelectPool: &models.L4RuleActionSelectPool{
				ActionType: ptr("L4_RULE_ACTION_SELECT_POOL"),
				PoolRef:    objectRef(poolURLs[r.Pool]),
			}},
		})
		if r.PoolGroup != "" {
			o.L4ConnectionPolicy.Rules[i].Action.SelectPool = &models.L4RuleActionSelectPool{
				ActionType:   ptr("L4_RULE_ACTION_SELECT_POOLGROUP"),
				PoolGroupRef: objectRef(groupURLs[r.PoolGroup]),
			}
		}
	}
	return o
}

// vsRefs are the URLs of the objects a virtual service refers to, as the
// controller gave them; nil where the virtual service has none.
type vsRefs struct {
	vsvip, l4Policy, httpPolicy, defaultPool, defaultPoolGroup *string
	certificates                                               []*string
}

// httpPolicyIndex is where the virtual service's one HTTP policy set sits.
const httpPolicyIndex = 11

func (p *Provider) vsModel(s vsSpec, refs vsRefs) *models.VirtualService {
	o := &models.VirtualService{
		Name:                  ptr(s.Name),
		CloudRef:              nameRef("cloud", s.Cloud),
		SeGroupRef:            nameRef("serviceenginegroup", s.ServiceEngineGroup),
		VsvipRef:              objectRef(refs.vsvip),
		ApplicationProfileRef: nameRef("applicationprofile", s.ApplicationProfile),
		NetworkProfileRef:     nameRef("networkprofile", s.NetworkProfile),
		CreatedBy:             ptr(p.owner),
		Markers:               markerLabels(s.Markers),
		CloudConfigCksum:      ptr(checksum(s)),
	}
	if refs.l4Policy != nil {
		o.L4Policies = []*models.L4Policies{{Index: ptr(int32(0)), L4PolicySetRef: objectRef(refs.l4Policy)}}
	}
	if refs.httpPolicy != nil {
		o.HTTPPolicies = []*models.HTTPPolicies{{Index: ptr(int32(httpPolicyIndex)), HTTPPolicySetRef: objectRef(refs.httpPolicy)}}
	}
	if refs.defaultPool != nil {
		o.PoolRef = objectRef(refs.defaultPool)
	}
	if refs.defaultPoolGroup != nil {
		o.PoolGroupRef = objectRef(refs.defaultPoolGroup)
	}
	for _, c := range refs.certificates {
		o.SslKeyAndCertificateRefs = append(o.SslKeyAndCertificateRefs, *objectRef(c))
	}
	if s.SSLProfile != "" {
		o.SslProfileRef = nameRef("sslprofile", s.SSLProfile)
	}
	for _, svc := range s.Services {
		out := &models.Service{Port: ptr(svc.Port)}
		if svc.NetworkProfile != "" {
			out.OverrideNetworkProfileRef = nameRef("networkprofile", svc.NetworkProfile)
		}
		if svc.SSL {
			out.EnableSsl = ptr(true)
		}
		o.Services = append(o.Services, out)
	}
	return o
}

func protocolOf(avi string) lbmodel.Protocol {
	return lbmodel.Protocol(strings.TrimPrefix(avi, "PROTOCOL_"))
}

// poolNamePattern matches the pools of one load balancer by the naming
// scheme <lb>-<PROTO>-<port>. Kubernetes names are lower case, so the
// upper-case protocol cannot be part of another Service's name.
func poolNamePattern(lbName string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(lbName) + "-(TCP|UDP)-([0-9]+)$")
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
