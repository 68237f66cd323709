package edgebed

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStream_stopSaysTheStreamEndedByItsBound: a stream that reached its
// bound (time or count) before Stop makes Stop fail, so that "0 failed"
// never covers a shorter window than a test claims; one stopped within its
// bound does not, and the requests Stop cut short are counted in flight.
func TestStream_stopSaysTheStreamEndedByItsBound(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = w.Write([]byte("backend"))
	}))
	defer srv.Close()
	defer close(release)
	ctx := context.Background()
	c := srv.Client()

	s := StartStream(ctx, c, srv.URL+"/fast", 2, 200*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	if err := s.Stop(); err == nil || !strings.Contains(err.Error(), "reached its bound") {
		t.Errorf("Stop of a stream past its time bound = %v, want an error", err)
	}

	s = StartStreamN(ctx, c, srv.URL+"/fast", 2, 10, time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for ok, _ := s.Snapshot(); ok < 10 && time.Now().Before(deadline); ok, _ = s.Snapshot() {
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Stop(); err == nil {
		t.Errorf("Stop of a stream past its count bound (%d ok) = nil, want an error", s.OK)
	}

	s = StartStream(ctx, c, srv.URL+"/slow", 3, time.Minute)
	time.Sleep(200 * time.Millisecond)
	if err := s.Stop(); err != nil {
		t.Errorf("Stop within the bound = %v", err)
	}
	if s.InFlight != 3 || s.OK != 0 || s.Failed != 0 {
		t.Errorf("stopped with 3 requests waiting: %d in flight, %d ok, %d failed; want 3, 0, 0", s.InFlight, s.OK, s.Failed)
	}
	t.Logf("stream stopped with %d requests in flight", s.InFlight)
}
