// Package inspect compares the load balancer pools the cluster expects,
// L4 and L7, of Services, Ingresses and Gateways, gathered and built as
// npl-lbsync does (packages inputs, builder, ingress and gateway), with the
// pools a provider reports. nplctl prints the result; tests assert on it.
package inspect

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/ingress"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/providers"
)

// Pool states.
const (
	StateInSync  = "in-sync"
	StateDrift   = "drift"
	StateMissing = "missing"
)

// Member is one pool member as printed.
type Member struct {
	IP      string `json:"ip"`
	Port    int32  `json:"port"`
	Enabled bool   `json:"enabled"`
}

// Address is the member as ip:port, with the IPv6 address in brackets.
func (m Member) Address() string { return net.JoinHostPort(m.IP, strconv.Itoa(int(m.Port))) }

// Pool is one expected pool beside what the provider has.
type Pool struct {
	Service  string   `json:"service"`
	Name     string   `json:"name"`
	Protocol string   `json:"protocol"`
	Port     int32    `json:"port"`
	VIPs     []string `json:"vips,omitempty"`
	Expected []Member `json:"expected"`
	Actual   []Member `json:"actual"`
	State    string   `json:"state"`
	// Missing and Extra name the members that differ, as "ip:port".
	Missing []string `json:"missing,omitempty"`
	Extra   []string `json:"extra,omitempty"`
	// Reason explains the state when no provider was asked.
	Reason string `json:"reason,omitempty"`
	// Policy is the pool's traffic policy as npl-lbsync asks for it (its
	// builders' fields and its targets' LoadBalancerPolicies, less what
	// the provider does not express), ActualPolicy what the provider
	// reports, and PolicyDrift the fields that differ (drift, as members
	// that differ are).
	Policy       *lbmodel.Policy `json:"policy,omitempty"`
	ActualPolicy *lbmodel.Policy `json:"actualPolicy,omitempty"`
	PolicyDrift  []string        `json:"policyDrift,omitempty"`
}

// Report is what `nplctl pools` prints.
type Report struct {
	Pools []Pool `json:"pools"`
}

// InSync reports whether every pool is in sync.
func (r Report) InSync() bool {
	for _, p := range r.Pools {
		if p.State != StateInSync {
			return false
		}
	}
	return true
}

// Settings say which Services and Ingresses are ours and how their pools
// are built: the settings of the npl-lbsync installation to inspect.
type Settings struct {
	ClusterName      string
	ServiceType      string
	Family           string
	Claim            claim.ClaimConfig
	IngressClass     string
	IngressSharedVIP bool
	// Checker is the provider's check of a Gateway's listeners and rules,
	// as npl-lbsync builds with it (nil: all of them are served).
	Checker providers.ModelChecker
	// Policies are the LoadBalancerPolicies to apply (none when their CRD
	// is not served).
	Policies []*v1alpha1.LoadBalancerPolicy
	// Capabilities, when set, are what the provider expresses of a policy:
	// the expected models are then normalized and hold only that, as the
	// provider gets them (providers.Validated).
	Capabilities *lbmodel.PolicyCapabilities
	// AgentPorts is npl-lbsync's nodePortRange (inputs.Settings).
	AgentPorts contract.PortRange
}

