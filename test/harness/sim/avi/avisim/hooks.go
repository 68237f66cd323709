package avisim

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// serveHooks answers the test hooks under /sim/, for the standalone command
// and for tests in other processes:
//
//	GET    /sim/calls            {"calls": {"GET pool": 3, ...}, "writes": 1}
//	POST   /sim/reset            zero counters, empty the request log
//	GET    /sim/requests         the request log
//	GET    /sim/dump             tenant -> type -> objects
//	POST   /sim/faults           add {"method","path","latency","status","message","count","for"}; answers {"id": n}
//	DELETE /sim/faults           remove every fault
//	DELETE /sim/faults?id=N      remove fault N
//	POST   /sim/expire-sessions  end every session
//	POST   /sim/credentials      {"username","password"} accepted from now on
//	POST   /sim/upgrading        {"on": true} refuses changes as during an upgrade, {"on": false} ends it
//
// Hooks need no session: the simulator listens on loopback or inside a test
// network namespace only.
func (s *Server) serveHooks(w http.ResponseWriter, r *http.Request, path string) {
	route := r.Method + " " + path
	switch route {
	case "GET /sim/calls":
		writeJSON(w, http.StatusOK, map[string]any{"calls": s.Calls(), "writes": s.Writes()})
	case "POST /sim/reset":
		s.ResetCounters()
		writeJSON(w, http.StatusOK, map[string]any{})
	case "GET /sim/requests":
		writeJSON(w, http.StatusOK, map[string]any{"requests": s.Requests()})
	case "GET /sim/dump":
		writeJSON(w, http.StatusOK, s.Dump())
	case "POST /sim/faults":
		var wire faultWire
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&wire); err != nil {
			writeError(w, http.StatusBadRequest, "fault: "+err.Error())
			return
		}
		f, err := wire.fault()
		if err != nil {
			writeError(w, http.StatusBadRequest, "fault: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"id": s.AddFault(f)})
	case "DELETE /sim/faults":
		if id := r.URL.Query().Get("id"); id != "" {
			n, err := strconv.Atoi(id)
			if err != nil {
				writeError(w, http.StatusBadRequest, "id: not a number")
				return
			}
			s.RemoveFault(n)
		} else {
			s.ClearFaults()
		}
		w.WriteHeader(http.StatusNoContent)
	case "POST /sim/expire-sessions":
		s.ExpireSessions()
		writeJSON(w, http.StatusOK, map[string]any{})
	case "POST /sim/credentials":
		var cred struct {
			Username string `json:"username"`
			Password string `json:"password"`
		}
		if err := json.NewDecoder(r.Body).Decode(&cred); err != nil || cred.Username == "" {
			writeError(w, http.StatusBadRequest, "credentials: expected {\"username\",\"password\"}")
			return
		}
		s.SetCredentials(cred.Username, cred.Password)
		writeJSON(w, http.StatusOK, map[string]any{})
	case "POST /sim/upgrading":
		var body struct {
			On bool `json:"on"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, `upgrading: expected {"on": true|false}`)
			return
		}
		s.SetUpgrading(body.On)
		writeJSON(w, http.StatusOK, map[string]any{})
	default:
		writeError(w, http.StatusNotFound, "Unknown hook "+route)
	}
}
