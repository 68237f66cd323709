// Package avisim is an Avi (NSX Advanced Load Balancer) Controller
// simulator for tests and the demo. It serves, over TLS with a CA it
// generates, the part of the REST API that the alb-sdk and the npl Avi
// provider use: login with cookies and CSRF, a generic per-tenant object
// store with collections, filters, paging and name references, VIP
// allocation for VsVips, and the controller's error answers. Every body is
// checked against the controller's own schema (avischema: the pinned
// alb-sdk's swagger files) for the X-Avi-Version it is sent with, and
// stored objects answer as a controller's do: uuids <type>-<uuid4>,
// full-URL references, the admin tenant's uuid admin, defaults filled in.
// Test hooks inject faults and latency, count calls, expire sessions,
// simulate an upgrade and dump state, from Go or over HTTP under /sim/.
package avisim

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeportlocal/npl/test/harness/sim/avi/avischema"
)

// Options configure a Server. The zero value is usable.
type Options struct {
	// Addr is the address to listen on; default 127.0.0.1:0.
	Addr string
	// Username and Password are the credentials POST /login accepts;
	// default admin / admin.
	Username string
	Password string
	// Version is the controller's API version: what GET /api/initial-data
	// reports, the newest X-Avi-Version requests may ask for, and the
	// schema the simulator checks bodies with (avischema: the pinned
	// alb-sdk's, 20.1.7, with what later releases change). Default: the
	// pinned schema's version.
	Version string
	// VIPNetwork names the seeded network VsVips allocate from; default
	// vip-net.
	VIPNetwork string
	// VIPSubnet is that network's subnet; default 198.18.200.0/24.
	VIPSubnet netip.Prefix
	// MaxRequests bounds the request log; default 10000.
	MaxRequests int
}

func (o *Options) setDefaults() {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Username == "" {
		o.Username = "admin"
	}
	if o.Password == "" {
		o.Password = "admin"
	}
	if o.VIPNetwork == "" {
		o.VIPNetwork = "vip-net"
	}
	if !o.VIPSubnet.IsValid() {
		o.VIPSubnet = netip.MustParsePrefix("198.18.200.0/24")
	}
	if o.MaxRequests <= 0 {
		o.MaxRequests = 10000
	}
}

// Server is a simulated Avi Controller. Its methods are safe for concurrent
// use.
type Server struct {
	opts Options
	// version is Options.Version parsed; setupErr is what went wrong
	// reading the schema or the version, returned by Start.
	version  avischema.Version
	setupErr error
	// upgrading refuses configuration changes, as during an upgrade.
	upgrading bool

	mu       sync.Mutex
	st       *store
	sessions map[string]*loginSession
	username string
	password string
	faults   []*activeFault
	calls    map[string]int
	writes   int
	requests []Request

	nextFaultID int

	ca        *testCA
	srv       *http.Server
	host      string
	done      chan struct{}
	closeOnce sync.Once
}

type loginSession struct {
	user *account
	csrf string
}

// New returns a Server seeded like a fresh controller: tenant admin,
// Default-Cloud, Default-Group, the VIP network, VRF global, health monitors
// System-TCP, System-UDP and System-HTTP, application profiles
// System-L4-Application, System-HTTP and System-Secure-HTTP, network profiles
// System-TCP-Proxy, System-UDP-Fast-Path and System-TCP-Fast-Path, and SSL
// profile System-Standard. Start serves it.
func New(opts Options) *Server {
	opts.setDefaults()
	s := &Server{
		opts:     opts,
		st:       newStore(),
		sessions: map[string]*loginSession{},
		username: opts.Username,
		password: opts.Password,
		calls:    map[string]int{},
		done:     make(chan struct{}),
	}
	s.st.defaultNetwork = opts.VIPNetwork
	schema, err := avischema.Pinned()
	if err != nil {
		s.setupErr = fmt.Errorf("avisim: %w", err)
	} else {
		if s.opts.Version == "" {
			s.opts.Version = schema.Version
		}
		v, ok := avischema.ParseVersion(s.opts.Version)
		if !ok {
			s.setupErr = fmt.Errorf("avisim: version %q is not major.minor.patch", s.opts.Version)
		}
		s.version = v
		s.st.schema, s.st.version = schema, v
	}
	s.seed()
	return s
}