// Expected builds the load balancers the cluster expects for the Services,
// Ingresses and Gateways of namespace (all when empty) that are ours. It
// gathers the inputs with package inputs, as npl-lbsync does, and builds
// with the same builders; TLS Secrets are read with secrets (nil: none).
// Gateways are read with gc when it is not nil (npl-lbsync serves the
// Gateway API) and the API server serves the Gateway API.
func Expected(ctx context.Context, client kubernetes.Interface, gc gatewayclient.Interface, namespace string, s Settings, secrets inputs.SecretGetter) ([]*lbmodel.LoadBalancer, error) {
	set := inputs.Settings{ClusterName: s.ClusterName, ServiceType: s.ServiceType, Family: s.Family, IngressClass: s.IngressClass,
		AgentPorts: s.AgentPorts}
	store, err := inputs.FromAPI(ctx, client, namespace, set)
	if err != nil {
		return nil, err
	}
	var out []*lbmodel.LoadBalancer
	policies := lbpolicy.Index(s.Policies)
	for _, svc := range store.AllServices() {
		if !claim.Ours(svc, s.Claim) || svc.DeletionTimestamp != nil {
			continue
		}
		if lb, _ := builder.Build(store.ServiceInput(set, svc)); lb != nil {
			own := lbpolicy.ServiceTarget(svc.Namespace, svc.Name)
			lbpolicy.Attach(lb, &own, nil, policies)
			out = append(out, s.asProvided(lb))
		}
	}
	classes := store.Classes()
	var ings []*networkingv1.Ingress
	for _, ing := range store.AllIngresses() {
		if ing.DeletionTimestamp == nil && ingress.Ours(ing, classes, ingress.Config{IngressClass: s.IngressClass}) {
			ings = append(ings, ing)
		}
	}
	slices.SortFunc(ings, func(a, b *networkingv1.Ingress) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	groups := [][]*networkingv1.Ingress{}
	if s.IngressSharedVIP && len(ings) > 0 {
		groups = append(groups, ings)
	} else {
		for _, ing := range ings {
			groups = append(groups, []*networkingv1.Ingress{ing})
		}
	}
	for _, g := range groups {
		in, _, err := store.IngressInput(ctx, set, g, s.IngressSharedVIP, secrets)
		if err != nil {
			return nil, err
		}
		if lb, report := ingress.Build(in); lb != nil {
			lbpolicy.Attach(lb, nil, report.PoolBackends, policies)
			out = append(out, s.asProvided(lb))
		}
	}
	if gc == nil {
		return out, nil
	}
	gws, err := expectedGateways(ctx, client, gc, namespace, store, set, secrets, s, policies)
	for i := range gws {
		gws[i] = s.asProvided(gws[i])
	}
	return append(out, gws...), err
}

// asProvided returns lb as the provider gets it when its capabilities are
// known: normalized, without the policy fields it does not express; as is
// otherwise, or when it breaks the model's rules (npl-lbsync refuses it).
func (s Settings) asProvided(lb *lbmodel.LoadBalancer) *lbmodel.LoadBalancer {
	if s.Capabilities == nil {
		return lb
	}
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		return lb
	}
	n, _ = s.Capabilities.StripPolicies(n)
	return n
}

// expectedGateways builds the load balancers of the Gateways of namespace
// that npl-lbsync serves, with gateway.Build as npl-lbsync does; none when
// the Gateway API is not served.
func expectedGateways(ctx context.Context, client kubernetes.Interface, gc gatewayclient.Interface, namespace string,
	store inputs.Store, set inputs.Settings, secrets inputs.SecretGetter, s Settings, policies lbpolicy.Lookup) ([]*lbmodel.LoadBalancer, error) {
	objs, served, err := inputs.GatewaysFromAPI(ctx, client, gc, namespace)
	if err != nil || !served {
		return nil, err
	}
	var out []*lbmodel.LoadBalancer
	for _, gw := range objs.Gateways {
		if gw.DeletionTimestamp != nil || !gateway.Ours(gw, objs.Classes) {
			continue
		}
		in, err := store.GatewayInput(ctx, set, gw, objs.Sources(gw), secrets)
		if err != nil {
			return nil, err
		}
		in.Checker, in.PolicyCapabilities = s.Checker, s.Capabilities
		if res := gateway.Build(in); res.LB != nil {
			own := lbpolicy.GatewayTarget(gw.Namespace, gw.Name)
			lbpolicy.Attach(res.LB, &own, res.Report.PoolBackends, policies)
			out = append(out, res.LB)
		}
	}
	return out, nil
}

// owner names what a load balancer serves, for the report's service
// column: "namespace/name" of its Service, "ingress namespace/name" of its
// Ingress, "gateway namespace/name" of its Gateway, or the shared Ingress
// load balancer.
func owner(lb *lbmodel.LoadBalancer) string {
	switch {
	case lb.Gateway != "":
		return "gateway " + lb.Gateway
	case !lb.IsL7():
		return lb.Service
	case lb.Ingress != "":
		return "ingress " + lb.Ingress
	default:
		return "ingresses (shared)"
	}
}

// expectedPool is one pool of a load balancer with the listener it serves
// on: its own for L4 and for a Gateway's TCP and UDP listeners; for L7 the
// TLS listener whose SNI routes name it, else the first HTTP(S) listener.
type expectedPool struct {
	pool     lbmodel.Pool
	protocol string
	port     int32
}

