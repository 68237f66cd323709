package gateway

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inputs"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestLBSync_gatewayAPIWithoutCRDs: gatewayAPI enabled on a cluster without
// the Gateway API CRDs: npl-lbsync says so in one log line, becomes ready
// and serves LoadBalancer Services as usual; once the CRDs are installed it
// serves Gateways without a restart. It is the package's first test in
// source order (api_test.go sorts first), so it runs on the shared cluster
// before the other Gateway tests install the CRDs (a process holds one
// cluster).
func TestLBSync_gatewayAPIWithoutCRDs(t *testing.T) {
	e := setup(t)
	if served, _, err := inputs.GatewayAPIServed(e.Client.Discovery()); err != nil || served {
		t.Fatalf("the Gateway API CRDs are already served (err %v): this test must run before TestLBSync_gatewayAPI installs them", err)
	}
	ctx := lbsyncbed.Context(t, 4*time.Minute)
	if err := stack.GrantChartValues(ctx, e.Cluster, map[string]any{"gatewayAPI.enabled": true}); err != nil {
		t.Fatal(err)
	}
	name := lbsyncbed.ClusterName + "-nocrd"
	l := e.StartSyncer(t, "npl-lbsync-nocrd", name, e.Config(name, "NodePortLocal", "npl.io/nocrd", "198.18.111.0/28")+"gatewayAPI:\n  enabled: true\n", false)
	log, err := os.ReadFile(l.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	const line = "gatewayAPI.enabled is set but the Gateway API CRDs are not installed"
	if n := strings.Count(string(log), line); n != 1 {
		t.Errorf("the log says %d times %q, want once:\n%s", n, line, l.Tail(20))
	}
	ns := e.Namespace(t)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", ptr.To("npl.io/nocrd")))
	lbsyncbed.WaitPools(t, l, ns, "web", map[string][]lbmodel.Member{l.PoolName(ns, "web", lbmodel.TCP, 80): {lbsyncbed.Member(e.NodeIP(0), 61000, true)}})

	// The CRDs installed: the same npl-lbsync, not restarted, serves a
	// Gateway.
	if err := e.Cluster.InstallGatewayAPI(ctx); err != nil {
		t.Fatalf("install the Gateway API CRDs: %v", err)
	}
	gc, err := gatewayclient.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	gw1 := gc.GatewayV1()
	className := "npl-late-" + ns
	if _, err := gw1.GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw1.GatewayClasses().Delete(context.Background(), className, metav1.DeleteOptions{}) })
	if _, err := gw1.Gateways(ns).Create(ctx, &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(className),
			Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, time.Minute, "the Gateway programmed after the CRDs were installed", func() (bool, error) {
		g, err := gw1.Gateways(ns).Get(ctx, "late", metav1.GetOptions{})
		return err == nil && hasCond(g.Status.Conditions, "Programmed", metav1.ConditionTrue, "Programmed") && len(g.Status.Addresses) == 1, err
	})
	if log, err = os.ReadFile(l.LogPath); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "Gateway API CRDs installed: serving Gateways") {
		t.Errorf("the log does not say the Gateway API is served:\n%s", l.Tail(20))
	}
}
