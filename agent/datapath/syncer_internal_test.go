package datapath

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"
)

func TestNextBackoff_growsByHalfUpToTheCap(t *testing.T) {
	var got []time.Duration
	var d time.Duration
	for range 7 {
		d = nextBackoff(d, time.Second, 5*time.Second)
		got = append(got, d)
	}
	want := []time.Duration{
		time.Second, 1500 * time.Millisecond, 2250 * time.Millisecond, 3375 * time.Millisecond,
		5 * time.Second, 5 * time.Second, 5 * time.Second,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoff sequence (-want +got):\n%s", diff)
	}
}

func TestSyncerOptions_defaults(t *testing.T) {
	want := SyncerOptions{
		CheckInterval: time.Minute,
		MinBackoff:    time.Second,
		MaxBackoff:    5 * time.Second,
		Clock:         clock.RealClock{},
	}
	if diff := cmp.Diff(want, SyncerOptions{}.withDefaults()); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}
