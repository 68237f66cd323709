package gateway

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayv1client "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/typed/apis/v1"

	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// gatewayBed is an npl-lbsync serving Gateway API on one provider's
// backend, with a GatewayClass of npl's in a namespace of its own, and two
// Services of that namespace, a and b (port 80, named target port http),
// each with one Pod: a-1 on node 0 at 61000, b-1 on node 1 at 61001.
type gatewayBed struct {
	ctx     context.Context
	backend stack.Backend
	l       *lbsyncbed.Syncer
	// name is the syncer's cluster name, cfg its configuration (to start
	// another npl-lbsync like it).
	name, cfg string
	gw1       gatewayv1client.GatewayV1Interface
	ns, class string
}

// startGatewayBed starts a gatewayBed on provider (as stack.StartBackend
// names it) whose class, syncer and configuration are named after short,
// with VIPs from vips (each test its own range).
func (e *env) startGatewayBed(t *testing.T, provider, short, vips string) *gatewayBed {
	t.Helper()
	return e.startGatewayBedWith(t, provider, short, vips, "")
}

// startGatewayBedWith is startGatewayBed with extra lines appended to the
// backend's provider section (indented as its own settings: "    key: v").
func (e *env) startGatewayBedWith(t *testing.T, provider, short, vips, providerExtra string) *gatewayBed {
	t.Helper()
	ctx := lbsyncbed.Context(t, 4*time.Minute)
	if err := e.Cluster.InstallGatewayAPI(ctx); err != nil {
		t.Fatalf("install the Gateway API CRDs: %v", err)
	}
	if err := stack.GrantChartValues(ctx, e.Cluster, map[string]any{"gatewayAPI.enabled": true, "gatewayAPI.readTLSSecrets": true}); err != nil {
		t.Fatal(err)
	}
	backend, err := stack.StartBackend(provider, t.TempDir(), netip.MustParsePrefix(vips))
	if err != nil {
		t.Fatal(err)
	}
	stack.CloseAtEnd(t, backend)
	b := &gatewayBed{ctx: ctx, backend: backend, name: lbsyncbed.ClusterName + "-" + short}
	b.cfg = lbsyncbed.ConfigWith(b.name, "NodePortLocal", "npl.io/"+short, vips, backend.ProviderConfig()+providerExtra) + "gatewayAPI:\n  enabled: true\n"
	b.l = e.StartSyncer(t, "npl-lbsync-"+short, b.name, b.cfg, false)
	gc, err := gatewayclient.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	b.gw1 = gc.GatewayV1()
	b.ns = e.Namespace(t)
	b.class = "npl-" + short + "-" + b.ns
	if _, err := b.gw1.GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: b.class},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.gw1.GatewayClasses().Delete(context.Background(), b.class, metav1.DeleteOptions{}) })
	for i, app := range []string{"a", "b"} {
		e.Pod(t, b.ns, app+"-1", e.NodeName(i), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(i), 61000+i, "tcp")), func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": app}
		})
		e.CreateService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: app}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		}})
	}
	return b
}
