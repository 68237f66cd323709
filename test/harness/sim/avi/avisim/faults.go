package avisim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Fault makes matching requests slow or fail. A request matches when its
// method equals Method (any method if empty) and its normalised path matches
// Path, a pattern where * stands for any run of characters, slashes included
// (any path if empty). Hook paths under /sim/ never match.
type Fault struct {
	Method string
	Path   string
	// Latency delays every matching request before it is answered.
	Latency time.Duration
	// Status, when not zero, answers matching requests with this status and
	// {"error": Message} instead of serving them.
	Status  int
	Message string
	// Count limits the fault to the next Count matching requests; zero means
	// no limit.
	Count int
	// For limits the fault to a time window starting when it is added; zero
	// means until it is removed.
	For time.Duration
}

// faultWire is Fault as the /sim/faults hook reads it, durations as strings
// ("250ms").
type faultWire struct {
	Method  string `json:"method,omitempty"`
	Path    string `json:"path,omitempty"`
	Latency string `json:"latency,omitempty"`
	Status  int    `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	Count   int    `json:"count,omitempty"`
	For     string `json:"for,omitempty"`
}

func (w faultWire) fault() (Fault, error) {
	f := Fault{Method: w.Method, Path: w.Path, Status: w.Status, Message: w.Message, Count: w.Count}
	var err error
	if w.Latency != "" {
		if f.Latency, err = time.ParseDuration(w.Latency); err != nil {
			return f, fmt.Errorf("latency: %w", err)
		}
	}
	if w.For != "" {
		if f.For, err = time.ParseDuration(w.For); err != nil {
			return f, fmt.Errorf("for: %w", err)
		}
	}
	if f.Status != 0 && (f.Status < 100 || f.Status > 599) {
		return f, fmt.Errorf("status: %d is not an HTTP status", f.Status)
	}
	return f, nil
}

// activeFault is an added Fault and what is left of it.
type activeFault struct {
	id      int
	fault   Fault
	pattern *regexp.Regexp
	left    int // requests left when fault.Count > 0
	until   time.Time
}

func compilePattern(p string) *regexp.Regexp {
	if p == "" {
		return nil
	}
	parts := strings.Split(p, "*")
	for i, part := range parts {
		parts[i] = regexp.QuoteMeta(part)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// AddFault adds a fault and returns its id for RemoveFault.
func (s *Server) AddFault(f Fault) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextFaultID++
	af := &activeFault{id: s.nextFaultID, fault: f, pattern: compilePattern(f.Path), left: f.Count}
	if f.For > 0 {
		af.until = time.Now().Add(f.For)
	}
	s.faults = append(s.faults, af)
	return af.id
}

// RemoveFault removes the fault id; removing it twice is not an error.
func (s *Server) RemoveFault(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.id == id {
			s.faults = append(s.faults[:i], s.faults[i+1:]...)
			return
		}
	}
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// takeFaults returns what the matching faults do to one request: the sum of
// their latencies and the first error status, consuming one use of each.
func (s *Server) takeFaults(method, path string) (latency time.Duration, status int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	kept := s.faults[:0]
	for _, f := range s.faults {
		if !f.until.IsZero() && now.After(f.until) {
			continue
		}
		match := (f.fault.Method == "" || strings.EqualFold(f.fault.Method, method)) &&
			(f.pattern == nil || f.pattern.MatchString(path))
		if match {
			latency += f.fault.Latency
			if status == 0 && f.fault.Status != 0 {
				status, msg = f.fault.Status, f.fault.Message
				if msg == "" {
					msg = http.StatusText(status)
				}
			}
			if f.fault.Count > 0 {
				f.left--
				if f.left <= 0 {
					continue
				}
			}
		}
		kept = append(kept, f)
	}
	s.faults = kept
	return latency, status, msg
}

// Request is one entry of the request log.
type Request struct {
	Time   time.Time `json:"time"`
	Method string    `json:"method"`
	// Path is normalised (no repeated or trailing slash); Query is raw.
	Path   string `json:"path"`
	Query  string `json:"query,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Status int    `json:"status"`
}

// Requests returns a copy of the request log, oldest first: the last
// Options.MaxRequests requests. Hook requests under /sim/ are not logged.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := max(0, len(s.requests)-s.opts.MaxRequests)
	return append([]Request(nil), s.requests[from:]...)
}

// Calls returns how many requests were served, by "METHOD kind" where kind
// is the object type (pool, vsvip, ...) or the endpoint (login, logout,
// initial-data, cluster/status). Failed requests count too.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// Writes returns how many POST, PUT, PATCH and DELETE requests reached
// /api/<object type>, failed ones included.
func (s *Server) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// ResetCounters zeroes Calls and Writes and empties the request log.
func (s *Server) ResetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = map[string]int{}
	s.writes = 0
	s.requests = nil
}

// record counts one served request and appends it to the log.
func (s *Server) record(r *http.Request, path string, status int) {
	callKind := endpointKind(path)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[r.Method+" "+callKind]++
	if _, isObject := kinds[callKind]; isObject {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			s.writes++
		}
	}
	// The log keeps up to twice its bound and drops the older half at once,
	// so that a long run does not copy it on every request.
	if len(s.requests) >= 2*s.opts.MaxRequests {
		n := copy(s.requests, s.requests[len(s.requests)-s.opts.MaxRequests:])
		s.requests = s.requests[:n]
	}
	s.requests = append(s.requests, Request{
		Time:   time.Now(),
		Method: r.Method,
		Path:   path,
		Query:  r.URL.RawQuery,
		Tenant: r.Header.Get("X-Avi-Tenant"),
		Status: status,
	})
}

// endpointKind names what a normalised path addresses, for counters.
func endpointKind(path string) string {
	rest, ok := strings.CutPrefix(path, "/api/")
	if !ok {
		return strings.TrimPrefix(path, "/")
	}
	if typ, _, _ := strings.Cut(rest, "/"); kinds[typ].display != "" {
		return typ
	}
	return rest
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
