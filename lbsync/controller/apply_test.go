package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/providers"
)

// failing is a provider whose every Ensure fails with err.
type failing struct{ err error }

func (p failing) Ensure(context.Context, *lbmodel.LoadBalancer) (providers.Status, error) {
	return providers.Status{}, p.err
}
func (failing) Delete(context.Context, string, lbmodel.Kind) error { return nil }
func (failing) List(context.Context) ([]lbmodel.LoadBalancer, error) {
	return nil, nil
}

// A Gateway whose model the provider did not apply is Programmed False:
// Pending when the provider failed (unreachable, an error of its API: the
// retry may program it), Invalid when the model is at fault (refused as
// unsupported, or breaking the rules), with the message.
func TestApplyGateway_pendingUnlessTheModelIsAtFault(t *testing.T) {
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw"}}
	served := func() *lbmodel.LoadBalancer {
		return &lbmodel.LoadBalancer{Name: "c1--shop-gw-GW", Kind: lbmodel.L7, Gateway: "shop/gw",
			Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}}, HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}}}
	}
	nothing := served()
	nothing.Listeners = nil
	unsupported := lbmodel.UnsupportedRule(lbmodel.Rule{Path: "/q", PathType: lbmodel.PathPrefix}, "query")
	tests := []struct {
		name        string
		err         error
		lb          *lbmodel.LoadBalancer
		reason, msg string
	}{
		{"unreachable", errors.New("dial tcp 198.18.0.1:443: connect: connection refused"), served(),
			"Pending", "dial tcp 198.18.0.1:443: connect: connection refused"},
		{"an error of the API", errors.New("ensure c1--shop-gw-GW: Avi: 503 Service Unavailable"), served(),
			"Pending", "503 Service Unavailable"},
		{"refused as unsupported", fmt.Errorf("ensure c1--shop-gw-GW: Avi: %w", unsupported), served(),
			"Invalid", "query is not supported by this provider"},
		{"breaking the rules", nil, nothing, "Invalid", "no port can be served"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Settings{ClusterName: "c1"}, fake.NewClientset(), failing{tt.err}, NewMetrics(prometheus.NewRegistry()))
			prog, _ := c.gateways.apply(context.Background(), gatewayKey("shop", "gw"), gw, gateway.Result{LB: tt.lb})
			if prog.OK || prog.Reason != tt.reason || !strings.Contains(prog.Message, tt.msg) {
				t.Errorf("Programmed %+v, want reason %s with %q", prog, tt.reason, tt.msg)
			}
		})
	}
}

// listed is a provider that lists lbs and records the deletes.
type listed struct {
	failing
	lbs     []lbmodel.LoadBalancer
	deleted []string
}

func (p *listed) List(context.Context) ([]lbmodel.LoadBalancer, error) { return p.lbs, nil }
func (p *listed) Delete(_ context.Context, name string, _ lbmodel.Kind) error {
	p.deleted = append(p.deleted, name)
	return nil
}

// A load balancer under the name npl-lbsync 0.x gave it is not garbage
// while the owner it records claims its new name (the owner's Ensure
// takes it over, VIP and all); once that owner is gone, it is garbage, even
// when another Service whose old name was the same claims its own.
func TestCollectGarbage_keepsAnOldNameItsOwnerTakesOver(t *testing.T) {
	p := &listed{lbs: []lbmodel.LoadBalancer{
		{Name: "c1--team-a-x", Service: "team-a/x"},
		{Name: "c1--gone-web", Service: "gone/web"},
		{Name: "c1--shop-gw-GW", Kind: lbmodel.L7, Gateway: "shop/gw"},
	}}
	c := New(Settings{ClusterName: "c1"}, fake.NewClientset(), p, NewMetrics(prometheus.NewRegistry()))
	c.applier.collectGarbage(context.Background(), func() map[string]bool {
		return map[string]bool{"c1--team-a_x": true, "c1--team_a-x": true, "c1--shop_gw-GW": true}
	})
	if want := []string{"c1--gone-web"}; fmt.Sprint(p.deleted) != fmt.Sprint(want) {
		t.Errorf("deleted %v, want %v", p.deleted, want)
	}
	p.deleted = nil
	c.applier.collectGarbage(context.Background(), func() map[string]bool { return map[string]bool{"c1--team_a-x": true} })
	if want := []string{"c1--team-a-x", "c1--gone-web", "c1--shop-gw-GW"}; fmt.Sprint(p.deleted) != fmt.Sprint(want) {
		t.Errorf("with the owners gone, deleted %v, want %v", p.deleted, want)
	}
}