func (s *Server) seed() {
	ip := s.opts.VIPSubnet.Masked().Addr()
	seeds := []struct {
		typ string
		obj object
	}{
		{"tenant", object{"name": adminTenant}},
		{"cloud", object{"name": "Default-Cloud", "vtype": "CLOUD_NONE"}},
		{"vrfcontext", object{"name": "global"}},
		{"serviceenginegroup", object{"name": "Default-Group"}},
		{"network", object{
			"name":            s.opts.VIPNetwork,
			"vrf_context_ref": "/api/vrfcontext/?name=global",
			"configured_subnets": []any{map[string]any{
				"prefix": map[string]any{
					"ip_addr": map[string]any{"addr": ip.String(), "type": ipType(ip)},
					"mask":    json.Number(fmt.Sprint(s.opts.VIPSubnet.Bits())),
				},
			}},
		}},
		{"healthmonitor", object{"name": "System-TCP", "type": "HEALTH_MONITOR_TCP"}},
		{"healthmonitor", object{"name": "System-UDP", "type": "HEALTH_MONITOR_UDP"}},
		{"analyticsprofile", object{"name": "System-Analytics-Profile"}},
		{"applicationprofile", object{"name": "System-L4-Application", "type": "APPLICATION_PROFILE_TYPE_L4"}},
		{"applicationprofile", object{"name": "System-HTTP", "type": "APPLICATION_PROFILE_TYPE_HTTP"}},
		{"applicationprofile", object{"name": "System-Secure-HTTP", "type": "APPLICATION_PROFILE_TYPE_HTTP",
			"http_profile": map[string]any{"ssl_everywhere_enabled": true, "hsts_enabled": true}}},
		{"healthmonitor", object{"name": "System-HTTP", "type": "HEALTH_MONITOR_HTTP"}},
		{"sslprofile", object{"name": "System-Standard", "accepted_versions": []any{
			map[string]any{"type": "SSL_VERSION_TLS1_2"}, map[string]any{"type": "SSL_VERSION_TLS1_3"}}}},
		{"networkprofile", object{"name": "System-TCP-Proxy", "profile": map[string]any{"type": "PROTOCOL_TYPE_TCP_PROXY"}}},
		{"networkprofile", object{"name": "System-UDP-Fast-Path", "profile": map[string]any{"type": "PROTOCOL_TYPE_UDP_FAST_PATH"}}},
		{"networkprofile", object{"name": "System-TCP-Fast-Path", "profile": map[string]any{"type": "PROTOCOL_TYPE_TCP_FAST_PATH"}}},
	}
	seeds = append(seeds, struct {
		typ string
		obj object
	}{"role", object{"name": systemAdminRole, "privileges": allPermissions()}})
	for _, sd := range seeds {
		if _, err := s.st.create(adminTenant, sd.typ, sd.obj, avischema.Version{}); err != nil {
			panic(fmt.Sprintf("seed %s %v: %v", sd.typ, sd.obj["name"], err))
		}
	}
}

// Start listens on Options.Addr, generates the CA and serves TLS in the
// background. It returns the address it listens on (host:port).
func (s *Server) Start() (string, error) {
	if s.setupErr != nil {
		return "", s.setupErr
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return "", fmt.Errorf("avisim: listen on %s: %w", s.opts.Addr, err)
	}
	host, _, _ := net.SplitHostPort(s.opts.Addr)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ca, err := newTestCA(host)
	if err != nil {
		ln.Close()
		return "", fmt.Errorf("avisim: %w", err)
	}
	s.mu.Lock()
	s.ca = ca
	s.host = net.JoinHostPort(host, port)
	s.mu.Unlock()

	tlsLn := tls.NewListener(ln, &tls.Config{
		Certificates: []tls.Certificate{ca.serving},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	})
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		// Clients that reject the test CA make handshake errors; they are
		// the client's failure to report, not the simulator's.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() { _ = s.srv.Serve(tlsLn) }()
	return s.host, nil
}

// Close stops serving and ends requests held by latency faults.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		if s.srv != nil {
			err = s.srv.Close()
		}
	})
	return err
}

// Host returns host:port the server listens on, once started.
func (s *Server) Host() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.host
}

// URL returns https://host:port, once started.
func (s *Server) URL() string { return "https://" + s.Host() }

