package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayv1client "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/typed/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

const (
	// gwRoutes HTTPRoutes, one rule each, attach to the one Gateway of
	// BenchmarkGateway_200Routes.
	gwRoutes = 200
	// gwChanges single-route changes follow each cold sync.
	gwChanges = 10
	gwNS      = "bench-gw"
	gwCluster = "benchgw"
)

// BenchmarkGateway_200Routes runs npl-lbsync (mock provider, gatewayAPI
// enabled) for one Gateway with an HTTP listener and 200 HTTPRoutes, one
// path rule each, to one backend Service. Each iteration starts an
// npl-lbsync (leader election on, as in production) and measures the cold
// sync: from its start to the mock's model of the Gateway holding all 200
// routes' rules. The first start on the new routes writes their 200
// statuses before it applies the Gateway (first-sync-ms); later starts find
// them written (sync-ms, the median; absent with -benchtime 1x, whose one
// start is the first). Then it changes the path of one route at a time, 10
// times, waits for each in the model, and reports the provider writes (the
// mock's write counter) and Ensure calls (npl_lbsync_provider_calls_total)
// per change (writes/change and ensures/change, expected 1).
func BenchmarkGateway_200Routes(b *testing.B) {
	e := useCluster(b, "gateway", cluster.Options{Nodes: 1, NoKubelet: true})
	ctx := context.Background()
	gw1, fresh, err := gatewayFixture(ctx, e)
	if err != nil {
		b.Fatalf("the Gateway fixture: %v", err)
	}
	lbName := lbmodel.GatewayLoadBalancerName(gwCluster, gwNS, "gw")
	// The routes' paths now: an earlier run of the benchmark changed some.
	paths := make([]string, gwRoutes)
	if err := parallel(gwRoutes, 16, func(i int) error {
		r, err := gw1.HTTPRoutes(gwNS).Get(ctx, routeName(i), metav1.GetOptions{})
		if err == nil {
			paths[i] = *r.Spec.Rules[0].Matches[0].Path.Value
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var syncs []time.Duration
	var writes, ensures float64
	changes := 0
	b.ResetTimer()
	for range b.N {
		gwRuns++
		start := time.Now()
		l, err := stack.StartLBSync(ctx, e.c, stack.LBSyncOptions{Name: fmt.Sprintf("npl-lbsync-gw-%02d", gwRuns), Config: fmt.Sprintf(
			"clusterName: %s\nserviceType: NodePortLocal\nloadBalancerClass: npl.io/%s\nvipPool: [\"198.18.170.0/28\"]\nresyncPeriod: %s\n%sgatewayAPI: {enabled: true}\n",
			gwCluster, gwCluster, lbResync, mockProvider), LeaderElect: true}) // returns once the process runs
		if err != nil {
			b.Fatal(err)
		}
		err = pollUntil(2*time.Minute, 10*time.Millisecond, "the 200 routes' rules in the mock", func() (bool, error) {
			return modelHolds(l, lbName, paths)
		})
		if fresh {
			// The first start on the routes writes their 200 statuses.
			gwFirstSync, fresh = time.Since(start), false
		} else {
			syncs = append(syncs, time.Since(start))
		}
		b.StopTimer()
		if err == nil {
			var w, en float64
			w, en, err = routeChanges(ctx, gw1, l, lbName, paths, gwRuns)
			writes, ensures, changes = writes+w, ensures+en, changes+gwChanges
		}
		if serr := l.Stop(); err == nil {
			err = serr
		}
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	if len(syncs) > 0 {
		b.ReportMetric(ms(median(syncs)), "sync-ms")
	}
	b.ReportMetric(ms(gwFirstSync), "first-sync-ms")
	b.ReportMetric(writes/float64(changes), "writes/change")
	b.ReportMetric(ensures/float64(changes), "ensures/change")
	b.ReportMetric(gwRoutes, "routes")
}

// gwRuns counts the npl-lbsync starts of BenchmarkGateway_200Routes in
// this process: the benchmark function runs more than once (b.N 1, then 3).
var gwRuns int

// gwFirstSync is the cold sync of the first npl-lbsync on the routes.
var gwFirstSync time.Duration

// routeName is the name of route i.
func routeName(i int) string { return fmt.Sprintf("r%03d", i) }

// routePath is the path of route i after its c-th change.
func routePath(i, c int) string { return fmt.Sprintf("/r%03d/v%d", i, c) }

// gatewayFixture installs the Gateway API and the chart's grants for it,
// and creates (once per cluster) the GatewayClass, the Gateway, the backend
// Service and the 200 HTTPRoutes; fresh is whether it created them now.
func gatewayFixture(ctx context.Context, e *env) (gw1 gatewayv1client.GatewayV1Interface, fresh bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := e.c.InstallGatewayAPI(ctx); err != nil {
		return nil, false, err
	}
	if err := stack.GrantChartValues(ctx, e.c, map[string]any{"gatewayAPI.enabled": true}); err != nil {
		return nil, false, err
	}
	cfg := e.c.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 10000
	gc, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		return nil, false, err
	}
	gw1 = gc.GatewayV1()
	if _, err := gw1.GatewayClasses().Get(ctx, gwCluster, metav1.GetOptions{}); err == nil {
		return gw1, false, nil // built already
	}
	if _, err := e.c.CreateNamespace(ctx, gwNS); err != nil {
		return nil, false, err
	}
	if _, err := gw1.GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: gwCluster},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}, metav1.CreateOptions{}); err != nil {
		return nil, false, err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := e.client.CoreV1().Services(gwNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, false, err
	}
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gwCluster,
		Listeners:        []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
	if _, err := gw1.Gateways(gwNS).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return nil, false, err
	}
	return gw1, true, parallel(gwRoutes, 16, func(i int) error {
		_, err := gw1.HTTPRoutes(gwNS).Create(ctx, httpRoute(i, routePath(i, 0)), metav1.CreateOptions{})
		return err
	})
}

