package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

func lbWith(members ...lbmodel.Member) *lbmodel.LoadBalancer {
	return &lbmodel.LoadBalancer{Name: "c--ns-web", Listeners: []lbmodel.Listener{{
		Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "c--ns-web-TCP-80", Members: members},
	}}}
}

// noMoves is a drainTracker.apply argument: no member moved.
func noMoves(lbmodel.Member, time.Duration) bool { return false }

func mem(ip string, port int32, enabled bool) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: enabled}
}

func TestDrainTracker_keepsADisabledMemberForTheDrainPeriod(t *testing.T) {
	d := newDrainTracker()
	t0 := time.Unix(1000, 0)
	period := 30 * time.Second

	// The Pod is terminating: its member is disabled and remembered.
	lb := lbWith(mem("198.18.0.10", 61000, true), mem("198.18.0.11", 61001, false))
	if next := d.apply(lb, period, t0, noMoves); !next.Equal(t0.Add(period)) {
		t.Errorf("next = %v, want %v", next, t0.Add(period))
	}

	// The Pod is gone 5 s later: the member stays, disabled.
	lb = lbWith(mem("198.18.0.10", 61000, true))
	d.apply(lb, period, t0.Add(5*time.Second), noMoves)
	want := []lbmodel.Member{mem("198.18.0.10", 61000, true), mem("198.18.0.11", 61001, false)}
	if diff := cmp.Diff(want, lb.Listeners[0].Pool.Members); diff != "" {
		t.Errorf("members while draining (-want +got):\n%s", diff)
	}

	// After the drain period it is removed.
	lb = lbWith(mem("198.18.0.10", 61000, true))
	if next := d.apply(lb, period, t0.Add(31*time.Second), noMoves); !next.IsZero() {
		t.Errorf("next = %v after expiry, want none", next)
	}
	if diff := cmp.Diff([]lbmodel.Member{mem("198.18.0.10", 61000, true)}, lb.Listeners[0].Pool.Members); diff != "" {
		t.Errorf("members after the drain (-want +got):\n%s", diff)
	}
}

func TestDrainTracker_podStillTerminatingAfterThePeriodStays(t *testing.T) {
	d := newDrainTracker()
	t0 := time.Unix(1000, 0)
	lb := lbWith(mem("198.18.0.11", 61001, false))
	d.apply(lb, time.Second, t0, noMoves)
	// Still in the model (the Pod still exists): whichever is later wins.
	lb = lbWith(mem("198.18.0.11", 61001, false))
	d.apply(lb, time.Second, t0.Add(10*time.Second), noMoves)
	if len(lb.Listeners[0].Pool.Members) != 1 {
		t.Errorf("a terminating Pod's member was removed while the Pod exists")
	}
}

func TestDrainTracker_zeroPeriodRemovesAtOnce(t *testing.T) {
	d := newDrainTracker()
	d.apply(lbWith(mem("198.18.0.11", 61001, false)), 0, time.Unix(1000, 0), noMoves)
	lb := lbWith()
	d.apply(lb, 0, time.Unix(1001, 0), noMoves)
	if len(lb.Listeners[0].Pool.Members) != 0 || len(d.until) != 0 {
		t.Errorf("drain period 0 kept %v (tracker %v)", lb.Listeners[0].Pool.Members, d)
	}
}

func TestDrainTracker_aMovedMemberDrainsAndAGoneOneDoesNot(t *testing.T) {
	d := newDrainTracker()
	t0 := time.Unix(1000, 0)
	period := 30 * time.Second
	d.apply(lbWith(mem("198.18.0.10", 61000, true), mem("198.18.0.11", 61001, true)), period, t0, noMoves)

	// npl-agent moved the first Pod's mapping to 61900; the second Pod
	// went (not Ready, or no longer selected): only the moved one drains.
	moved := func(m lbmodel.Member, _ time.Duration) bool {
		return m == lbmodel.Member{IP: "198.18.0.10", Port: 61000}
	}
	lb := lbWith(mem("198.18.0.10", 61900, true))
	if next := d.apply(lb, period, t0.Add(time.Second), moved); !next.Equal(t0.Add(time.Second + period)) {
		t.Errorf("next = %v, want the moved member's drain end %v", next, t0.Add(time.Second+period))
	}
	want := []lbmodel.Member{mem("198.18.0.10", 61000, false), mem("198.18.0.10", 61900, true)}
	if diff := cmp.Diff(want, lb.Listeners[0].Pool.Members); diff != "" {
		t.Errorf("members after the move (-want +got):\n%s", diff)
	}

	// Within the period it stays draining, moved or not by then.
	lb = lbWith(mem("198.18.0.10", 61900, true))
	d.apply(lb, period, t0.Add(20*time.Second), noMoves)
	if diff := cmp.Diff(want, lb.Listeners[0].Pool.Members); diff != "" {
		t.Errorf("members while the moved one drains (-want +got):\n%s", diff)
	}

	// After it, it is removed.
	lb = lbWith(mem("198.18.0.10", 61900, true))
	d.apply(lb, period, t0.Add(32*time.Second), moved)
	if diff := cmp.Diff([]lbmodel.Member{mem("198.18.0.10", 61900, true)}, lb.Listeners[0].Pool.Members); diff != "" {
		t.Errorf("members after the drain (-want +got):\n%s", diff)
	}
}