// CACertPEM returns the PEM certificate of the CA that signed the serving
// certificate, once started.
func (s *Server) CACertPEM() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ca == nil {
		return nil
	}
	return slices.Clone(s.ca.certPEM)
}

// WriteCAFile writes CACertPEM to path.
func (s *Server) WriteCAFile(path string) error {
	pem := s.CACertPEM()
	if pem == nil {
		return errors.New("avisim: not started")
	}
	if err := os.WriteFile(path, pem, 0o644); err != nil {
		return fmt.Errorf("avisim: write CA file: %w", err)
	}
	return nil
}

// SetCredentials changes the credentials POST /login accepts, as a password
// rotation does. Existing sessions stay valid.
func (s *Server) SetCredentials(username, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.username, s.password = username, password
}

// ExpireSessions ends every session: the next request of every client gets
// 401 until it logs in again.
func (s *Server) ExpireSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = map[string]*loginSession{}
}

// Dump returns the whole state: tenant -> type -> objects sorted by name,
// rendered as GET with include_name shows them.
func (s *Server) Dump() map[string]map[string][]map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string][]map[string]any{}
	for tk := range s.st.byType {
		objs := s.objectsLocked(tk.tenant, tk.typ)
		if len(objs) == 0 {
			continue
		}
		if out[tk.tenant] == nil {
			out[tk.tenant] = map[string][]map[string]any{}
		}
		out[tk.tenant][tk.typ] = objs
	}
	return out
}

// Objects returns the objects of typ stored in tenant, sorted by name, as
// GET with include_name shows them.
func (s *Server) Objects(tenant, typ string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objectsLocked(tenant, typ)
}

func (s *Server) objectsLocked(tenant, typ string) []map[string]any {
	entries := s.st.byType[typeKey{tenant, typ}]
	out := make([]map[string]any, 0, len(entries))
	for _, e := range entries {
		out = append(out, s.st.render(e, s.host, true))
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(str(a["name"]), str(b["name"])) })
	return out
}

// Create stores an object as POST /api/<typ> in tenant would, bypassing
// faults and counters; tests use it to put objects in the way.
func (s *Server) Create(tenant, typ string, obj map[string]any) (map[string]any, error) {
	if _, ok := kinds[typ]; !ok {
		return nil, fmt.Errorf("avisim: unknown object type %q", typ)
	}
	body, err := normalizeJSON(obj)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, apiErr := s.st.create(tenant, typ, body, s.version)
	if apiErr != nil {
		return nil, apiErr
	}
	return s.st.render(e, s.host, true), nil
}

// Import stores an object as a controller returned it, for tests that
// start from a recorded controller state: its uuid, url, _last_modified and
// every field as given, references (full URLs of any host, with or without
// #name, or paths) kept as the paths they name. Nothing is checked or
// filled in; the references must name objects the simulator holds.
func (s *Server) Import(tenant, typ string, obj map[string]any) error {
	if _, ok := kinds[typ]; !ok {
		return fmt.Errorf("avisim: unknown object type %q", typ)
	}
	body, err := normalizeJSON(obj)
	if err != nil {
		return err
	}
	if str(body["uuid"]) == "" || str(body["name"]) == "" {
		return fmt.Errorf("avisim: import %s: an object needs its uuid and name", typ)
	}
	toPath := func(ref string) string {
		if i := strings.IndexByte(ref, '#'); i >= 0 {
			ref = ref[:i]
		}
		if i := strings.Index(ref, "://"); i >= 0 {
			if j := strings.IndexByte(ref[i+3:], '/'); j >= 0 {
				ref = ref[i+3+j:]
			}
		}
		return ref
	}
	walkRefs(body, func(ref string) (string, error) { return toPath(ref), nil })
	body["url"] = toPath(str(body["url"]))
	s.mu.Lock()
	defer s.mu.Unlock()
	home := tenantOf(tenant, typ)
	if s.st.byName[nameKey{home, typ, str(body["name"])}] != nil || s.st.byUUID[str(body["uuid"])] != nil {
		return fmt.Errorf("avisim: import %s %s: it exists", typ, body["name"])
	}
	e := &entry{tenant: home, typ: typ, obj: body}
	s.st.index(e)
	s.st.commit(e)
	return nil
}

