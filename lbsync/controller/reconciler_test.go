package controller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
)

// A failed sync is queued again with backoff and counted; a sync that is
// done, or refused until its objects change, resets the key's backoff.
// Failing to write why a model was refused is a failure.
func TestProcessNext_retriesFailedSyncsOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := New(Settings{ClusterName: "c1"}, fake.NewClientset(), failing{}, NewMetrics(reg))
	results := map[queueKey]syncResult{
		serviceKey("ns", "done"):            synced(),
		serviceKey("ns", "invalid"):         refused(nil),
		serviceKey("ns", "unreachable"):     retryOn(errors.New("dial tcp: connection refused")),
		serviceKey("ns", "condition-write"): refused(errors.New("patch service ns/condition-write: conflict")),
	}
	wantRequeues := map[queueKey]int{
		serviceKey("ns", "unreachable"):     2,
		serviceKey("ns", "condition-write"): 2,
	}
	c.byKind[kindService] = scripted(results)
	for key := range results {
		c.queue.AddRateLimited(key) // an earlier failure: a backoff to reset or extend
	}
	for range results {
		c.processNext(context.Background())
	}
	for key := range results {
		if got := c.queue.NumRequeues(key); got != wantRequeues[key] {
			t.Errorf("%s: %d requeue(s), want %d", key, got, wantRequeues[key])
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var failures float64
	reconciles := map[string]uint64{} // by result
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "npl_lbsync_sync_failures_total":
				failures += m.GetCounter().GetValue()
			case "npl_lbsync_reconcile_duration_seconds":
				reconciles[m.GetLabel()[0].GetValue()] += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if failures != 2 {
		t.Errorf("%v sync failure(s) counted, want 2", failures)
	}
	if want := map[string]uint64{"success": 2, "error": 2}; !maps.Equal(reconciles, want) {
		t.Errorf("reconciles timed by result %v, want %v", reconciles, want)
	}
}

// scripted is a reconciler whose syncs end as its map says.
type scripted map[queueKey]syncResult

func (scripted) kinds() []kind                                     { return []kind{kindService} }
func (s scripted) sync(_ context.Context, key queueKey) syncResult { return s[key] }
func (scripted) keys() []queueKey                                  { return nil }
func (scripted) claimed(map[string]bool)                           {}

func TestQueueKey_String(t *testing.T) {
	for key, want := range map[queueKey]string{
		serviceKey("shop", "web"): "service shop/web",
		ingressKey("shop", "web"): "ingress shop/web",
		sharedIngressKey:          "shared ingress load balancer",
		gatewayKey("shop", "gw"):  "gateway shop/gw",
		gatewayClassKey("npl"):    "gatewayclass npl",
	} {
		if got := key.String(); got != want {
			t.Errorf("%#v: %q, want %q", key, got, want)
		}
	}
}

// Every kind of key has its reconciler, which syncs it: none would crash
// the worker that took the key.
func TestNew_everyKindHasAReconciler(t *testing.T) {
	c := New(Settings{ClusterName: "c1"}, fake.NewClientset(), failing{}, NewMetrics(prometheus.NewRegistry()))
	for k := range kindNames {
		r := c.byKind[kind(k)]
		if r == nil || !slices.Contains(r.kinds(), kind(k)) {
			t.Errorf("kind %s: reconciler %T", kindNames[k], r)
		}
	}
}
