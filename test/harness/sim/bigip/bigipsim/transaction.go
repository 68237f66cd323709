package bigipsim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// transaction is a BIG-IP transaction: calls sent with its id in the
// X-F5-REST-Coordination-Id header are queued, and committing applies them
// all or none.
type transaction struct {
	id       int64
	state    string
	commands []request
	failure  string
}

func (t *transaction) view() obj {
	return obj{
		"kind":             "tm:transactionstate",
		"transId":          t.id,
		"state":            t.state,
		"timeoutSeconds":   120,
		"asyncExecution":   false,
		"validateOnly":     false,
		"executionTimeout": 300,
		"executionTime":    0,
		"failureReason":    t.failure,
		"selfLink":         selfLinkBase + "transaction/" + strconv.FormatInt(t.id, 10) + selfLinkVersion,
	}
}

// serveTransaction serves /mgmt/tm/transaction[/<id>[/commands]]; rest is
// the part of the path after /mgmt/tm/transaction.
func (s *Server) serveTransaction(method, rest string, body []byte) response {
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if parts[0] == "" {
		switch method {
		case http.MethodPost:
			s.nextTxn++
			t := &transaction{id: s.nextTxn, state: "STARTED"}
			s.txns[t.id] = t
			return ok(t.view())
		case http.MethodGet:
			var items []any
			for id := int64(1); id <= s.nextTxn; id++ {
				if t := s.txns[id]; t != nil {
					items = append(items, t.view())
				}
			}
			return ok(collection("tm:transactioncollectionstate", "transaction", items))
		}
		return methodNotAllowed(method, txnPath)
	}
	id, err := strconv.ParseInt(parts[0], 10, 64)
	t := s.txns[id]
	if err != nil || t == nil || len(parts) > 2 || (len(parts) == 2 && parts[1] != "commands") {
		return errorf(http.StatusNotFound, "Transaction %s was not found.", parts[0])
	}
	if len(parts) == 2 {
		if method != http.MethodGet {
			return methodNotAllowed(method, txnPath+rest)
		}
		var items []any
		for i, c := range t.commands {
			items = append(items, obj{"evalOrder": i + 1, "commandId": i + 1, "method": c.method, "uri": c.path})
		}
		return ok(collection("tm:transaction:commands:commandscollectionstate", "transaction/"+parts[0]+"/commands", items))
	}
	switch method {
	case http.MethodGet:
		return ok(t.view())
	case http.MethodDelete:
		delete(s.txns, id)
		return ok(nil)
	case http.MethodPatch, http.MethodPut:
		var req struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return invalidJSON()
		}
		if req.State != "VALIDATING" {
			return badRequest("transaction state must be set to VALIDATING to commit, got %q", req.State)
		}
		if t.state != "STARTED" {
			return badRequest("Transaction %d is %s and cannot be committed.", id, t.state)
		}
		return s.commit(t)
	}
	return methodNotAllowed(method, txnPath+rest)
}

// commit applies the queued calls to a copy of the configuration and keeps
// the copy only if all succeed.
func (s *Server) commit(t *transaction) response {
	next := s.st.clone()
	for _, c := range t.commands {
		resp := next.serve(c)
		if resp.failed() {
			msg := ""
			if e, isErr := resp.body.(errorBody); isErr {
				msg = e.Message
			}
			t.state, t.failure = "FAILED", msg
			return errorf(resp.status, "transaction failed:%s", msg)
		}
	}
	s.st = next
	t.state = "COMPLETED"
	return ok(t.view())
}

// enqueue queues a write on a started transaction instead of applying it.
func (s *Server) enqueue(idText string, req request) response {
	id, err := strconv.ParseInt(idText, 10, 64)
	t := s.txns[id]
	if err != nil || t == nil {
		return errorf(http.StatusNotFound, "Transaction %s was not found.", idText)
	}
	if t.state != "STARTED" {
		return badRequest("Transaction %d is %s and takes no more commands.", id, t.state)
	}
	t.commands = append(t.commands, req)
	return ok(obj{"transId": id, "evalOrder": len(t.commands), "commandId": len(t.commands), "method": req.method, "uri": req.path})
}