// httpRoute is route i of the fixture: one exact path to Service web.
func httpRoute(i int, path string) *gatewayv1.HTTPRoute {
	exact := gatewayv1.PathMatchExact
	port := gatewayv1.PortNumber(80)
	return &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: gwNS, Name: routeName(i)},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules: []gatewayv1.HTTPRouteRule{{
				Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: &path}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
					BackendObjectReference: gatewayv1.BackendObjectReference{Name: "web", Port: &port}}}},
			}},
		}}
}

// modelHolds reports whether the mock's model of the Gateway has a rule
// for every path (and no other rule of the fixture's routes).
func modelHolds(l *stack.LBSync, lbName string, paths []string) (bool, error) {
	st, err := l.MockState()
	if err != nil {
		return false, err
	}
	lb, ok := stack.FindLoadBalancer(st, lbName)
	if !ok || lb.HTTP == nil {
		return false, nil
	}
	have := map[string]bool{}
	for _, r := range lb.HTTP.Rules {
		if strings.HasPrefix(r.Path, "/r") {
			have[r.Path] = true
		}
	}
	if len(have) != len(paths) {
		return false, nil
	}
	for _, p := range paths {
		if !have[p] {
			return false, nil
		}
	}
	return true, nil
}

// routeChanges changes the path of one route at a time, gwChanges times,
// waits until the model holds each, and returns the mock's writes and the
// Ensure calls they caused.
func routeChanges(ctx context.Context, gw1 gatewayv1client.GatewayV1Interface, l *stack.LBSync, lbName string, paths []string, iteration int) (writes, ensures float64, err error) {
	ensureCalls := func() (float64, error) { return l.Metric("npl_lbsync_provider_calls_total", `verb="ensure"`) }
	st0, err := l.MockState()
	if err != nil {
		return 0, 0, err
	}
	e0, err := ensureCalls()
	if err != nil {
		return 0, 0, err
	}
	for k := range gwChanges {
		i := (iteration*gwChanges + k*7) % gwRoutes // distinct within a run
		r, err := gw1.HTTPRoutes(gwNS).Get(ctx, routeName(i), metav1.GetOptions{})
		if err != nil {
			return 0, 0, err
		}
		c := iteration*gwChanges + k + 1
		paths[i] = routePath(i, c)
		r.Spec.Rules[0].Matches[0].Path.Value = &paths[i]
		if _, err := gw1.HTTPRoutes(gwNS).Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			return 0, 0, err
		}
		if err := pollUntil(time.Minute, 10*time.Millisecond, "the changed path "+paths[i]+" in the mock", func() (bool, error) {
			return modelHolds(l, lbName, paths)
		}); err != nil {
			return 0, 0, err
		}
	}
	time.Sleep(time.Second) // a second write for one change would come now
	st1, err := l.MockState()
	if err != nil {
		return 0, 0, err
	}
	e1, err := ensureCalls()
	if err != nil {
		return 0, 0, err
	}
	return float64(st1.Counters.Writes - st0.Counters.Writes), e1 - e0, nil
}
