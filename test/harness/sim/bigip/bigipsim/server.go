// Package bigipsim simulates the part of the F5 BIG-IP iControl REST API that
// npl's BIG-IP provider and the go-bigip client use: partitions, pools and
// their members, nodes, monitors and virtual servers under /mgmt/tm, LTM
// policies (drafts and publishing), client-ssl profiles, SSL certificates
// and keys from uploaded files, basic and token authentication and file
// uploads under /mgmt/shared, and transactions. Errors have
// BIG-IP's JSON shape and texts. Tests drive it through hooks: fault
// injection, call counters, a dump of the configuration and token expiry,
// from Go or over HTTP under /sim/.
package bigipsim

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Options configure a Server.
type Options struct {
	// Addr is the address to listen on; "127.0.0.1:0" when empty.
	Addr string
	// TLS serves HTTPS with a certificate signed by a CA generated at Start
	// (see CACertPEM); plain HTTP otherwise.
	TLS bool
	// Username and Password are the credentials that basic auth and login
	// accept; admin and admin when empty.
	Username string
	Password string
	// TokenTimeout is the lifetime of a new token; 1200 s when zero, as on
	// BIG-IP.
	TokenTimeout time.Duration
	// ErrorLog receives the HTTP server's errors (failed TLS handshakes);
	// they are dropped when nil.
	ErrorLog *log.Logger
	// Role is the user's role on all partitions, as GET
	// /mgmt/tm/auth/user/<name> shows it: admin when empty. Roles that may
	// not create LTM objects (guest, operator, application-editor, ...)
	// have their writes refused as BIG-IP refuses them.
	Role string
	// Version is the BIG-IP version GET /mgmt/tm/sys/version reports;
	// 17.1.0 when empty. The provider uses nothing that differs between
	// 13.1 and 17.1 (docs/bigip.md).
	Version string
}

// Server is a simulated BIG-IP. Its methods are safe for concurrent use.
type Server struct {
	opts Options

	mu       sync.Mutex // guards the fields below
	st       *store
	tokens   map[string]time.Time // token -> expiry
	txns     map[int64]*transaction
	nextTxn  int64
	calls    map[string]int
	writes   int
	faults   []*fault
	faultSeq int

	srv   *http.Server
	ln    net.Listener
	url   string
	caPEM []byte
}

const (
	loginPath   = "/mgmt/shared/authn/login"
	tokensPath  = "/mgmt/shared/authz/tokens/"
	tmPrefix    = "/mgmt/tm/"
	txnPath     = "/mgmt/tm/transaction"
	versionPath = "/mgmt/tm/sys/version"
	userPath    = "/mgmt/tm/auth/user/"
	simPrefix   = "/sim/"
	txnHeader   = "X-F5-REST-Coordination-Id"
	tokenHdr    = "X-F5-Auth-Token"
	maxBody     = 32 << 20
	maxTimeout  = 36000 // the longest token lifetime BIG-IP accepts, in seconds
)

// New returns a Server with an empty configuration: the partition Common and
// its built-in monitors. Call Start to serve it.
func New(opts Options) *Server {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Username == "" {
		opts.Username = "admin"
	}
	if opts.Password == "" {
		opts.Password = "admin"
	}
	if opts.TokenTimeout == 0 {
		opts.TokenTimeout = 1200 * time.Second
	}
	if opts.ErrorLog == nil {
		opts.ErrorLog = log.New(io.Discard, "", 0)
	}
	return &Server{
		opts:   opts,
		st:     newStore(),
		tokens: map[string]time.Time{},
		txns:   map[int64]*transaction{},
		calls:  map[string]int{},
	}
}

// Start listens on the configured address and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.opts.Addr, err)
	}
	scheme := "http"
	if s.opts.TLS {
		caPEM, cert, err := newCertificates(ln.Addr().String())
		if err != nil {
			ln.Close()
			return fmt.Errorf("generate certificates: %w", err)
		}
		s.caPEM = caPEM
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	s.ln = ln
	s.url = scheme + "://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ErrorLog: s.opts.ErrorLog}
	go s.srv.Serve(ln) //nolint:errcheck // Serve returns ErrServerClosed after Close.
	return nil
}