func poolsOf(lb *lbmodel.LoadBalancer) []expectedPool {
	var out []expectedPool
	if !lb.IsL7() {
		for _, l := range lb.Listeners {
			out = append(out, expectedPool{l.Pool, string(l.Protocol), l.Port})
		}
		return out
	}
	proto, port := string(lbmodel.HTTP), int32(0)
	if i := slices.IndexFunc(lb.Listeners, func(l lbmodel.Listener) bool { return l.Pool.Name == "" }); i >= 0 {
		proto, port = string(lb.Listeners[i].Protocol), lb.Listeners[i].Port
	}
	for _, l := range lb.Listeners {
		if l.Pool.Name != "" {
			out = append(out, expectedPool{l.Pool, string(l.Protocol), l.Port})
		}
	}
	for _, p := range lb.Pools {
		ep := expectedPool{p, proto, port}
		for _, l := range lb.Listeners {
			if slices.ContainsFunc(l.SNI, func(r lbmodel.SNIRoute) bool { return r.Pool == p.Name }) {
				ep.protocol, ep.port = string(l.Protocol), l.Port
				break
			}
		}
		out = append(out, ep)
	}
	return out
}

// Compare lays each expected pool beside the provider's pool of the same
// name: in-sync when the members (address, port, enabled) are equal, drift
// when they differ, missing when the provider has no such pool.
func Compare(expected []*lbmodel.LoadBalancer, actual []lbmodel.LoadBalancer) Report {
	pools := map[string]lbmodel.Pool{}
	vips := map[string][]string{}
	for _, lb := range actual {
		vips[lb.Name] = lb.VIPs
		for _, ep := range poolsOf(&lb) {
			pools[ep.pool.Name] = ep.pool
		}
	}
	var r Report
	for _, lb := range expected {
		for _, ep := range poolsOf(lb) {
			p := Pool{
				Service: owner(lb), Name: ep.pool.Name, Protocol: ep.protocol, Port: ep.port,
				VIPs: vips[lb.Name], Expected: members(ep.pool.Members), Actual: []Member{}, Policy: ep.pool.Policy,
			}
			got, ok := pools[ep.pool.Name]
			switch {
			case !ok:
				p.State = StateMissing
				p.Missing = addresses(p.Expected)
			default:
				p.Actual = members(got.Members)
				p.Missing, p.Extra = diff(p.Expected, p.Actual)
				p.ActualPolicy = got.Policy
				p.PolicyDrift = PolicyDrift(p.Policy, p.ActualPolicy)
				p.State = StateInSync
				if len(p.Missing) > 0 || len(p.Extra) > 0 || len(p.PolicyDrift) > 0 {
					p.State = StateDrift
				}
			}
			r.Pools = append(r.Pools, p)
		}
	}
	sortPools(r.Pools)
	return r
}

// FromStatus reports the expected pools with the state npl-lbsync recorded,
// when no provider can be asked. For a Service it is its
// npl.io/LoadBalancerSynced condition: True is in-sync, False is drift, no
// condition is missing; for a Gateway (read with gc), its Programmed
// condition alike, its VIPs from status.addresses. An Ingress has no such
// condition: npl-lbsync writes its VIP only after an apply, so a VIP is
// in-sync and none is missing.
func FromStatus(ctx context.Context, client kubernetes.Interface, gc gatewayclient.Interface, expected []*lbmodel.LoadBalancer) (Report, error) {
	var r Report
	for _, lb := range expected {
		var vips []string
		var state, reason string
		var err error
		if lb.Gateway != "" && gc != nil {
			vips, state, reason, err = gatewayState(ctx, gc, lb.Gateway)
		} else {
			vips, state, reason, err = recordedState(ctx, client, lb)
		}
		if err != nil {
			return r, err
		}
		for _, ep := range poolsOf(lb) {
			r.Pools = append(r.Pools, Pool{
				Service: owner(lb), Name: ep.pool.Name, Protocol: ep.protocol, Port: ep.port, VIPs: vips,
				Expected: members(ep.pool.Members), Actual: []Member{}, State: state, Reason: reason, Policy: ep.pool.Policy,
			})
		}
	}
	sortPools(r.Pools)
	return r, nil
}