// DeleteObject deletes an object as DELETE /api/<typ>/<uuid> in tenant
// would, bypassing faults and counters; tests use it to leave a load
// balancer half deleted.
func (s *Server) DeleteObject(tenant, typ, uuid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.st.remove(tenant, typ, uuid); err != nil {
		return err
	}
	return nil
}

// normalizeJSON turns a Go value into decoded JSON as a request body would
// be, so that numbers are json.Number and structs become maps.
func normalizeJSON(v any) (object, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("avisim: encode object: %w", err)
	}
	return decodeObject(bytes.NewReader(raw))
}

func decodeObject(r io.Reader) (object, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var obj object
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %w", err)
	}
	if obj == nil {
		return nil, errors.New("invalid JSON body: expected an object")
	}
	return obj, nil
}

// statusWriter remembers the status written, for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ServeHTTP answers every request itself: paths are normalised (//api/x/ is
// /api/x) and nothing is ever redirected, since Go's client turns a
// redirected POST into a GET.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := cleanPath(r.URL.Path)
	if path == "/sim" || strings.HasPrefix(path, "/sim/") {
		s.serveHooks(w, r, path)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() { s.record(r, path, sw.status) }()

	latency, status, msg := s.takeFaults(r.Method, path)
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-s.done:
			t.Stop()
			return
		}
	}
	if status != 0 {
		writeError(sw, status, msg)
		return
	}
	s.route(sw, r, path)
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, path string) {
	switch path {
	case "/login":
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "Method not allowed")
			return
		}
		s.login(w, r)
		return
	case "/logout":
		s.logout(w, r)
		return
	case "/api/initial-data":
		writeJSON(w, http.StatusOK, map[string]any{
			"version": map[string]any{"Version": s.opts.Version, "build": 9001, "Tag": s.opts.Version + "-9001"},
		})
		return
	case "/api/cluster/status":
		writeJSON(w, http.StatusOK, map[string]any{
			"cluster_state": map[string]any{"state": "CLUSTER_UP_NO_HA", "progress": 100},
			"node_states":   []any{map[string]any{"name": s.Host(), "role": "CLUSTER_LEADER", "state": "CLUSTER_ACTIVE"}},
		})
		return
	}
	rest, ok := strings.CutPrefix(path, "/api/")
	if !ok {
		writeError(w, http.StatusNotFound, "Not found")
		return
	}
	sess := s.authenticate(r)
	if sess == nil {
		writeError(w, http.StatusUnauthorized, "Authentication credentials were not provided.")
		return
	}
	if r.Method != http.MethodGet && r.Header.Get("X-CSRFToken") != sess.csrf {
		writeError(w, http.StatusForbidden, "CSRF Failed: CSRF token missing or incorrect.")
		return
	}
	version, msg := s.requestVersion(r)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if r.Method != http.MethodGet && s.isUpgrading() {
		// AKO's lib.AviControllerUpgradeError (internal/lib/constants.go).
		writeError(w, http.StatusForbidden, "Configuration is disallowed during upgrade")
		return
	}
	tenant := r.Header.Get("X-Avi-Tenant")
	if tenant == "" {
		tenant = adminTenant
	}
	parts := strings.Split(rest, "/")
	typ := parts[0]
	if _, known := kinds[typ]; !known || len(parts) > 2 {
		writeError(w, http.StatusNotFound, "Unknown resource "+path)
		return
	}
	s.mu.Lock()
	allowed := r.Method == http.MethodGet || s.mayWrite(sess.user, tenant, typ)
	s.mu.Unlock()
	if !allowed {
		forbidden(w, sess.user, typ)
		return
	}
	s.serveObjects(w, r, tenant, typ, parts[1:], version)
}

// requestVersion reads the X-Avi-Version of a request: the schema marks it
// required on every operation, and a controller answers no version newer
// than its own.
func (s *Server) requestVersion(r *http.Request) (avischema.Version, string) {
	h := r.Header.Get("X-Avi-Version")
	if h == "" {
		return avischema.Version{}, "X-Avi-Version header is required"
	}
	v, err := parseVersion(h)
	if err != nil {
		return v, err.Error()
	}
	if s.version.Less(v) {
		return v, fmt.Sprintf("X-Avi-Version %s is newer than the controller's version %s", h, s.opts.Version)
	}
	return v, ""
}