// Close stops serving and closes open connections.
func (s *Server) Close() {
	if s.srv != nil {
		s.srv.Close()
	}
}

// URL is the base URL to give clients: http(s)://127.0.0.1:PORT.
func (s *Server) URL() string { return s.url }

// CACertPEM is the PEM certificate of the CA that signed the server's
// certificate; nil without TLS.
func (s *Server) CACertPEM() []byte { return s.caPEM }

// ServeHTTP serves iControl REST under /mgmt and these test hooks, which
// need no authentication (the simulator is a test tool on loopback):
//
//	GET    /sim/dump            the configuration, as Dump
//	GET    /sim/counters        {"calls":{"PUT pool":1,...},"writes":1}
//	POST   /sim/counters/reset  zero the counters
//	POST   /sim/faults          add a Fault (JSON, durations as "250ms"); answers {"id":N}
//	DELETE /sim/faults[/N]      remove every fault, or fault N
//	POST   /sim/tokens/expire   ExpireTokens
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, simPrefix) {
		s.serveSim(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		writeResponse(w, badRequest("read request body: %v", err))
		return
	}
	s.count(r.Method, r.URL.Path)
	if f := s.matchFault(r.Method, r.URL.Path); f != nil {
		if f.Latency > 0 {
			select {
			case <-time.After(f.Latency):
			case <-r.Context().Done():
				return
			}
		}
		if f.Status != 0 {
			writeFault(w, f, r.URL.Path)
			return
		}
	}
	writeResponse(w, s.handle(r, body))
}

func (s *Server) handle(r *http.Request, body []byte) response {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path == loginPath {
		if r.Method != http.MethodPost {
			return methodNotAllowed(r.Method, r.URL.Path)
		}
		return s.login(body)
	}
	if resp, good := s.authenticate(r); !good {
		return resp
	}
	switch {
	case strings.HasPrefix(r.URL.Path, uploadsPath):
		if r.Method != http.MethodPost {
			return methodNotAllowed(r.Method, r.URL.Path)
		}
		return s.upload(strings.TrimPrefix(r.URL.Path, uploadsPath), r.Header.Get("Content-Range"), body)
	case strings.HasPrefix(r.URL.Path, tokensPath):
		return s.serveToken(r.Method, strings.TrimPrefix(r.URL.Path, tokensPath), body)
	case r.URL.Path == txnPath || strings.HasPrefix(r.URL.Path, txnPath+"/"):
		return s.serveTransaction(r.Method, strings.TrimPrefix(r.URL.Path, txnPath), body)
	case r.URL.Path == versionPath && r.Method == http.MethodGet:
		return s.version()
	case r.URL.Path == userPath+s.opts.Username && r.Method == http.MethodGet:
		return s.user()
	case strings.HasPrefix(r.URL.Path, tmPrefix) && r.Method != http.MethodGet && !writerRoles[s.role()]:
		// BIG-IP's answer to a change the user's role does not allow.
		return errorf(http.StatusUnauthorized, "Authorization failed: user=%s resource=%s verb=%s", s.opts.Username,
			strings.TrimPrefix(r.URL.Path, "/mgmt"), r.Method)
	case strings.HasPrefix(r.URL.Path, tmPrefix):
		req := newRequest(r.Method, r.URL.Path, r.URL.Query(), body)
		if id := r.Header.Get(txnHeader); id != "" && r.Method != http.MethodGet {
			return s.enqueue(id, req)
		}
		return s.st.serve(req)
	}
	return notRegistered(r.URL.Path)
}

func newRequest(method, path string, query url.Values, body []byte) request {
	return request{
		method: method,
		path:   path,
		segs:   strings.Split(strings.Trim(strings.TrimPrefix(path, tmPrefix), "/"), "/"),
		query:  query,
		body:   body,
	}
}