func recordedState(ctx context.Context, client kubernetes.Interface, lb *lbmodel.LoadBalancer) (vips []string, state, reason string, err error) {
	if lb.IsL7() {
		var names []string
		if lb.Ingress != "" {
			names = []string{lb.Ingress}
		}
		state, reason = StateInSync, "VIP in the ingress status"
		for _, n := range names {
			ns, name, _ := cutService(n)
			ing, err := client.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, "", "", fmt.Errorf("get ingress %s: %w", n, err)
			}
			for _, in := range ing.Status.LoadBalancer.Ingress {
				vips = append(vips, cmp.Or(in.IP, in.Hostname))
			}
		}
		switch {
		case lb.Ingress == "":
			state, reason = StateMissing, "Ingresses share this load balancer: ask the provider with --config"
		case len(vips) == 0:
			state, reason = StateMissing, "no VIP in the ingress status"
		}
		return vips, state, reason, nil
	}
	ns, name, _ := cutService(lb.Service)
	svc, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, "", "", fmt.Errorf("get service %s: %w", lb.Service, err)
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		vips = append(vips, cmp.Or(in.IP, in.Hostname))
	}
	state, reason = StateMissing, "no "+contract.SyncedConditionType+" condition"
	for _, c := range svc.Status.Conditions {
		if c.Type != contract.SyncedConditionType {
			continue
		}
		state, reason = StateDrift, c.Reason+": "+c.Message
		if c.Status == metav1.ConditionTrue {
			state = StateInSync
		}
	}
	return vips, state, reason, nil
}

// gatewayState is the state a Gateway's status records: its Programmed
// condition and its addresses.
func gatewayState(ctx context.Context, gc gatewayclient.Interface, key string) (vips []string, state, reason string, err error) {
	ns, name, _ := cutService(key)
	gw, err := gc.GatewayV1().Gateways(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, "", "", fmt.Errorf("get gateway %s: %w", key, err)
	}
	vips, state, reason = gatewayStatusState(gw.Status)
	return vips, state, reason, nil
}

// gatewayStatusState reads a Gateway's status: Programmed True is in-sync,
// False is drift, no condition is missing; the VIPs are status.addresses.
func gatewayStatusState(st gatewayv1.GatewayStatus) (vips []string, state, reason string) {
	for _, a := range st.Addresses {
		vips = append(vips, a.Value)
	}
	state, reason = StateMissing, "no "+string(gatewayv1.GatewayConditionProgrammed)+" condition"
	for _, c := range st.Conditions {
		if c.Type != string(gatewayv1.GatewayConditionProgrammed) {
			continue
		}
		state, reason = StateDrift, c.Reason+": "+c.Message
		if c.Status == metav1.ConditionTrue {
			state = StateInSync
		}
	}
	return vips, state, reason
}

func cutService(s string) (ns, name string, ok bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

// members lists a pool's members sorted by IP, port, then disabled before
// enabled, keeping a member listed twice: a provider whose load balancers
// disagree (the haproxy provider's edges) lists a member they serve
// differently both enabled and disabled, and that is drift to report, not
// a duplicate to drop.
func members(ms []lbmodel.Member) []Member {
	sorted := slices.Clone(ms)
	slices.SortStableFunc(sorted, func(a, b lbmodel.Member) int {
		if c := lbmodel.CompareMembers(a, b); c != 0 {
			return c
		}
		switch {
		case a.Enabled == b.Enabled:
			return 0
		case !a.Enabled:
			return -1
		}
		return 1
	})
	sorted = slices.CompactFunc(sorted, func(a, b lbmodel.Member) bool {
		return a.IP == b.IP && a.Port == b.Port && a.Enabled == b.Enabled
	})
	out := make([]Member, 0, len(sorted))
	for _, m := range sorted {
		out = append(out, Member{IP: m.IP, Port: m.Port, Enabled: m.Enabled})
	}
	return out
}

func addresses(ms []Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Address())
	}
	return out
}

// diff returns the expected members the provider lacks (or has in another
// enabled state) and the members it has that are not expected.
func diff(expected, actual []Member) (missing, extra []string) {
	have := map[Member]bool{}
	for _, m := range actual {
		have[m] = true
	}
	want := map[Member]bool{}
	for _, m := range expected {
		want[m] = true
		if !have[m] {
			missing = append(missing, describe(m))
		}
	}
	for _, m := range actual {
		if !want[m] {
			extra = append(extra, describe(m))
		}
	}
	return missing, extra
}

func describe(m Member) string {
	s := m.Address()
	if !m.Enabled {
		s += " (disabled)"
	}
	return s
}

func sortPools(ps []Pool) {
	slices.SortFunc(ps, func(a, b Pool) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.Name, b.Name))
	})
}
