package avi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/nodeportlocal/npl/internal/secretfile"
)

// authTransport carries one SDK session's requests and owns its login.
//
// The alb-sdk logs through glog every cookie it receives, the CSRF token,
// and on a transport error a dump of the request with its body, which for
// a login holds the password. So the SDK is never given a secret: it gets a
// placeholder password, and this transport answers its POST /login by
// logging in with the credentials read from the files at that moment (a
// rotated password is picked up), keeps the cookies, adds them and the CSRF
// token to every request, and strips Set-Cookie from what the SDK sees.
//
// It also re-logs in and replays a request answered 401 (an expired
// session), and remembers the status and message of the last failed request,
// which the SDK flattens into "Rest request error, returning to caller" when
// its controller status check is disabled.
//
// It is registered as the "https" protocol of the SDK's http.Transport, the
// only hook the SDK's SetTransport leaves.
type authTransport struct {
	base  http.RoundTripper
	host  string
	creds credentials

	mu      sync.Mutex
	cookies []*http.Cookie
	csrf    string
	opCtx   context.Context
	last    *failure
}

// credentials reads the username and password files at every login.
type credentials struct {
	usernameFile string
	passwordFile string
}

// failure is what went wrong with the last failed request.
type failure struct {
	method, path string
	status       int    // HTTP status, or 0 for a transport error
	message      string // the controller's {"error": ...} text
	err          error  // transport error
}

// maxBody bounds what is read of one answer; a page of 100 objects is far
// below it.
const maxBody = 64 << 20

// bind makes the requests of the current operation end when ctx ends. A
// session serves one operation at a time.
func (t *authTransport) bind(ctx context.Context) (unbind func()) {
	t.mu.Lock()
	t.opCtx = ctx
	t.last = nil
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		t.opCtx = nil
		t.mu.Unlock()
	}
}

// lastFailure returns the last failed request since bind, or nil.
func (t *authTransport) lastFailure() *failure {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// resetFailure forgets the last failure before a call.
func (t *authTransport) resetFailure() {
	t.mu.Lock()
	t.last = nil
	t.mu.Unlock()
}

func (t *authTransport) record(f *failure) {
	t.mu.Lock()
	t.last = f
	t.mu.Unlock()
}

// RoundTrip implements http.RoundTripper.
func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if req.Method == http.MethodPost && strings.Trim(req.URL.Path, "/") == "login" {
		return t.login(req.Context())
	}
	resp, err := t.send(req)
	replayable := req.Body == nil || req.GetBody != nil
	if err == nil && resp.StatusCode == http.StatusUnauthorized && replayable {
		// The session expired: log in again (re-reading the credentials)
		// and replay the request once.
		lresp, lerr := t.login(req.Context())
		if lerr != nil {
			return nil, lerr
		}
		if lresp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("log in again after 401: status %d", lresp.StatusCode)
		}
		resp, err = t.send(req)
	}
	if err != nil {
		t.record(&failure{method: req.Method, path: req.URL.Path, err: err})
		return nil, err
	}
	if resp.StatusCode >= 400 {
		t.record(&failure{method: req.Method, path: req.URL.Path, status: resp.StatusCode, message: errorText(resp)})
	}
	return resp, nil
}

// send sends one request with the session's cookies and reads the whole
// answer, so that the operation's context can end with it.
func (t *authTransport) send(req *http.Request) (*http.Response, error) {
	ctx, cancel := t.opContext(req.Context())
	defer cancel()
	t.mu.Lock()
	cookies, csrf := t.cookies, t.csrf
	t.mu.Unlock()

	out := req.Clone(ctx)
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("replay request body: %w", err)
		}
		out.Body = body
	}
	for _, c := range cookies {
		out.AddCookie(c)
	}
	if csrf != "" {
		out.Header.Set("X-CSRFToken", csrf)
	}
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if err := bufferBody(resp); err != nil {
		return nil, err
	}
	t.keepCookies(resp)
	return resp, nil
}

// opContext derives a request's context that also ends when the bound
// operation's context ends.
func (t *authTransport) opContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	t.mu.Lock()
	op := t.opCtx
	t.mu.Unlock()
	if op == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(op, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// keepCookies takes the session cookies an answer sets, and hides them from
// the SDK.
func (t *authTransport) keepCookies(resp *http.Response) {
	set := resp.Cookies()
	resp.Header.Del("Set-Cookie")
	if len(set) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range set {
		if c.Name != "sessionid" && c.Name != "avi-sessionid" && c.Name != "csrftoken" {
			continue
		}
		kept := &http.Cookie{Name: c.Name, Value: c.Value}
		t.cookies = slices.DeleteFunc(slices.Clone(t.cookies), func(old *http.Cookie) bool { return old.Name == c.Name })
		t.cookies = append(t.cookies, kept)
		if c.Name == "csrftoken" {
			t.csrf = c.Value
		}
	}
}

// login logs in with the credentials in the files and keeps the cookies.
// The answer goes to the SDK without its Set-Cookie headers.
func (t *authTransport) login(ctx context.Context) (*http.Response, error) {
	resp, err := t.postLogin(ctx)
	if err != nil {
		t.record(&failure{method: http.MethodPost, path: "/login", err: err})
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Header.Del("Set-Cookie")
		t.record(&failure{method: http.MethodPost, path: "/login", status: resp.StatusCode, message: errorText(resp)})
		return resp, nil
	}
	t.mu.Lock()
	t.cookies, t.csrf = nil, ""
	t.mu.Unlock()
	t.keepCookies(resp)
	return resp, nil
}

func (t *authTransport) postLogin(parent context.Context) (*http.Response, error) {
	ctx, cancel := t.opContext(parent)
	defer cancel()
	user, err := secretfile.Read(t.creds.usernameFile)
	if err != nil {
		return nil, fmt.Errorf("read username: %w", err)
	}
	password, err := secretfile.Read(t.creds.passwordFile)
	if err != nil {
		return nil, fmt.Errorf("read password: %w", err)
	}
	body, err := json.Marshal(map[string]string{"username": user, "password": password})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+t.host+"/login", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Referer", "https://"+t.host+"/")
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if err := bufferBody(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// bufferBody replaces resp.Body by its content, read whole.
func bufferBody(resp *http.Response) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	resp.ContentLength = int64(len(data))
	return nil
}

// errorText is the controller's message in an error answer: the "error"
// field of its JSON body, else the body itself, else the status text.
func errorText(resp *http.Response) string {
	data, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(data))
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &body) == nil && body.Error != "" {
		return body.Error
	}
	if s := strings.TrimSpace(string(data)); s != "" {
		if len(s) > 300 {
			s = s[:300] + "…"
		}
		return s
	}
	return http.StatusText(resp.StatusCode)
}
