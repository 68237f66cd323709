package haproxy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// BenchmarkGateway_routeChangeToFirstRequest measures, end to end on the
// local cluster (npl-agent, npl-lbsync with gatewayAPI enabled, npl-edge
// and HAProxy), how long a new or changed HTTPRoute takes to serve: one
// Gateway with an HTTP listener has its VIP on HAProxy; each iteration
// creates 30 HTTPRoutes one after the other, each with a new exact path to
// the web Service, then changes each route's path in turn, and times from
// the create (or the update) to the first request for the new path, sent
// every 5 ms from the client namespace, that a web Pod answers (at most
// 30 s each). Reported as p50 and p99 in ms, of the creates (p50-ms,
// p99-ms) and of the changes (change-p50-ms, change-p99-ms).
func BenchmarkGateway_routeChangeToFirstRequest(b *testing.B) {
	const routes, lbsync = 30, "bench-gw"
	c, bed := clusterBed(b)
	ctx := context.Background()
	if err := c.InstallGatewayAPI(ctx); err != nil {
		b.Fatal(err)
	}
	if err := stack.GrantChartValues(ctx, c, map[string]any{"gatewayAPI.enabled": true}); err != nil {
		b.Fatal(err)
	}
	extraConfig = "gatewayAPI: {enabled: true}\n"
	startLBSync(b, c, bed, lbsync)
	extraConfig = ""
	client := c.Client()
	gc, err := gatewayclient.NewForConfig(c.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	gw1 := gc.GatewayV1()
	ns := c.TestNamespace(b)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, webDeployment(ns, "web", 2), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}}}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	className := "npl-" + ns
	if _, err := gw1.GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw1.GatewayClasses().Delete(context.Background(), className, metav1.DeleteOptions{}) })
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(className),
		Listeners:        []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw1.Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var vip string
	waitForCond(b, 90*time.Second, "the Gateway's VIP", func() (bool, error) {
		g, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
		if err != nil || len(g.Status.Addresses) == 0 {
			return false, err
		}
		vip = g.Status.Addresses[0].Value
		return true, nil
	})
	hc := bed.ClientHTTP(time.Second)
	created := 0
	// newRoute creates the next HTTPRoute and returns its path.
	newRoute := func() string {
		exact := gatewayv1.PathMatchExact
		port := gatewayv1.PortNumber(80)
		path := fmt.Sprintf("/route-%03d", created)
		r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("r%03d", created)},
			Spec: gatewayv1.HTTPRouteSpec{
				CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
				Rules: []gatewayv1.HTTPRouteRule{{
					Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: &path}}},
					BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
						BackendObjectReference: gatewayv1.BackendObjectReference{Name: "web", Port: &port}}}},
				}},
			}}
		created++
		if _, err := gw1.HTTPRoutes(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		return path
	}
	// firstRequest waits until a web Pod answers a request for path and
	// returns when.
	firstRequest := func(path string) time.Time {
		deadline := time.Now().Add(30 * time.Second)
		var last error
		for time.Now().Before(deadline) {
			body, err := edgebed.Get(ctx, hc, edgebed.URL(vip, 80)+strings.TrimPrefix(path, "/"))
			now := time.Now()
			if err == nil && strings.HasPrefix(strings.TrimSpace(body), "web-") {
				return now
			}
			last = err
			time.Sleep(5 * time.Millisecond)
		}
		b.Fatalf("no web Pod answered %s through the VIP %s within 30s (last: %v)", path, vip, last)
		return time.Time{}
	}
	// changeRoute gives route name a new exact path and returns it.
	changeRoute := func(name string) string {
		r, err := gw1.HTTPRoutes(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		path := *r.Spec.Rules[0].Matches[0].Path.Value + "-v2"
		r.Spec.Rules[0].Matches[0].Path.Value = &path
		if _, err := gw1.HTTPRoutes(ns).Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		return path
	}
	// The first route also waits for the Pods: it is not measured.
	firstRequest(newRoute())
	var lat, changed []time.Duration
	b.ResetTimer()
	for range b.N {
		first := created
		for range routes {
			start := time.Now()
			path := newRoute()
			lat = append(lat, firstRequest(path).Sub(start))
		}
		for i := first; i < created; i++ {
			start := time.Now()
			path := changeRoute(fmt.Sprintf("r%03d", i))
			changed = append(changed, firstRequest(path).Sub(start))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(changed)
	b.ReportMetric(edgebed.Percentile(lat, 50), "p50-ms")
	b.ReportMetric(edgebed.Percentile(lat, 99), "p99-ms")
	b.ReportMetric(edgebed.Percentile(changed, 50), "change-p50-ms")
	b.ReportMetric(edgebed.Percentile(changed, 99), "change-p99-ms")
	b.ReportMetric(float64(len(lat)), "routes")
}
