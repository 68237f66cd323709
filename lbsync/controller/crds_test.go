package controller

import (
	"errors"
	"testing"
	"time"
)

// A CRDWatch retries a failed look with a backoff that doubles up to
// crdMaxBackoff and never gives up; each distinct error is logged once
// while it lasts, and again after a success.
func TestCRDRetry_backsOffAndLogsEachErrorOnce(t *testing.T) {
	refused := errors.New("discover gateway.networking.k8s.io/v1: connection refused")
	unavailable := errors.New("discover gateway.networking.k8s.io/v1: 503")
	var r crdRetry
	steps := []struct {
		err   error
		delay time.Duration
		log   bool
	}{
		{refused, crdRecheck, true},
		{refused, 2 * crdRecheck, false},
		{unavailable, 4 * crdRecheck, true},
		{unavailable, 8 * crdRecheck, false},
		{unavailable, 16 * crdRecheck, false},
		{unavailable, crdMaxBackoff, false},
		{unavailable, crdMaxBackoff, false},
		{nil, 0, false},
		{unavailable, crdRecheck, true},
	}
	for i, s := range steps {
		if s.err == nil {
			r.succeeded()
			if r.failing() {
				t.Errorf("step %d: failing after a success", i)
			}
			continue
		}
		delay, log := r.failed(s.err)
		if delay != s.delay || log != s.log || !r.failing() {
			t.Errorf("step %d (%v): delay %v log %v failing %v, want %v %v true", i, s.err, delay, log, r.failing(), s.delay, s.log)
		}
	}
}
