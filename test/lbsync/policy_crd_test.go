package lbsync

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// TestLBSync_policyCRDInstalledAfterTheStart: an npl-lbsync started while
// the LoadBalancerPolicy CRD is not installed applies the policies once it
// is, without a restart: the pool of the Service a policy targets gets the
// policy and the policy's status says Accepted. The shared npl-lbsync,
// which saw the CRD go and come back, applies it to its own Service too.
func TestLBSync_policyCRDInstalledAfterTheStart(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	e.WithoutPolicyCRD(t)
	const class = "npl.io/latecrd"
	late := e.StartExtra(t, "npl-lbsync-latecrd", "NodePortLocal", class, "198.18.109.0/28", false)

	ip := e.NodeIP(0)
	e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
	e.CreateService(t, lbsyncbed.LBService(ns, "late", ptr.To(class)))
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass))
	latePool, webPool := late.PoolName(ns, "late", lbmodel.TCP, 80), e.NPL.PoolName(ns, "web", lbmodel.TCP, 80)
	member := []lbmodel.Member{lbsyncbed.Member(ip, 61000, true)}
	lbsyncbed.WaitPools(t, late, ns, "late", map[string][]lbmodel.Member{latePool: member})
	lbsyncbed.WaitPools(t, e.NPL, ns, "web", map[string][]lbmodel.Member{webPool: member})

	if err := e.Cluster.InstallLoadBalancerPolicyCRD(lbsyncbed.Context(t, time.Minute)); err != nil {
		t.Fatalf("install the LoadBalancerPolicy CRD: %v", err)
	}
	p := policyFor(ns, "checks", "late", v1alpha1.TrafficPolicy{
		HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, Path: "/healthz"},
	})
	p.Spec.TargetRefs = append(p.Spec.TargetRefs, v1alpha1.LocalPolicyTargetReference{Kind: v1alpha1.KindService, Name: "web"})
	// The API server may answer NotFound a moment after the CRD is
	// Established.
	lbsyncbed.WaitFor(t, 10*time.Second, "the LoadBalancerPolicy to be created", func() (bool, error) {
		err := e.CreatePolicy(t, p)
		if apierrors.IsNotFound(err) {
			return false, err
		}
		if err != nil {
			t.Fatalf("create LoadBalancerPolicy: %v", err)
		}
		return true, nil
	})

	want := &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz"}}
	waitSyncerPoolPolicy(t, late, ns, "late", latePool, want)
	e.WaitPolicyCondition(t, ns, "checks", "Service", "late", metav1.ConditionTrue, v1alpha1.ReasonAccepted)
	waitSyncerPoolPolicy(t, e.NPL, ns, "web", webPool, want)
	e.WaitPolicyCondition(t, ns, "checks", "Service", "web", metav1.ConditionTrue, v1alpha1.ReasonAccepted)
}
