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
