package lbsync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// policyFor is a LoadBalancerPolicy of ns targeting the Service svc.
func policyFor(ns, name, svc string, tp v1alpha1.TrafficPolicy) *v1alpha1.LoadBalancerPolicy {
	return &v1alpha1.LoadBalancerPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.LoadBalancerPolicySpec{
			TargetRefs:    []v1alpha1.LocalPolicyTargetReference{{Kind: v1alpha1.KindService, Name: svc}},
			TrafficPolicy: tp,
		},
	}
}

// waitPoolPolicy waits until the mock holds want as the policy of pool of
// the Service.
func waitPoolPolicy(t *testing.T, e *lbsyncbed.Env, ns, svc, pool string, want *lbmodel.Policy) {
	t.Helper()
	waitSyncerPoolPolicy(t, e.NPL, ns, svc, pool, want)
}

// waitSyncerPoolPolicy waits until the mock of an npl-lbsync holds want as
// the policy of pool of the Service.
func waitSyncerPoolPolicy(t *testing.T, l *lbsyncbed.Syncer, ns, svc, pool string, want *lbmodel.Policy) {
	t.Helper()
	var got map[string]*lbmodel.Policy
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ok bool
		var err error
		got, ok, err = lbsyncbed.PoolPolicies(l, ns, svc)
		if err == nil && ok && cmp.Equal(want, got[pool]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy of pool %s (-want +got):\n%s", pool, cmp.Diff(want, got[pool]))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLBSync_loadBalancerPolicy: a LoadBalancerPolicy reaches the pools of
// the Service it targets on the load balancer, and says so per target in
// its status. Policies of one target merge field by field, the oldest
// winning: a younger one partly overridden stays Accepted and names what
// it lost, one wholly overridden is Conflicted, and the next oldest takes
// over a field when the oldest goes. A change the CRD refuses at admission
// leaves the policy applied as it was; a target that does not exist, one
// in another namespace, a field that applies to no pool of the target are
// Accepted False with the reason, and change no load balancer.
func TestLBSync_loadBalancerPolicy(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns, other := e.Namespace(t), e.Namespace(t)
	ip := e.NodeIP(0)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass))
	pool := e.NPL.PoolName(ns, "web", lbmodel.TCP, 80)
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{pool: {lbsyncbed.Member(ip, 61000, true)}})
	create := func(p *v1alpha1.LoadBalancerPolicy) {
		t.Helper()
		if err := e.CreatePolicy(t, p); err != nil {
			t.Fatalf("create LoadBalancerPolicy %s: %v", p.Name, err)
		}
	}

	// Applied.
	create(policyFor(ns, "a-first", "web", v1alpha1.TrafficPolicy{
		HealthCheck:             &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, Path: "/healthz", IntervalSeconds: ptr.To[int32](5)},
		Algorithm:               &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmConsistentHash, HashOn: v1alpha1.HashOnSourceIP},
		SlowStartSeconds:        ptr.To[int32](30),
		MaxConnectionsPerMember: ptr.To[int32](100),
	}))
	want := &lbmodel.Policy{
		HealthCheck:             &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz", IntervalSeconds: 5},
		Algorithm:               &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP},
		SlowStartSeconds:        30,
		MaxConnectionsPerMember: 100,
	}
	waitPoolPolicy(t, e, ns, "web", pool, want)
	e.WaitPolicyCondition(t, ns, "a-first", "Service", "web", metav1.ConditionTrue, "Accepted")

	// A younger policy: its health check is the older's, its drain applies.
	// Created a second later, so that the creation times, not the names,
	// order them.
	time.Sleep(time.Second)
	create(policyFor(ns, "b-second", "web", v1alpha1.TrafficPolicy{
		HealthCheck:  &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckTCP},
		DrainSeconds: ptr.To[int32](5),
	}))
	want.DrainSeconds = ptr.To[int32](5)
	waitPoolPolicy(t, e, ns, "web", pool, want)
	c := e.WaitPolicyCondition(t, ns, "b-second", "Service", "web", metav1.ConditionTrue, "Accepted")
	if !strings.Contains(c.Message, "healthCheck (by a-first)") {
		t.Errorf("b-second's message %q does not name the field a-first overrides", c.Message)
	}
	// One whose every field is an older one's.
	create(policyFor(ns, "c-third", "web", v1alpha1.TrafficPolicy{Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmLeastConnections}}))
	c = e.WaitPolicyCondition(t, ns, "c-third", "Service", "web", metav1.ConditionFalse, "Conflicted")
	if !strings.Contains(c.Message, "algorithm (by a-first)") {
		t.Errorf("c-third's message %q does not name the policy that wins", c.Message)
	}

	// A change the CRD refuses changes nothing.
	err := e.UpdatePolicy(t, ns, "a-first", func(p *v1alpha1.LoadBalancerPolicy) { p.Spec.HealthCheck.Path = "healthz" })
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "path starting with /") {
		t.Errorf("a health check path without / was not refused at admission: %v", err)
	}

	// A Service that does not exist; a field that applies to no pool of
	// web (a cookie needs the pools of HTTP rules); a Service of another
	// namespace: Accepted False, nothing changes.
	create(policyFor(ns, "d-missing", "nope", v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](1)}))
	c = e.WaitPolicyCondition(t, ns, "d-missing", "Service", "nope", metav1.ConditionFalse, "TargetNotFound")
	if c.Message != "Service "+ns+"/nope not found" {
		t.Errorf("d-missing's message %q", c.Message)
	}
	create(policyFor(ns, "e-cookie", "web", v1alpha1.TrafficPolicy{Persistence: &v1alpha1.Persistence{Type: v1alpha1.PersistenceCookie, Name: "srv"}}))
	c = e.WaitPolicyCondition(t, ns, "e-cookie", "Service", "web", metav1.ConditionFalse, "Invalid")
	if !strings.Contains(c.Message, "persistence.type=Cookie on TCP pools: only the pools of HTTP rules have it") {
		t.Errorf("e-cookie's message %q", c.Message)
	}
	create(policyFor(other, "intruder", "web", v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](1), HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckTCP}}))
	e.WaitPolicyCondition(t, other, "intruder", "Service", "web", metav1.ConditionFalse, "TargetNotFound")
	e.SyncedAfter(t, "services", ns, "web", e.NPL)
	got, _, err := lbsyncbed.PoolPolicies(e.NPL, ns, "web")
	if err != nil || !cmp.Equal(want, got[pool]) {
		t.Errorf("policy after the refused and unserved policies (-want +got):\n%s\n(err %v)", cmp.Diff(want, got[pool]), err)
	}
	if s := e.Service(t, ns, "web"); lbsyncbed.Condition(s) == nil || lbsyncbed.Condition(s).Reason != "Synced" {
		t.Errorf("web's condition %+v, want Synced: the mock expresses every field", lbsyncbed.Condition(s))
	}

	// nplctl expects the policy npl-lbsync applies, and reports a load
	// balancer that lost it as drift, naming the fields.
	report, stderr, code := lbsyncbed.NplctlPools(t, "--kubeconfig", e.Cluster.Kubeconfig(), "--config", e.NPL.ConfigPath, "-n", ns, "--check")
	if code != 0 || len(report.Pools) != 1 || report.Pools[0].State != inspect.StateInSync || !cmp.Equal(report.Pools[0].Policy, want) {
		t.Errorf("nplctl pools --check: exit %d, %+v\n%s", code, report.Pools, stderr)
	}
	stateFile := filepath.Join(e.StateDir, "npl-io-lb.json")
	cfg, err := os.ReadFile(e.NPL.ConfigPath)
	if err != nil || !strings.Contains(string(cfg), stateFile) {
		t.Fatalf("the configuration does not name the state file %s (err %v):\n%s", stateFile, err, cfg)
	}
	lost := filepath.Join(t.TempDir(), "lost.json")
	withoutPolicy(t, stateFile, lost, pool)
	lostCfg := filepath.Join(t.TempDir(), "lbsync.yaml")
	if err := os.WriteFile(lostCfg, []byte(strings.Replace(string(cfg), stateFile, lost, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	report, stderr, code = lbsyncbed.NplctlPools(t, "--kubeconfig", e.Cluster.Kubeconfig(), "--config", lostCfg, "-n", ns, "--check")
	if code != 1 || len(report.Pools) != 1 || report.Pools[0].State != inspect.StateDrift ||
		!strings.Contains(stderr, "policy differs: healthCheck, algorithm, slowStartSeconds, maxConnectionsPerMember") {
		t.Errorf("nplctl pools --check with the policy lost: exit %d, %+v\n%s", code, report.Pools, stderr)
	}

	// The oldest goes: the next oldest gives each field it set.
	if err := e.Policies(t).Namespace(ns).Delete(context.Background(), "a-first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPoolPolicy(t, e, ns, "web", pool, &lbmodel.Policy{
		HealthCheck:  &lbmodel.HealthCheck{Type: lbmodel.CheckTCP},
		Algorithm:    &lbmodel.Algorithm{Type: lbmodel.LeastConnections},
		DrainSeconds: ptr.To[int32](5),
	})
	e.WaitPolicyCondition(t, ns, "c-third", "Service", "web", metav1.ConditionTrue, "Accepted")
}

// TestLBSync_loadBalancerPolicyAdmission: what the CRD's schema and CEL
// rules refuse when a policy is written.
func TestLBSync_loadBalancerPolicyAdmission(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	const svc = `targetRefs: [{group: "", kind: Service, name: web}]`
	for _, tt := range []struct{ name, spec, want string }{
		{"every field", svc + `
healthCheck: {type: HTTP, path: /healthz, host: web.example.com, expectedStatuses: [{min: 200, max: 299}, {min: 301}], intervalSeconds: 5, timeoutSeconds: 2, healthyThreshold: 2, unhealthyThreshold: 3}
algorithm: {type: ConsistentHash, hashOn: Header, hashName: X-User}
persistence: {type: Cookie, name: srv, timeoutSeconds: 600, idleTimeoutSeconds: 60}
slowStartSeconds: 10
drainSeconds: 0
maxConnectionsPerMember: 100`, ""},
		{"an unknown algorithm", svc + `
algorithm: {type: Random}`, `Unsupported value: "Random"`},
		{"a health check path without /", svc + `
healthCheck: {type: HTTP, path: healthz}`, "needs a path starting with /"},
		{"an interval of 0", svc + `
healthCheck: {type: TCP, intervalSeconds: 0}`, "should be greater than or equal to 1"},
		{"a timeout beyond the interval", svc + `
healthCheck: {type: TCP, intervalSeconds: 2, timeoutSeconds: 3}`, "the timeout of a health check is at most its interval"},
		{"a TCP check with a path", svc + `
healthCheck: {type: TCP, path: /healthz}`, "a TCP one has no path"},
		{"an expected status range backwards", svc + `
healthCheck: {type: HTTP, path: /, expectedStatuses: [{min: 300, max: 200}]}`, "ends at or after its start"},
		{"a header hash without a name", svc + `
algorithm: {type: ConsistentHash, hashOn: Header}`, "a hash on a header or a cookie needs hashName"},
		{"a consistent hash without a key", svc + `
algorithm: {type: ConsistentHash}`, "a consistent hash needs hashOn"},
		{"a cookie without a name", svc + `
persistence: {type: Cookie}`, "Cookie and Header persistence need a name"},
		{"a Deployment", `targetRefs: [{group: apps, kind: Deployment, name: web}]`, "names a Service"},
		{"a Gateway of the core group", `targetRefs: [{group: "", kind: Gateway, name: gw}]`, "names a Service"},
		{"a target twice", `targetRefs: [{group: "", kind: Service, name: web}, {group: "", kind: Service, name: web}]`, "a target is named once"},
		{"no target", `targetRefs: []`, "should have at least 1 items"},
		{"a target in another namespace", `targetRefs: [{group: "", kind: Service, name: web, namespace: other}]`, `unknown field "spec.targetRefs[0].namespace"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var spec map[string]any
			if err := yaml.Unmarshal([]byte(tt.spec), &spec); err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": v1alpha1.Kind,
				"metadata": map[string]any{"namespace": ns, "name": strings.ReplaceAll(tt.name, " ", "-")}, "spec": spec,
			}}
			_, err := e.Policies(t).Namespace(ns).Create(lbsyncbed.Context(t, 30*time.Second), u,
				metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestLBSync_loadBalancerPolicyDrain: a policy's drainSeconds keeps the
// member of a terminating Pod in the pools of its Service that long, while
// another Service of the same Pod drains for npl-lbsync's drainSeconds (1
// on this bed).
func TestLBSync_loadBalancerPolicyDrain(t *testing.T) {
	e := lbsyncbed.Setup(t)
	// Long enough for the Pod to go (TerminationDelay, 4 s) and be synced.
	const drain = 15 * time.Second
	ns := e.Namespace(t)
	ip := e.NodeIP(0)
	e.Pod(t, ns, "stay", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
	e.Pod(t, ns, "leave", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61001, "tcp")))
	if err := e.CreatePolicy(t, policyFor(ns, "drain", "web", v1alpha1.TrafficPolicy{DrainSeconds: ptr.To(int32(drain.Seconds()))})); err != nil {
		t.Fatal(err)
	}
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass))
	e.CreateService(t, lbsyncbed.LBService(ns, "plain", lbsyncbed.OurClass))
	webPool, plainPool := e.NPL.PoolName(ns, "web", lbmodel.TCP, 80), e.NPL.PoolName(ns, "plain", lbmodel.TCP, 80)
	both := []lbmodel.Member{lbsyncbed.Member(ip, 61000, true), lbsyncbed.Member(ip, 61001, true)}
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{webPool: both})
	lbsyncbed.WaitPools(t, e.NPL, ns, "plain", map[string][]lbmodel.Member{plainPool: both})
	e.WaitPolicyCondition(t, ns, "drain", "Service", "web", metav1.ConditionTrue, "Accepted")

	deleted := time.Now()
	if err := e.Client.CoreV1().Pods(ns).Delete(context.Background(), "leave", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	draining := map[string][]lbmodel.Member{webPool: {lbsyncbed.Member(ip, 61000, true), lbsyncbed.Member(ip, 61001, false)}}
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", draining)
	lbsyncbed.WaitFor(t, 20*time.Second, "the Pod gone", func() (bool, error) {
		_, err := e.Client.CoreV1().Pods(ns).Get(context.Background(), "leave", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	// The other Service drains for the global second, and is synced.
	lbsyncbed.WaitPools(t, e.NPL, ns, "plain", map[string][]lbmodel.Member{plainPool: {lbsyncbed.Member(ip, 61000, true)}})
	e.SyncedAfter(t, "pods", ns, "stay", e.NPL)
	if since := time.Since(deleted); since >= drain {
		t.Fatalf("the Pod took %s to go and be synced, longer than the drain period %s: nothing left to check", since.Round(time.Millisecond), drain)
	}
	got, _, _, err := lbsyncbed.Pools(e.NPL, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(got, draining) {
		t.Errorf("web's draining member left with its Pod, %s after the deletion (-want +got):\n%s",
			time.Since(deleted).Round(time.Millisecond), cmp.Diff(draining, got))
	}
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{webPool: {lbsyncbed.Member(ip, 61000, true)}})
	if d := time.Since(deleted); d < drain-time.Second {
		t.Errorf("web's draining member was removed %s after the deletion, before the policy's %s", d.Round(time.Second), drain)
	}
}

// withoutPolicy writes a copy of the mock's state file to dst without the
// policy of pool: a load balancer that lost it.
func withoutPolicy(t *testing.T, src, dst, pool string) {
	t.Helper()
	lbsyncbed.EditMockState(t, src, dst, func(p map[string]any) bool {
		if p["name"] != pool || p["policy"] == nil {
			return false
		}
		delete(p, "policy")
		return true
	})
}

// TestLBSync_loadBalancerPolicyExample: the example policy of the README
// (examples/policy) is accepted and applied as it says.
func TestLBSync_loadBalancerPolicyExample(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	data, err := os.ReadFile("../../examples/policy/web-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var p v1alpha1.LoadBalancerPolicy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("decode the example: %v", err)
	}
	p.Namespace = ns
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass))
	if err := e.CreatePolicy(t, &p); err != nil {
		t.Fatal(err)
	}
	waitPoolPolicy(t, e, ns, "web", e.NPL.PoolName(ns, "web", lbmodel.TCP, 80), &lbmodel.Policy{
		HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/", ExpectedStatuses: []lbmodel.StatusRange{{Min: 200, Max: 299}},
			IntervalSeconds: 5, TimeoutSeconds: 2, Rise: 2, Fall: 3},
		Algorithm:               &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP},
		SlowStartSeconds:        30,
		DrainSeconds:            ptr.To[int32](60),
		MaxConnectionsPerMember: 1000,
	})
	e.WaitPolicyCondition(t, ns, "web", "Service", "web", metav1.ConditionTrue, "Accepted")
}
