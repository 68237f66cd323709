package mock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// HTTP paths the Handler serves.
const (
	// StatePath answers GET with the State as JSON.
	StatePath = "/providers/mock/state"
	// FaultPath takes POST of a FaultRequest; served only when the
	// configuration sets allowFaultInjection.
	FaultPath = "/providers/mock/fault"
)

// FaultRequest is the body of POST FaultPath. Exactly one field is set.
type FaultRequest struct {
	// FailFor makes every call fail for this long ("30s").
	FailFor string `json:"failFor,omitempty"`
	// FailCalls makes the next FailCalls calls fail.
	FailCalls int `json:"failCalls,omitempty"`
	// Clear cancels every injected fault.
	Clear bool `json:"clear,omitempty"`
}

// FaultStatus is the answer to POST FaultPath: the faults now in force.
type FaultStatus struct {
	FailCalls int       `json:"failCalls"`
	FailUntil time.Time `json:"failUntil,omitzero"`
}

// Handler serves the mock's state and, when allowed, fault injection. The
// controller mounts it on its metrics listener.
func (m *Mock) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+StatePath, m.serveState)
	if m.allowFault {
		mux.HandleFunc("POST "+FaultPath, m.serveFault)
	}
	return mux
}

func (m *Mock) serveState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, m.State())
}

func (m *Mock) serveFault(w http.ResponseWriter, r *http.Request) {
	var req FaultRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, fmt.Sprintf("bad fault request: %v", err), http.StatusBadRequest)
		return
	}
	if err := m.applyFault(req); err != nil {
		http.Error(w, fmt.Sprintf("bad fault request: %v", err), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	status := FaultStatus{FailCalls: m.failNext}
	if m.faultErr != nil && m.now().Before(m.faultUntil) {
		status.FailUntil = m.faultUntil
	}
	m.mu.Unlock()
	writeJSON(w, http.StatusOK, status)
}

func (m *Mock) applyFault(req FaultRequest) error {
	set := 0
	for _, given := range []bool{req.FailFor != "", req.FailCalls != 0, req.Clear} {
		if given {
			set++
		}
	}
	if set != 1 {
		return errors.New(`give exactly one of "failFor", "failCalls" or "clear": true`)
	}
	switch {
	case req.FailFor != "":
		d, err := time.ParseDuration(req.FailFor)
		if err != nil || d <= 0 {
			return fmt.Errorf("failFor %q is not a positive duration", req.FailFor)
		}
		m.SetFault(ErrInjected, m.now().Add(d))
	case req.FailCalls != 0:
		if req.FailCalls < 0 {
			return fmt.Errorf("failCalls %d is negative", req.FailCalls)
		}
		m.FailNext(req.FailCalls)
	default:
		m.ClearFaults()
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// The status line is sent; a failed write means the client went away.
	_ = enc.Encode(v)
}
