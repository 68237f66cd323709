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
// what we wrote, not with the older copy.
func TestFreshest_ourWriteStandsInForACacheThatLags(t *testing.T) {
	var w ownWrites
	cachedBefore := svcAt("10", "True")
	if got := freshest(&w, cachedBefore); got != cachedBefore {
		t.Fatal("no write of ours: want the cached object")
	}
	written := svcAt("11", "False")
	w.wrote(written)
	if got := freshest(&w, cachedBefore); got != written {
		t.Fatalf("the cache lags our write: got resourceVersion %s, want 11", got.ResourceVersion)
	}
	// The informer shows our write: the cache is as new, the record goes.
	w.observed(svcAt("11", "False"))
	if got := freshest(&w, cachedBefore); got != cachedBefore {
		t.Fatal("after the informer showed our write, the record should be gone")
	}
	// A cache that reached our resourceVersion is used as is.
	w.wrote(svcAt("12", "True"))
	caught := svcAt("12", "True")
	if got := freshest(&w, caught); got != caught {
		t.Fatal("a cache at our resourceVersion: want the cached object")
	}
	// Another object's write does not stand in for this one.
	other := svcAt("13", "True")
	other.UID = "u2"
	w.wrote(other)
	if got := freshest(&w, cachedBefore); got != cachedBefore {
		t.Fatal("another object's write was used")
	}
}
