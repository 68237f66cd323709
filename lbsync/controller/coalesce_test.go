package controller

import (
	"testing"
	"time"
)

func TestCoalesceDelay_firstEventAtOnceBurstAfterTheWindow(t *testing.T) {
	cl := &cluster{settings: Settings{CoalesceWindow: 20 * time.Millisecond}}
	r := newServiceReconciler(cl, newApplier(cl, nil), nil, nil)
	web, api := serviceKey("ns", "web"), serviceKey("ns", "api")
	t0 := time.Now()
	for _, step := range []struct {
		key  queueKey
		at   time.Duration
		want time.Duration
	}{
		{web, 0, 0}, // an isolated change: at once
		{web, 5 * time.Millisecond, 15 * time.Millisecond}, // a burst: until the window ends
		{web, 19 * time.Millisecond, 1 * time.Millisecond},
		{api, 19 * time.Millisecond, 0}, // another Service has its own window
		{web, 20 * time.Millisecond, 0}, // the window has ended: a new one
		{web, 30 * time.Millisecond, 10 * time.Millisecond},
		{web, time.Second, 0},
	} {
		if got := r.coalesceDelay(step.key, t0.Add(step.at)); got != step.want {
			t.Errorf("event for %s at +%v: delay %v, want %v", step.key, step.at, got, step.want)
		}
	}
	r.forget(web)
	if got := r.coalesceDelay(web, t0.Add(time.Second+time.Millisecond)); got != 0 {
		t.Errorf("after forget: delay %v, want 0", got)
	}
}
