package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/providers/mock"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

const (
	// policyCount policies, each of its own Service of the main set;
	// policyChangesPerOp changes at policyChangeRate per second make one
	// iteration of BenchmarkLBSyncPolicyChange.
	policyCount        = 100
	policyChangesPerOp = 50
	policyChangeRate   = 10
)

// policySet is the LoadBalancerPolicies of BenchmarkLBSyncPolicyChange:
// policy i targets Service i of the main set with a slow start.
type policySet struct {
	client    dynamic.NamespaceableResourceInterface
	set       *serviceSet
	slowStart []int32 // each policy's current slowStartSeconds
	cursor    int
}

func (p *policySet) name(i int) string { return fmt.Sprintf("policy-%04d", i) }

// policySetOf creates the policies once and waits until the mock holds
// them all.
func (f *lbFixture) policySetOf(b *testing.B, l *stack.LBSync) *policySet {
	b.Helper()
	if f.policies != nil {
		return f.policies
	}
	dyn, err := dynamic.NewForConfig(f.e.c.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	p := &policySet{client: dyn.Resource(v1alpha1.Resource), set: f.main, slowStart: make([]int32, policyCount)}
	ctx := context.Background()
	if err := parallel(policyCount, 16, func(i int) error {
		p.slowStart[i] = 10
		obj := &v1alpha1.LoadBalancerPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind},
			ObjectMeta: metav1.ObjectMeta{Namespace: f.main.ns, Name: p.name(i)},
			Spec: v1alpha1.LoadBalancerPolicySpec{
				TargetRefs:    []v1alpha1.LocalPolicyTargetReference{{Kind: v1alpha1.KindService, Name: f.main.serviceName(i)}},
				TrafficPolicy: v1alpha1.TrafficPolicy{SlowStartSeconds: &p.slowStart[i]},
			},
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		_, err = p.client.Namespace(f.main.ns).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("create the policies: %v", err)
	}
	if err := pollUntil(time.Minute, 250*time.Millisecond, "every policy applied", func() (bool, error) {
		st, err := l.MockState()
		return err == nil && p.appliedIn(st, nil) == nil, err
	}); err != nil {
		b.Fatal(err)
	}
	f.policies = p
	return p
}

// appliedIn checks that the load balancers of the policies of changes (all
// when nil) hold their current slow start in a mock state.
func (p *policySet) appliedIn(st mock.State, changes []change) error {
	svcs := make([]int, 0, policyCount)
	for _, c := range changes {
		svcs = append(svcs, c.svc)
	}
	if changes == nil {
		for i := range policyCount {
			svcs = append(svcs, i)
		}
	}
	for _, i := range svcs {
		lb, ok := stack.FindLoadBalancer(st, p.set.lbName(i))
		if !ok || len(lb.Listeners) != 1 {
			return fmt.Errorf("load balancer %s missing from the mock", p.set.lbName(i))
		}
		if pol := lb.Listeners[0].Pool.Policy; pol == nil || pol.SlowStartSeconds != p.slowStart[i] {
			return fmt.Errorf("load balancer %s: policy %+v, want slowStartSeconds %d", p.set.lbName(i), pol, p.slowStart[i])
		}
	}
	return nil
}

// changeBatch changes the slow start of n policies (round robin, so that
// two changes of one load balancer are far apart) at rate per second.
func (p *policySet) changeBatch(ctx context.Context, n, rate int) ([]change, error) {
	ticker := time.NewTicker(time.Second / time.Duration(rate))
	defer ticker.Stop()
	var out []change
	for k := range n {
		if k > 0 {
			<-ticker.C
		}
		i := p.cursor % policyCount
		p.cursor++
		p.slowStart[i] = 10 + (p.slowStart[i]-9)%20 // 10..29, never the same twice in a row
		patch := fmt.Appendf(nil, `{"spec":{"slowStartSeconds":%d}}`, p.slowStart[i])
		c := change{svc: i, lb: p.set.lbName(i), at: time.Now()}
		if _, err := p.client.Namespace(p.set.ns).Patch(ctx, p.name(i), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return out, err
		}
		out = append(out, c)
	}
	return out, nil
}

// writesTo counts the writes read to the load balancers of changes since
// the first of them.
func (w *writeLog) writesTo(changes []change) int {
	if len(changes) == 0 {
		return 0
	}
	lbs := map[string]bool{}
	for _, c := range changes {
		lbs[c.lb] = true
	}
	from := changes[0].at.Truncate(time.Microsecond)
	n := 0
	for lb := range lbs {
		for _, t := range w.writes[lb] {
			if !t.Before(from) {
				n++
			}
		}
	}
	return n
}

// BenchmarkLBSyncPolicyChange measures the latency from a LoadBalancerPolicy
// write (its slow start changed) to the mock provider call that applies it
// (from npl-lbsync's -v=2 log), at 10 changes per second, 50 per iteration,
// each of a policy of its own Service among the 1000 the mock holds; and
// the provider writes per change (writes/change, target 1: the one load
// balancer of the changed pool; all-writes/change counts the mock's every
// write meanwhile). The 100 policies are created once,
// untimed. load1 is the machine's load average at the end.
func BenchmarkLBSyncPolicyChange(b *testing.B) {
	f := lbEnv(b)
	p := f.policySetOf(b, f.ensureSyncer(b))
	l, log, before := f.watchWrites(b)
	ctx := context.Background()
	latencies, all := measureBatches(b, log, func() ([]change, error) {
		return p.changeBatch(ctx, policyChangesPerOp, policyChangeRate)
	})
	time.Sleep(time.Second) // a second write for one change would come now
	after, err := l.MockState()
	if err != nil {
		b.Fatal(err)
	}
	if err := p.appliedIn(after, all); err != nil {
		b.Fatal(err)
	}
	if err := log.read(); err != nil {
		b.Fatal(err)
	}
	reportLatency(b, "policy", latencies)
	// The writes to the changed load balancers since the first change: a
	// drain that an earlier benchmark left ends meanwhile on others.
	b.ReportMetric(float64(log.writesTo(all))/float64(len(all)), "writes/change")
	b.ReportMetric(float64(after.Counters.Writes-before.Counters.Writes)/float64(len(all)), "all-writes/change")
	b.ReportMetric(float64(len(all)), "changes")
	b.ReportMetric(loadAverage(), "load1")
}
