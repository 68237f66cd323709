// Package inspect compares the load balancer pools the cluster expects,
// computed with the same builder npl-lbsync uses, with the pools a provider
// reports. nplctl prints the result; tests assert on it.
package inspect

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
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

// Settings say which Services are ours and how their pools are built.
type Settings struct {
	ClusterName string
	ServiceType string
	Family      string
	Claim       claim.ClaimConfig
}

// Expected builds the load balancers the cluster expects, for the Services
// of namespace (all when empty) that are ours.
func Expected(ctx context.Context, client kubernetes.Interface, namespace string, s Settings) ([]*providers.LoadBalancer, error) {
	svcs, err := client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var nodes []*corev1.Node
	if s.ServiceType == builder.ServiceTypeNodePort {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		for i := range list.Items {
			nodes = append(nodes, &list.Items[i])
		}
	}
	byNS := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		byNS[p.Namespace] = append(byNS[p.Namespace], p)
	}
	var out []*providers.LoadBalancer
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if !claim.Ours(svc, s.Claim) || svc.DeletionTimestamp != nil {
			continue
		}
		lb, _ := builder.Build(builder.Input{
			ClusterName: s.ClusterName, ServiceType: s.ServiceType, Family: s.Family,
			Service: svc, Pods: byNS[svc.Namespace], Nodes: nodes,
		})
		if lb != nil {
			out = append(out, lb)
		}
	}
	return out, nil
}

// Compare lays each expected pool beside the provider's pool of the same
// name: in-sync when the members (address, port, enabled) are equal, drift
// when they differ, missing when the provider has no such pool.
func Compare(expected []*providers.LoadBalancer, actual []providers.LoadBalancer) Report {
	pools := map[string]providers.Pool{}
	vips := map[string][]string{}
	for _, lb := range actual {
		vips[lb.Name] = lb.VIPs
		for _, l := range lb.Listeners {
			pools[l.Pool.Name] = l.Pool
		}
	}
	var r Report
	for _, lb := range expected {
		for _, l := range lb.Listeners {
			p := Pool{
				Service: lb.Service, Name: l.Pool.Name, Protocol: string(l.Protocol), Port: l.Port,
				VIPs: vips[lb.Name], Expected: members(l.Pool.Members), Actual: []Member{},
			}
			got, ok := pools[l.Pool.Name]
			switch {
			case !ok:
				p.State = StateMissing
				p.Missing = addresses(p.Expected)
			default:
				p.Actual = members(got.Members)
				p.Missing, p.Extra = diff(p.Expected, p.Actual)
				p.State = StateInSync
				if len(p.Missing) > 0 || len(p.Extra) > 0 {
					p.State = StateDrift
				}
			}
			r.Pools = append(r.Pools, p)
		}
	}
	sortPools(r.Pools)
	return r
}

// FromStatus reports the expected pools with the state npl-lbsync recorded
// in each Service's npl.io/LoadBalancerSynced condition, when no provider
// can be asked: True is in-sync, False is drift, no condition is missing.
func FromStatus(ctx context.Context, client kubernetes.Interface, expected []*providers.LoadBalancer) (Report, error) {
	var r Report
	for _, lb := range expected {
		ns, name, _ := cutService(lb.Service)
		svc, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return r, fmt.Errorf("get service %s: %w", lb.Service, err)
		}
		var vips []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			vips = append(vips, cmp.Or(in.IP, in.Hostname))
		}
		state, reason := StateMissing, "no "+claim.SyncedConditionType+" condition"
		for _, c := range svc.Status.Conditions {
			if c.Type != claim.SyncedConditionType {
				continue
			}
			state, reason = StateDrift, c.Reason+": "+c.Message
			if c.Status == metav1.ConditionTrue {
				state = StateInSync
			}
		}
		for _, l := range lb.Listeners {
			r.Pools = append(r.Pools, Pool{
				Service: lb.Service, Name: l.Pool.Name, Protocol: string(l.Protocol), Port: l.Port, VIPs: vips,
				Expected: members(l.Pool.Members), Actual: []Member{}, State: state, Reason: reason,
			})
		}
	}
	sortPools(r.Pools)
	return r, nil
}

func cutService(s string) (ns, name string, ok bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

func members(ms []providers.Member) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range providers.SortMembers(slices.Clone(ms)) {
		out = append(out, Member{IP: m.IP, Port: m.Port, Enabled: m.Enabled})
	}
	return out
}

func addresses(ms []Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s:%d", m.IP, m.Port))
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
	s := fmt.Sprintf("%s:%d", m.IP, m.Port)
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
