package lbsync

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// TestLBSync_claimAndStatusInOneWrite: the first sync of a Service claims
// it (finalizer, claim record, opt-in) and writes its VIP and condition in
// one request, through the status subresource, whose write the API server
// keeps the metadata of: the first change anyone sees of the Service holds
// both, and the claim stays.
func TestLBSync_claimAndStatusInOneWrite(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ns := e.Namespace(t)
	ctx := lbsyncbed.Context(t, time.Minute)
	w, err := e.Client.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e.CreateService(t, lbsyncbed.LBService(ns, "web", lbsyncbed.OurClass))
	var first *corev1.Service
	for first == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before the Service changed")
			}
			if ev.Type == watch.Modified {
				first = ev.Object.(*corev1.Service)
			}
		case <-ctx.Done():
			t.Fatal("no change of the Service within a minute")
		}
	}
	got := map[string]bool{
		"claim record":  first.Annotations[contract.ClaimedByKey] == e.NPL.ClusterName,
		"opt-in":        first.Annotations[contract.ServiceEnabledKey] == "true" && first.Annotations[contract.AutoAnnotatedKey] == "true",
		"finalizer":     claim.HasFinalizer(first),
		"VIP in status": len(first.Status.LoadBalancer.Ingress) == 1,
		"Synced condition": slices.ContainsFunc(first.Status.Conditions, func(c metav1.Condition) bool {
			return c.Type == contract.SyncedConditionType && c.Status == metav1.ConditionTrue
		}),
	}
	for what, ok := range got {
		if !ok {
			t.Errorf("the first write of npl-lbsync lacks the %s: annotations %v, finalizers %v, status %+v",
				what, first.Annotations, first.Finalizers, first.Status)
		}
	}
	// What the API server keeps, read back.
	if s := e.Service(t, ns, "web"); s.Annotations[contract.ClaimedByKey] != e.NPL.ClusterName || !claim.HasFinalizer(s) {
		t.Errorf("the claim written through status did not stay: annotations %v, finalizers %v", s.Annotations, s.Finalizers)
	}
}
