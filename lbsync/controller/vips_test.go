package controller

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/providers"
)

// counting is a provider that serves every model on its requested VIP and
// counts its Ensure calls.
type counting struct{ ensures *int }

func (p counting) Ensure(_ context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
	*p.ensures++
	return providers.Status{VIPs: []string{lb.RequestedVIP}}, nil
}
func (counting) Delete(context.Context, string, lbmodel.Kind) error   { return nil }
func (counting) List(context.Context) ([]lbmodel.LoadBalancer, error) { return nil, nil }

func l4(name, vip string, listeners ...lbmodel.Listener) *lbmodel.LoadBalancer {
	lb := &lbmodel.LoadBalancer{Name: name, Service: "ns/x", RequestedVIP: vip}
	for _, l := range listeners {
		l.Pool.Name = lbmodel.PoolName(name, l.Protocol, l.Port)
		lb.Listeners = append(lb.Listeners, l)
	}
	return lb
}

var (
	tcp80 = lbmodel.Listener{Port: 80, Protocol: lbmodel.TCP}
	udp80 = lbmodel.Listener{Port: 80, Protocol: lbmodel.UDP}
	tcp81 = lbmodel.Listener{Port: 81, Protocol: lbmodel.TCP}
)

// TestVIPGuard: a requested VIP lies in the ranges allowed and is not
// served on one of the model's ports for another load balancer, applied
// or being applied; the VIP of one that is deleted is free again.
func TestVIPGuard(t *testing.T) {
	g := newVIPGuard([]netip.Prefix{netip.MustParsePrefix("198.18.100.0/28")})
	victim, attacker := serviceKey("a", "shop"), serviceKey("b", "evil")
	if f := g.claim(victim, l4("c1--a-shop", "198.18.100.5", tcp80)); f != nil {
		t.Fatalf("an allowed, free VIP: %+v", f)
	}
	g.applied(victim, []string{"198.18.100.5"}, l4("c1--a-shop", "198.18.100.5", tcp80))
	for _, c := range []struct {
		name, vip string
		ls        []lbmodel.Listener
		reason    string
		msg       string
	}{
		{"outside the ranges", "198.18.200.1", []lbmodel.Listener{tcp80}, reasonVIPNotAllowed, "not in the ranges the operator allows [198.18.100.0/28]"},
		{"the same VIP and port", "198.18.100.5", []lbmodel.Listener{tcp81, tcp80}, reasonVIPInUse, "198.18.100.5 is already served on TCP/80"},
		{"IPv4-mapped", "::ffff:198.18.100.5", []lbmodel.Listener{tcp80}, reasonVIPInUse, "already served on TCP/80"},
		{"another port of the VIP", "198.18.100.5", []lbmodel.Listener{tcp81}, "", ""},
		{"the number on UDP", "198.18.100.5", []lbmodel.Listener{udp80}, "", ""},
		{"no VIP requested", "", []lbmodel.Listener{tcp80}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := g.claim(attacker, l4("c1--b-evil", c.vip, c.ls...))
			g.release(attacker)
			if c.reason == "" {
				if f != nil {
					t.Errorf("refused: %+v", f)
				}
				return
			}
			if f == nil || f.reason != c.reason || !f.refused || !strings.Contains(f.message, c.msg) {
				t.Errorf("failure %+v, want %s saying %q", f, c.reason, c.msg)
			}
		})
	}
	if f := g.claim(victim, l4("c1--a-shop", "198.18.100.5", tcp80, tcp81)); f != nil {
		t.Errorf("the load balancer that serves the VIP, again: %+v", f)
	}
	// A model being applied holds its VIP too.
	other := serviceKey("c", "web")
	if f := g.claim(other, l4("c1--c-web", "198.18.100.6", tcp80)); f != nil {
		t.Fatal(f)
	}
	if f := g.claim(attacker, l4("c1--b-evil", "198.18.100.6", tcp80)); f == nil || f.reason != reasonVIPInUse {
		t.Errorf("a VIP being applied for another: %+v, want VIPInUse", f)
	}
	g.forget(victim)
	if f := g.claim(attacker, l4("c1--b-evil", "198.18.100.5", tcp80)); f != nil {
		t.Errorf("the VIP of a deleted load balancer: %+v", f)
	}
	if f := newVIPGuard(nil).claim(attacker, l4("c1--b-evil", "198.18.100.5", tcp80)); f == nil ||
		!strings.Contains(f.message, "no range allows requested VIPs") {
		t.Errorf("no range configured: %+v", f)
	}
}

// TestApply_aVIPItMayNotHaveReachesNoProvider: a Service that requests a
// VIP outside the ranges, or one another Service serves on its port, gets
// its condition False with the reason and a Warning Event; the provider is
// not called (its load balancer stays as it was), and the key is not
// retried. A Gateway reads Programmed False AddressNotUsable.
func TestApply_aVIPItMayNotHaveReachesNoProvider(t *testing.T) {
	ensures := 0
	c := New(Settings{ClusterName: "c1", AllowedVIPs: []netip.Prefix{netip.MustParsePrefix("198.18.100.0/28")}},
		fake.NewClientset(), counting{&ensures}, NewMetrics(prometheus.NewRegistry()))
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "evil"}}
	apply := func(key queueKey, lb *lbmodel.LoadBalancer) (failure, syncResult) {
		var got failure
		_, res := c.applier.apply(context.Background(), model{key: key, lb: lb, objects: []runtime.Object{svc},
			setStatus: func(context.Context, providers.Status) error { return nil },
			setFailed: func(_ context.Context, f failure) error { got = f; return nil }})
		return got, res
	}
	if _, res := apply(serviceKey("a", "shop"), l4("c1--a-shop", "198.18.100.5", tcp80)); res.state != syncDone || ensures != 1 {
		t.Fatalf("the victim: %+v, %d Ensure calls", res, ensures)
	}
	for _, c := range []struct{ vip, reason string }{{"198.18.200.1", reasonVIPNotAllowed}, {"198.18.100.5", reasonVIPInUse}} {
		f, res := apply(serviceKey("b", "evil"), l4("c1--b-evil", c.vip, tcp80))
		if res.state != syncNoRetry || f.reason != c.reason || ensures != 1 {
			t.Errorf("VIP %s: %+v, failure %+v, %d Ensure calls; want no retry, %s, no call", c.vip, res, f, ensures, c.reason)
		}
	}
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "gw"}}
	lb := &lbmodel.LoadBalancer{Name: "c1--b-gw-GW", Kind: lbmodel.L7, Gateway: "b/gw", RequestedVIP: "198.18.100.5",
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}}, HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}}
	prog, _ := c.gateways.apply(context.Background(), gatewayKey("b", "gw"), gw, gateway.Result{LB: lb})
	if prog.OK || prog.Reason != string(gatewayv1.GatewayReasonAddressNotUsable) || !strings.Contains(prog.Message, "already served on TCP/80") {
		t.Errorf("Gateway Programmed %+v, want AddressNotUsable", prog)
	}
}