// Do runs one iControl REST call in process, without authentication, fault
// injection or counting: tests use it to set up objects of other owners. The
// path starts with /mgmt/tm/ and may carry a query; body is marshalled to
// JSON unless it is nil, a string or a []byte.
func (s *Server) Do(method, path string, body any) (int, []byte) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return http.StatusBadRequest, []byte(err.Error())
		}
	}
	u, err := url.Parse(path)
	if err != nil || !strings.HasPrefix(u.Path, tmPrefix) {
		return http.StatusNotFound, []byte(`{"code":404,"message":"path must start with /mgmt/tm/"}`)
	}
	s.mu.Lock()
	resp := s.st.serve(newRequest(method, u.Path, u.Query(), raw))
	s.mu.Unlock()
	out, _ := encodeBody(resp)
	return resp.status, out
}

func encodeBody(resp response) ([]byte, error) {
	if resp.body == nil {
		return nil, nil
	}
	return json.Marshal(resp.body)
}

func writeResponse(w http.ResponseWriter, resp response) {
	out, err := encodeBody(resp)
	if err != nil {
		resp = errorf(http.StatusInternalServerError, "encode response: %v", err)
		out, _ = encodeBody(resp)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(resp.status)
	w.Write(out) //nolint:errcheck // the client went away; nothing to do.
}

// writerRoles may create and delete LTM objects in their partitions.
var writerRoles = map[string]bool{"admin": true, "resource-admin": true, "manager": true}

func (s *Server) role() string {
	if s.opts.Role == "" {
		return "admin"
	}
	return s.opts.Role
}

// user answers GET /mgmt/tm/auth/user/<name> for the configured user: its
// role on all partitions.
func (s *Server) user() response {
	name := s.opts.Username
	return ok(obj{
		"kind": "tm:auth:user:userstate", "name": name, "fullPath": name, "generation": 1,
		"selfLink":          selfLinkBase + "auth/user/" + name + selfLinkVersion,
		"description":       name,
		"encryptedPassword": "$6$...",
		"partitionAccess":   []any{obj{"name": "all-partitions", "role": s.role()}},
	})
}

// version answers GET /mgmt/tm/sys/version as BIG-IP does: one entry of
// nested stats.
func (s *Server) version() response {
	v := s.opts.Version
	if v == "" {
		v = "17.1.0"
	}
	desc := func(d string) obj { return obj{"description": d} }
	return ok(obj{
		"kind":     "tm:sys:version:versionstats",
		"selfLink": "https://localhost/mgmt/tm/sys/version?ver=" + v,
		"entries": obj{"https://localhost/mgmt/tm/sys/version/0": obj{"nestedStats": obj{"entries": obj{
			"Build": desc("0.0.1"), "Date": desc("Mon Jan  1 00:00:00 PST 2024"), "Edition": desc("Final"),
			"Product": desc("BIG-IP"), "Title": desc("Main Package"), "Version": desc(v),
		}}}},
	})
}

// login answers POST /mgmt/shared/authn/login. The answer has no numeric
// top-level "timeout", so go-bigip goes on to PATCH the token's timeout.
func (s *Server) login(body []byte) response {
	var req struct {
		Username          string `json:"username"`
		Password          string `json:"password"`
		LoginProviderName string `json:"loginProviderName"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return invalidJSON()
	}
	if req.Username != s.opts.Username || req.Password != s.opts.Password {
		return errorf(http.StatusUnauthorized, "Authentication failed.")
	}
	provider := req.LoginProviderName
	if provider == "" {
		provider = "tmos"
	}
	token := newToken()
	now := time.Now()
	timeout := int64(s.opts.TokenTimeout / time.Second)
	s.tokens[token] = now.Add(s.opts.TokenTimeout)
	return ok(obj{
		"username":          req.Username,
		"loginProviderName": provider,
		"token": obj{
			"token":            token,
			"name":             token,
			"userName":         req.Username,
			"timeout":          timeout,
			"startTime":        now.UTC().Format(time.RFC3339Nano),
			"expirationMicros": now.Add(s.opts.TokenTimeout).UnixMicro(),
			"kind":             "shared:authz:tokens:authtokenitemstate",
			"selfLink":         "https://localhost/mgmt/shared/authz/tokens/" + token,
		},
		"generation":       0,
		"lastUpdateMicros": 0,
	})
}

// serveToken answers /mgmt/shared/authz/tokens/<token>: PATCH sets its
// timeout and answers it as a number at the top level, which go-bigip needs.
func (s *Server) serveToken(method, token string, body []byte) response {
	exp, known := s.tokens[token]
	if !known || time.Now().After(exp) {
		return errorf(http.StatusNotFound, "Token %s not found.", token)
	}
	switch method {
	case http.MethodGet:
		return ok(obj{"token": token, "timeout": int64(time.Until(exp) / time.Second)})
	case http.MethodPatch:
		var req struct {
			Timeout int64 `json:"timeout"`
		}
		if err := json.Unmarshal(body, &req); err != nil || req.Timeout <= 0 || req.Timeout > maxTimeout {
			return badRequest("timeout must be a number of seconds between 1 and %d", maxTimeout)
		}
		s.tokens[token] = time.Now().Add(time.Duration(req.Timeout) * time.Second)
		return ok(obj{"token": token, "timeout": req.Timeout, "kind": "shared:authz:tokens:authtokenitemstate"})
	case http.MethodDelete:
		delete(s.tokens, token)
		return ok(nil)
	}
	return methodNotAllowed(method, tokensPath+token)
}

// authenticate accepts a valid X-F5-Auth-Token, or basic auth when no token
// is sent.
func (s *Server) authenticate(r *http.Request) (response, bool) {
	if t := r.Header.Get(tokenHdr); t != "" {
		if exp, known := s.tokens[t]; known && time.Now().Before(exp) {
			return response{}, true
		}
		return errorf(http.StatusUnauthorized, "X-F5-Auth-Token does not exist."), false
	}
	if u, p, given := r.BasicAuth(); given {
		if u == s.opts.Username && p == s.opts.Password {
			return response{}, true
		}
		return errorf(http.StatusUnauthorized, "Authentication failed."), false
	}
	return errorf(http.StatusUnauthorized, "Authorization failed: no user authentication header or token detected. Uri:%s", r.URL.Path), false
}

// ExpireTokens makes every token issued so far invalid: calls that send one
// get 401 until the client logs in again.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.tokens {
		s.tokens[t] = time.Time{}
	}
}

func newToken() string {
	b := make([]byte, 16)
	rand.Read(b) //nolint:errcheck // crypto/rand.Read never fails.
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)
}

// serveSim serves the test hooks listed on ServeHTTP.
func (s *Server) serveSim(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, simPrefix)
	switch {
	case path == "dump" && r.Method == http.MethodGet:
		writeResponse(w, ok(s.Dump()))
	case path == "counters" && r.Method == http.MethodGet:
		writeResponse(w, ok(obj{"calls": s.Calls(), "writes": s.Writes()}))
	case path == "counters/reset" && r.Method == http.MethodPost:
		s.ResetCounters()
		writeResponse(w, ok(obj{}))
	case path == "faults" && r.Method == http.MethodPost:
		var f Fault
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeResponse(w, badRequest("decode fault: %v", err))
			return
		}
		id, err := s.InjectFault(f)
		if err != nil {
			writeResponse(w, badRequest("%v", err))
			return
		}
		writeResponse(w, ok(obj{"id": id}))
	case path == "faults" && r.Method == http.MethodDelete:
		s.ClearFaults()
		writeResponse(w, ok(obj{}))
	case strings.HasPrefix(path, "faults/") && r.Method == http.MethodDelete:
		var id int
		if _, err := fmt.Sscanf(strings.TrimPrefix(path, "faults/"), "%d", &id); err != nil {
			writeResponse(w, badRequest("bad fault id"))
			return
		}
		s.RemoveFault(id)
		writeResponse(w, ok(obj{}))
	case path == "tokens/expire" && r.Method == http.MethodPost:
		s.ExpireTokens()
		writeResponse(w, ok(obj{}))
	default:
		writeResponse(w, notRegistered(r.URL.Path))
	}
}

// Shutdown stops serving gracefully, waiting for calls in progress.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}