// TestRecordMovesOf: a Pod whose new annotation moves a mapping, compared
// with the cached one before the cache holds it, records the old member;
// a Pod not cached yet, or a zero drain period, records nothing.
func TestRecordMovesOf(t *testing.T) {
	annotated := func(port int) *corev1.Pod {
		value, err := contract.Format([]contract.Entry{{PodPort: 8080, NodeIP: "198.18.0.10", NodePort: port, Protocol: contract.ProtocolTCP, IPFamily: contract.FamilyIPv4}})
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Annotations: map[string]string{contract.PodKey: value}}}
	}
	newApplierWith := func(period time.Duration) *applier {
		a := newApplier(&cluster{settings: Settings{DrainPeriod: period}}, nil)
		a.store.Pods = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		return a
	}
	a := newApplierWith(time.Minute)
	a.recordMovesOf(annotated(61000)) // first seen: nothing cached
	if len(a.moved) != 0 {
		t.Fatalf("moves of a Pod not cached: %v", a.moved)
	}
	if err := a.store.Pods.Add(annotated(61000)); err != nil {
		t.Fatal(err)
	}
	a.recordMovesOf(annotated(61900))
	if _, ok := a.moved[memberAddr{"198.18.0.10", 61000}]; !ok || len(a.moved) != 1 {
		t.Errorf("moves %v, want the old member 198.18.0.10:61000", a.moved)
	}

	a = newApplierWith(0)
	if err := a.store.Pods.Add(annotated(61000)); err != nil {
		t.Fatal(err)
	}
	a.recordMovesOf(annotated(61900))
	if len(a.moved) != 0 {
		t.Errorf("moves with drain period 0: %v, want none", a.moved)
	}
}

// A pool's policy's drainSeconds (a LoadBalancerPolicy) overrides the
// drain period, longer or 0, pool by pool.
func TestDrainTracker_policyDrainPerPool(t *testing.T) {
	d := newDrainTracker()
	t0 := time.Unix(1000, 0)
	lbOf := func(members ...lbmodel.Member) *lbmodel.LoadBalancer {
		return &lbmodel.LoadBalancer{Name: "c--ns-web", Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "long", Members: slices.Clone(members), Policy: &lbmodel.Policy{DrainSeconds: ptr.To[int32](120)}}},
			{Port: 81, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "none", Members: slices.Clone(members), Policy: &lbmodel.Policy{DrainSeconds: ptr.To[int32](0)}}},
			{Port: 82, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "default", Members: slices.Clone(members)}},
		}}
	}
	if next := d.apply(lbOf(mem("198.18.0.11", 61001, false)), 30*time.Second, t0, noMoves); !next.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("next = %v, want the default pool's end %v", next, t0.Add(30*time.Second))
	}
	// The Pod is gone 60 s later: only the pool of 120 s keeps it.
	lb := lbOf()
	next := d.apply(lb, 30*time.Second, t0.Add(time.Minute), noMoves)
	got := map[string][]lbmodel.Member{}
	for _, l := range lb.Listeners {
		got[l.Pool.Name] = l.Pool.Members
	}
	want := map[string][]lbmodel.Member{"long": {mem("198.18.0.11", 61001, false)}, "none": nil, "default": nil}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" || !next.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("members 60 s later (-want +got):\n%s\nnext %v, want %v", diff, next, t0.Add(2*time.Minute))
	}
}
