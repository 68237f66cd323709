package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svcAt(rv string, cond string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1", ResourceVersion: rv},
		Status: corev1.ServiceStatus{Conditions: []metav1.Condition{{Type: "npl.io/LoadBalancerSynced", Status: metav1.ConditionStatus(cond)}}}}
}

// A sync that reads the cache before it shows our last write compares with
// the status we wrote, not with the older cached one.
func TestPending_ourLastWriteUntilTheCacheShowsIt(t *testing.T) {
	var w ownWrites
	cachedBefore := svcAt("10", "True")
	if _, ok := pending(&w, cachedBefore); ok {
		t.Fatal("no write of ours: nothing pending")
	}
	written := svcAt("11", "False")
	w.wrote(written)
	if last, ok := pending(&w, cachedBefore); !ok || last != written {
		t.Fatalf("the cache lags our write: pending %v, %v", last, ok)
	}
	// The informer shows our write: the cache is as new, the record goes.
	w.observed(svcAt("11", "False"))
	if _, ok := pending(&w, cachedBefore); ok {
		t.Fatal("after the informer showed our write, nothing should be pending")
	}
	// A cache at our resourceVersion is used as is.
	w.wrote(svcAt("12", "True"))
	if _, ok := pending(&w, svcAt("12", "True")); ok {
		t.Fatal("a cache at our resourceVersion: nothing pending")
	}
	// Another object's write is not this one's.
	other := svcAt("13", "True")
	other.UID = "u2"
	w.wrote(other)
	if _, ok := pending(&w, cachedBefore); ok {
		t.Fatal("another object's write was taken")
	}
}

// The informer may show our write before we record it (the event races
// the write's answer): the record then stays until it expires, and a spec
// changed since must still come from the cache. Only the status is ours.
func TestPending_aSpecChangedAfterOurWriteComesFromTheCache(t *testing.T) {
	var w ownWrites
	ours := svcAt("20", "False")
	ours.Spec.Ports = []corev1.ServicePort{{Port: 80}}
	w.observed(ours) // seen before it was recorded
	w.wrote(ours)
	changed := svcAt("21", "False")
	changed.Spec.Ports = []corev1.ServicePort{{Port: 8080}}
	last, ok := pending(&w, changed)
	if !ok {
		t.Fatal("our unconfirmed write should be pending")
	}
	base := changed.DeepCopy()
	base.Status = last.Status
	if base.Spec.Ports[0].Port != 8080 {
		t.Errorf("the sync would read port %d, want the cache's 8080", base.Spec.Ports[0].Port)
	}
}