// SetUpgrading makes the controller refuse every change with 403
// "Configuration is disallowed during upgrade", as during an upgrade, or
// accept them again.
func (s *Server) SetUpgrading(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.upgrading = on
}

func (s *Server) isUpgrading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upgrading
}

// SchemaViolations counts the bodies refused because they broke the
// schema (avischema) or named an object of the wrong type, since the start.
func (s *Server) SchemaViolations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.violations
}

func (s *Server) authenticate(r *http.Request) *loginSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range []string{"avi-sessionid", "sessionid"} {
		if c, err := r.Cookie(name); err == nil {
			if sess := s.sessions[c.Value]; sess != nil {
				return sess
			}
		}
	}
	return nil
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var cred struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := json.NewDecoder(r.Body).Decode(&cred); err != nil {
		writeError(w, http.StatusUnauthorized, "Invalid credentials")
		return
	}
	host := r.Host
	if host == "" {
		host = s.Host()
	}
	s.mu.Lock()
	acct := s.findAccount(cred.Username, cred.Password)
	var (
		id, csrf string
		user     map[string]any
	)
	if acct != nil {
		id, csrf = randomHex(16), randomHex(16)
		s.sessions[id] = &loginSession{user: acct, csrf: csrf}
		user = s.loginUser(acct, host)
	}
	s.mu.Unlock()
	if acct == nil {
		writeError(w, http.StatusUnauthorized, "Invalid credentials")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: "csrftoken", Value: csrf, Path: "/", Secure: true})
	http.SetCookie(w, &http.Cookie{Name: "sessionid", Value: id, Path: "/", Secure: true, HttpOnly: true})
	http.SetCookie(w, &http.Cookie{Name: "avi-sessionid", Value: id, Path: "/", Secure: true, HttpOnly: true})
	writeJSON(w, http.StatusOK, map[string]any{
		"user":    user,
		"version": map[string]any{"Version": s.opts.Version},
	})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	for _, name := range []string{"avi-sessionid", "sessionid"} {
		if c, err := r.Cookie(name); err == nil {
			delete(s.sessions, c.Value)
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) serveObjects(w http.ResponseWriter, r *http.Request, tenant, typ string, rest []string, v avischema.Version) {
	host := r.Host
	if host == "" {
		host = s.Host()
	}
	includeName := isTrue(r.URL.Query(), "include_name")

	s.mu.Lock()
	tenantKnown := s.st.byName[nameKey{adminTenant, "tenant", tenant}] != nil
	s.mu.Unlock()
	if !tenantKnown {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Tenant %s not found", tenant))
		return
	}

	var body object
	if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
		var err error
		if body, err = decodeObject(r.Body); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if len(rest) == 0 {
		switch r.Method {
		case http.MethodGet:
			out, err := s.st.list(tenant, typ, host, r.URL.Query())
			if err != nil {
				writeError(w, err.status, err.msg)
				return
			}
			writeJSON(w, http.StatusOK, out)
		case http.MethodPost:
			e, err := s.st.create(tenant, typ, body, v)
			if err != nil {
				writeError(w, err.status, err.msg)
				return
			}
			writeJSON(w, http.StatusCreated, s.st.render(e, host, includeName))
		default:
			writeError(w, http.StatusMethodNotAllowed, "Method not allowed")
		}
		return
	}

	uuid := rest[0]
	var (
		e   *entry
		err *apiError
	)
	switch r.Method {
	case http.MethodGet:
		if e = s.st.lookupUUID(tenant, typ, uuid); e == nil {
			err = errorf(http.StatusNotFound, "%s object not found!", kinds[typ].display)
		}
	case http.MethodPut:
		e, err = s.st.replace(tenant, typ, uuid, body, v)
	case http.MethodPatch:
		e, err = s.st.patch(tenant, typ, uuid, body, v)
	case http.MethodDelete:
		if err = s.st.remove(tenant, typ, uuid); err == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	default:
		err = errorf(http.StatusMethodNotAllowed, "Method not allowed")
	}
	if err != nil {
		writeError(w, err.status, err.msg)
		return
	}
	writeJSON(w, http.StatusOK, s.st.render(e, host, includeName))
}
