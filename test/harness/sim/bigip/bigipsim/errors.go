package bigipsim

import (
	"fmt"
	"net/http"
)

// response is what one iControl REST call answers: a status and a JSON body
// (nil for an empty body, as BIG-IP answers a DELETE).
type response struct {
	status int
	body   any
}

// errorBody is the JSON every BIG-IP error carries. go-bigip treats an error
// with an empty message as a success, so message is never empty.
type errorBody struct {
	Code       int      `json:"code"`
	Message    string   `json:"message"`
	ErrorStack []string `json:"errorStack"`
	APIError   int      `json:"apiError"`
}

func errorf(status int, format string, args ...any) response {
	msg := fmt.Sprintf(format, args...)
	if msg == "" {
		msg = http.StatusText(status)
	}
	return response{status: status, body: errorBody{Code: status, Message: msg, ErrorStack: []string{}, APIError: 3}}
}

func ok(body any) response { return response{status: http.StatusOK, body: body} }

// notFound is BIG-IP's 01020036 error, which clients match on "not found".
func notFound(typ, fullPath string) response {
	return errorf(http.StatusNotFound, "01020036:3: The requested %s (%s) was not found.", typ, fullPath)
}

// refNotFound is the same text for a reference inside a body (a pool named by
// a virtual, a missing partition): BIG-IP answers 400 there, not 404.
func refNotFound(typ, fullPath string) response {
	return errorf(http.StatusBadRequest, "01020036:3: The requested %s (%s) was not found.", typ, fullPath)
}

func alreadyExists(typ, fullPath, partition string) response {
	return errorf(http.StatusConflict, "01020066:3: The requested %s (%s) already exists in partition %s.", typ, fullPath, partition)
}

func badRequest(format string, args ...any) response {
	return errorf(http.StatusBadRequest, format, args...)
}

func invalidJSON() response {
	return badRequest("Found invalid JSON body in the request.")
}

func notRegistered(path string) response {
	return errorf(http.StatusNotFound, "Public URI path not registered: %s", path)
}

func methodNotAllowed(method, path string) response {
	return errorf(http.StatusMethodNotAllowed, "Method %s is not supported on %s", method, path)
}

func (r response) failed() bool { return r.status >= 400 }
