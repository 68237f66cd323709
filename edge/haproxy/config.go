// Package haproxy holds what npl-edge knows of HAProxy itself: the load
// balancer model as HAProxy's proxies and back (model.go), the
// configuration it renders (and reads back), the runtime API of the admin
// socket and the master CLI, and the master-worker process it supervises.
// It knows nothing of HTTP or of npl-lbsync; package edge drives it.
package haproxy

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Checks are the health-check settings of every member: HAProxy connects to
// it every Inter, marks it down after Fall failures and up after Rise
// successes.
type Checks struct {
	Inter time.Duration
	Fall  int
	Rise  int
}

// DefaultChecks are the health-check settings when none are given.
var DefaultChecks = Checks{Inter: 2 * time.Second, Fall: 2, Rise: 1}

// Options returns the server keywords of a member's health check, the same
// in the configuration and in a runtime "add server" (dynamic servers do
// not inherit default-server settings in HAProxy 2.6).
func (c Checks) Options() string {
	return fmt.Sprintf("check inter %dms fall %d rise %d", c.Inter.Milliseconds(), c.Fall, c.Rise)
}

// Globals are the process-wide settings of the configuration.
type Globals struct {
	// AdminSocket is the path of the stats socket, at admin level. It does
	// not hand out listening sockets (no "expose-fd listeners"): the master
	// hands them to a new worker over its own socket pair.
	AdminSocket string
	// InvalidSocket is the path of the unix socket of the frontend that
	// answers 500 to every request: the invalid server of each backend
	// with an invalid share (InvalidServer) sends it there. Required when
	// a backend has an invalid share. HAProxy's master binds it before any
	// chroot; the workers connect to it from inside Chroot.
	InvalidSocket string
	// Chroot is the directory the workers chroot to (the "chroot" of the
	// host's own global section), which must hold InvalidSocket; empty
	// when they do not.
	Chroot string
	// Attached renders a configuration that HAProxy loads after the host's
	// own (Debian's haproxy.service with a second -f): no global section,
	// which is the host's and holds the admin socket, and an InvalidSocket
	// any user may connect to, as the workers may run as another one.
	Attached bool
	Checks   Checks
}

// InvalidServer is the name of the server of a backend that takes the
// backend's invalid share (Backend.InvalidWeight) of the requests and has
// them answered 500 by the frontend on Globals.InvalidSocket. No member's
// server (ServerName) has this name.
const InvalidServer = "npl_invalid"

// invalidFrontend is the name of the frontend on Globals.InvalidSocket; no
// load balancer's proxy has it (theirs hold "--").
const invalidFrontend = "npl_invalid"

// InvalidServerArgs are the words after the name of a backend's invalid
// server of weight w (HAProxy's, 1-256), the same in the configuration
// and in a runtime "add server": the frontend's socket, no health check
// (it answers as long as HAProxy runs), and the weight.
func (g Globals) InvalidServerArgs(w int32) string {
	path := g.InvalidSocket
	if g.Chroot != "" {
		// The same socket, seen from inside the chroot.
		path = "/" + strings.TrimPrefix(strings.TrimPrefix(path, g.Chroot), "/")
	}
	return "unix@" + path + " weight " + strconv.Itoa(int(w))
}

// Frontend is one listener: VIP:Port, in TCP mode for an L4 load
// balancer (DefaultBackend is its pool), in HTTP mode for an L7 one (Rules
// pick the backend, DefaultBackend serves the rest). A Gateway's load
// balancer also has TCP-mode frontends: a TCP listener (Listener TCP,
// DefaultBackend its pool) and a TLS listener (Listener TLS, SNI picks the
// backend; it terminates TLS when it has Certificates).
type Frontend struct {
	// Name is the listener's name: the pool name of an L4 listener,
	// lbmodel.ListenerName of an L7 one.
	Name string
	// Cluster, LoadBalancer, Service, Ingress and Gateway say whom the frontend
	// belongs to; the configuration keeps them in its description so that
	// it can be read back.
	Cluster      string
	LoadBalancer string
	Service      string
	Ingress      string
	Gateway      string
	HTTP         bool
	VIP          netip.Addr
	Port         int32
	// Rules are the L7 rules in the order HAProxy tries them.
	Rules          []lbmodel.Rule
	DefaultBackend string
	// Certificates, when any, terminate TLS on the listener (HTTPS, or
	// a terminating TLS listener): the first is the default, the others
	// are picked by SNI.
	Certificates []CertFile
	// Listener is the protocol of a TCP-mode listener of an L7 load
	// balancer (lbmodel.TCP or lbmodel.TLS); empty for the others.
	Listener lbmodel.Protocol
	// SNI are the routes of a TLS listener, in the order HAProxy tries
	// them (lbmodel.SortSNI). Each names its backend, the TCP-mode
	// copy of its pool (TLSBackendName).
	SNI []lbmodel.SNIRoute
	// ClientCA, on an HTTPS listener with Certificates, asks the clients
	// for a certificate and verifies it; nil asks for none.
	ClientCA *ClientCA
	// Hostnames are those of the Gateway listeners an HTTPS frontend
	// serves (lbmodel.Listener.Hostnames): a request whose Host another of
	// them takes than its TLS server name is answered 421.
	Hostnames []string
}

// ClientCA is the client certificate validation of an HTTPS frontend: the
// file of its CA certificates, and the model's validation it comes from.
type ClientCA struct {
	Path       string
	Validation lbmodel.ClientValidation
}

// bindWords are the words of ca's validation on a bind line: the CA file
// and verify required; with Optional, verify optional and every error of
// the client's chain ignored, so that a client without a certificate, or
// with one that fails, is served too.
func (ca *ClientCA) bindWords() string {
	s := " ca-file " + quote(ca.Path) + " verify required"
	if ca.Validation.Optional {
		s = " ca-file " + quote(ca.Path) + " verify optional ca-ignore-err all crt-ignore-err all"
	}
	return s
}

// CertFile is a certificate and key HAProxy loads from Path (the chain then
// the key, PEM), and what the configuration records of it.
type CertFile struct {
	Path string
	// Cert is the certificate without its PEM data: Secret, Hosts and
	// Fingerprint.
	Cert lbmodel.TLSCert
}

// Backend is one pool.
type Backend struct {
	Name         string
	Cluster      string
	LoadBalancer string
	HTTP         bool
	Members      []lbmodel.Member
	// InvalidWeight is the pool's lbmodel.Pool.InvalidWeight: the weight
	// of its invalid server (InvalidServer), none when 0.
	InvalidWeight int32
	// AppProtocol is the pool's lbmodel.Pool.AppProtocol: with
	// lbmodel.AppProtocolH2C its members' servers speak HTTP/2 (proto
	// h2).
	AppProtocol string
	// Pool is, for the TCP-mode copy of an L7 load balancer's pool that
	// its TLS listeners forward to, the pool's name; empty otherwise.
	Pool string
	// Policy is the pool's traffic policy (policy.go); nil: round robin
	// and the edge's health check.
	Policy *lbmodel.Policy
	// IPv6 says that the clients come to an IPv6 VIP: the type of a
	// table of their addresses (source persistence).
	IPv6 bool
	// CAFile is the file of the CA certificates of the policy's backend
	// TLS, unless it trusts the system's.
	CAFile string
}

// TLSBackendName is the name of the TCP-mode copy of the pool named pool,
// the backend of the TLS listeners' routes: HAProxy cannot send a TCP
// stream to the HTTP-mode backend its HTTP rules use. The ":" is in no
// Kubernetes name, so no pool has this name.
func TLSBackendName(pool string) string { return pool + ":tls" }

// ServerOptions are the keywords of a member's server in backend b, the
// same in the configuration and in a runtime "add server": the health
// check (its timing from the policy, else c), the rest of the pool's policy
// (policy.go), and HTTP/2 for an h2c pool.
func (b Backend) ServerOptions(c Checks) string {
	s := b.serverPolicy(c)
	if b.AppProtocol == lbmodel.AppProtocolH2C {
		s += " proto h2"
	}
	return s
}

// ServerArgs are the words after the name of member m's server in backend
// b, the same in the configuration and in a runtime "add server": its
// address, ServerOptions, and its weight unless it is the default.
func (b Backend) ServerArgs(m lbmodel.Member, c Checks) string {
	s := Address(m.IP, m.Port) + " " + b.ServerOptions(c)
	if m.Weight != 0 {
		s += " weight " + strconv.Itoa(int(m.Weight))
	}
	return s
}

// Proxies are the frontends and backends of a configuration.
type Proxies struct {
	Frontends []Frontend
	Backends  []Backend
}

// ServerName is the name of a member's server in its backend.
func ServerName(m lbmodel.Member) string {
	return m.IP + "_" + strconv.Itoa(int(m.Port))
}

// Address is ip:port as HAProxy parses it (the last colon separates the
// port, so IPv6 needs no brackets).
func Address(ip string, port int32) string { return ip + ":" + strconv.Itoa(int(port)) }

// Rendered is a configuration and what tells its parts apart.
type Rendered struct {
	// Text is the whole configuration.
	Text []byte
	// Frame is the configuration without its server lines: when it changes,
	// HAProxy needs a reload; when only the servers change, the runtime API
	// applies them and the file is rewritten for the next start.
	Frame string
	// Objects maps a 1-based line number of Text to the object it belongs
	// to ("load balancer X (proxy Y)"), so that an error of HAProxy that
	// names a line names the object.
	Objects map[int]string
}

// Render writes the configuration of p. Members that drain are rendered
// disabled, so a started or reloaded HAProxy sends them nothing new; the
// runtime API then sets their drain state. The invalid server of a backend
// with an invalid share is a server line too (outside the frame), so that
// the share comes and goes and changes through the runtime API; the
// frontend it sends to is always there.
func Render(g Globals, p Proxies) Rendered {
	fronts := slices.Clone(p.Frontends)
	slices.SortFunc(fronts, func(a, b Frontend) int { return cmp.Compare(a.Name, b.Name) })
	backs := slices.Clone(p.Backends)
	slices.SortFunc(backs, func(a, b Backend) int { return cmp.Compare(a.Name, b.Name) })
	var text, frame bytes.Buffer
	objects := map[int]string{}
	line := 0
	emit := func(object, s string, server bool) {
		line++
		text.WriteString(s)
		text.WriteByte('\n')
		if object != "" {
			objects[line] = object
		}
		if !server {
			frame.WriteString(s)
			frame.WriteByte('\n')
		}
	}
	emit("", "# Written by npl-edge; it replaces this file at every change.", false)
	if !g.Attached {
		emit("", "global", false)
		emit("", fmt.Sprintf("    stats socket %s mode 600 level admin", g.AdminSocket), false)
		emit("", "    stats timeout 30s", false)
		// A worker replaced by a reload ends its last connections after
		// this, so that reloads do not pile up old processes.
		emit("", "    hard-stop-after 10m", false)
	}
	emit("", "defaults", false)
	emit("", "    mode tcp", false)
	emit("", "    timeout connect 3s", false)
	emit("", "    timeout client 1h", false)
	emit("", "    timeout server 1h", false)
	emit("", "    timeout http-request 30s", false)
	// A connection a member refuses (its Pod just went) is tried again on
	// another member rather than failed.
	emit("", "    retries 3", false)
	emit("", "    option redispatch", false)
	if g.InvalidSocket != "" {
		emit("", "# The invalid share of each pool (its invalid server) is answered 500 here.", false)
		emit("", "frontend "+invalidFrontend, false)
		emit("", "    mode http", false)
		mode := "600"
		if g.Attached {
			mode = "666"
		}
		emit("", "    bind unix@"+g.InvalidSocket+" mode "+mode, false)
		emit("", "    http-request return status 500", false)
	}
	for _, l := range caFileLines(backs) {
		emit("", l, false)
	}
	for _, f := range fronts {
		obj := fmt.Sprintf("load balancer %s (proxy %s)", f.LoadBalancer, f.Name)
		desc := fmt.Sprintf("    description npl cluster=%s lb=%s service=%s", f.Cluster, f.LoadBalancer, f.Service)
		if f.Ingress != "" || f.HTTP {
			desc += " ingress=" + f.Ingress
		}
		if f.Gateway != "" {
			desc += " gateway=" + f.Gateway
		}
		if f.Listener != "" {
			desc += " listener=" + string(f.Listener)
		}
		emit(obj, "frontend "+f.Name, false)
		emit(obj, desc, false)
		if f.HTTP {
			emit(obj, "    mode http", false)
		}
		bind := "    bind " + Address(f.VIP.String(), f.Port)
		if len(f.Certificates) > 0 {
			// The first certificate is the default; HAProxy picks the
			// others by SNI, from the names they hold.
			bind += " ssl"
			for _, c := range f.Certificates {
				bind += " crt " + quote(c.Path)
				emit(obj, "    "+tlsComment+jsonLine(c.Cert), false)
			}
			if f.HTTP {
				// HTTP/2 for the clients that offer it (gRPC among
				// them); clear-text frontends detect its preface.
				bind += " alpn h2,http/1.1"
			}
			if f.ClientCA != nil {
				emit(obj, "    "+clientComment+jsonLine(f.ClientCA.Validation), false)
				bind += f.ClientCA.bindWords()
			}
		}
		emit(obj, bind, false)
		if f.HTTP {
			renderRules(f, func(s string) { emit(obj, s, false) })
		}
		if f.Listener == lbmodel.TLS {
			renderSNI(f, func(s string) { emit(obj, s, false) })
		}
		if f.DefaultBackend != "" {
			emit(obj, "    default_backend "+f.DefaultBackend, false)
		}
	}
	for _, b := range backs {
		obj := fmt.Sprintf("load balancer %s (proxy %s)", b.LoadBalancer, b.Name)
		emit(obj, "backend "+b.Name, false)
		desc := fmt.Sprintf("    description npl cluster=%s lb=%s", b.Cluster, b.LoadBalancer)
		if b.AppProtocol != "" {
			desc += " app=" + b.AppProtocol
		}
		if b.Pool != "" {
			desc += " pool=" + b.Pool
		}
		emit(obj, desc, false)
		if b.HTTP {
			emit(obj, "    mode http", false)
		}
		for _, l := range b.policyLines() {
			emit(obj, l, false)
		}
		for _, m := range b.Members {
			s := "    server " + ServerName(m) + " " + b.ServerArgs(m, g.Checks)
			if !m.Enabled {
				s += " disabled"
			}
			emit(obj, s, true)
		}
		if b.InvalidWeight > 0 {
			emit(obj, "    server "+InvalidServer+" "+g.InvalidServerArgs(b.InvalidWeight), true)
		}
	}
	return Rendered{Text: text.Bytes(), Frame: frame.String(), Objects: objects}
}

// isSection reports whether a line's first word starts a section of an
// HAProxy configuration.
func isSection(word string) bool {
	switch word {
	case "global", "defaults", "frontend", "backend", "listen", "peers", "resolvers", "userlist", "program", "mailers",
		"cache", "ring", "http-errors":
		return true
	}
	return false
}

// Parse reads back a configuration Render wrote: its frontends (with their
// rules) and backends with their members as configured. Sections it did not
// write (no npl description) are skipped.
func Parse(text []byte) (Proxies, error) {
	fronts := map[string]*Frontend{}
	backs := map[string]*Backend{}
	var section, name string
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if isSection(fields[0]) {
			section, name = fields[0], ""
			if len(fields) > 1 {
				name = fields[1]
			}
			switch {
			case section == "frontend" && name == invalidFrontend:
				// No load balancer's: it answers the invalid shares.
			case section == "frontend":
				fronts[name] = &Frontend{Name: name}
			case section == "backend":
				backs[name] = &Backend{Name: name}
			}
			continue
		}
		f, b := fronts[name], backs[name]
		if section == "frontend" && f != nil {
			switch {
			case fields[0] == "description" && len(fields) > 1 && fields[1] == "npl":
				kv := keyValues(fields[2:])
				f.Cluster, f.LoadBalancer, f.Service, f.Ingress, f.Gateway = kv["cluster"], kv["lb"], kv["service"], kv["ingress"], kv["gateway"]
				f.Listener = lbmodel.Protocol(kv["listener"])
			case fields[0] == "mode" && len(fields) > 1:
				f.HTTP = fields[1] == "http"
			case fields[0] == "bind" && len(fields) > 1:
				ip, port, err := splitAddress(fields[1])
				if err != nil {
					return Proxies{}, fmt.Errorf("line %d: frontend %s: %w", n, name, err)
				}
				f.VIP, f.Port = ip, port
				ws, _ := Words(line)
				k := 0
				for i := 0; i+1 < len(ws); i++ {
					switch {
					case ws[i] == "crt" && k < len(f.Certificates):
						f.Certificates[k].Path = ws[i+1]
						k++
					case ws[i] == "ca-file" && f.ClientCA != nil:
						f.ClientCA.Path = ws[i+1]
					}
				}
			case strings.HasPrefix(line, tlsComment):
				var c lbmodel.TLSCert
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, tlsComment)), &c); err != nil {
					return Proxies{}, fmt.Errorf("line %d: frontend %s: certificate: %w", n, name, err)
				}
				f.Certificates = append(f.Certificates, CertFile{Cert: c})
			case fields[0] == "default_backend" && len(fields) > 1:
				f.DefaultBackend = fields[1]
			case strings.HasPrefix(line, ruleComment):
				var r lbmodel.Rule
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, ruleComment)), &r); err != nil {
					return Proxies{}, fmt.Errorf("line %d: frontend %s: rule: %w", n, name, err)
				}
				f.Rules = append(f.Rules, r)
			case strings.HasPrefix(line, clientComment):
				var v lbmodel.ClientValidation
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, clientComment)), &v); err != nil {
					return Proxies{}, fmt.Errorf("line %d: frontend %s: client validation: %w", n, name, err)
				}
				f.ClientCA = &ClientCA{Validation: v}
			case strings.HasPrefix(line, hostnamesComment):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, hostnamesComment)), &f.Hostnames); err != nil {
					return Proxies{}, fmt.Errorf("line %d: frontend %s: hostnames: %w", n, name, err)
				}
			case strings.HasPrefix(line, sniComment):
				var r lbmodel.SNIRoute
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, sniComment)), &r); err != nil {
					return Proxies{}, fmt.Errorf("line %d: frontend %s: SNI route: %w", n, name, err)
				}
				f.SNI = append(f.SNI, r)
			}
			continue
		}
		if section == "backend" && b != nil {
			switch {
			case fields[0] == "description" && len(fields) > 1 && fields[1] == "npl":
				kv := keyValues(fields[2:])
				b.Cluster, b.LoadBalancer, b.AppProtocol, b.Pool = kv["cluster"], kv["lb"], kv["app"], kv["pool"]
			case fields[0] == "mode" && len(fields) > 1:
				b.HTTP = fields[1] == "http"
			case strings.HasPrefix(line, policyComment):
				var p lbmodel.Policy
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, policyComment)), &p); err != nil {
					return Proxies{}, fmt.Errorf("line %d: backend %s: policy: %w", n, name, err)
				}
				b.Policy = &p
			case fields[0] == "stick-table" && len(fields) > 2:
				b.IPv6 = fields[2] == "ipv6"
			case fields[0] == "server" && len(fields) > 2 && fields[1] == InvalidServer:
				w, err := serverWeight(fields)
				if err != nil {
					return Proxies{}, fmt.Errorf("line %d: backend %s: %w", n, name, err)
				}
				b.InvalidWeight = w
			case fields[0] == "server" && len(fields) > 2:
				ip, port, err := splitAddress(fields[2])
				if err != nil {
					return Proxies{}, fmt.Errorf("line %d: backend %s: %w", n, name, err)
				}
				m := lbmodel.Member{IP: ip.String(), Port: port, Enabled: !slices.Contains(fields[3:], "disabled")}
				if ws, _ := Words(line); slices.Contains(ws[:len(ws)-1], "ca-file") {
					if ca := ws[slices.Index(ws, "ca-file")+1]; ca != "@system-ca" {
						b.CAFile = ca
					}
				}
				if m.Weight, err = serverWeight(fields); err != nil {
					return Proxies{}, fmt.Errorf("line %d: backend %s: %w", n, name, err)
				}
				b.Members = append(b.Members, m)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Proxies{}, err
	}
	var out Proxies
	for _, f := range fronts {
		if f.LoadBalancer != "" { // ours
			out.Frontends = append(out.Frontends, *f)
		}
	}
	for _, b := range backs {
		if b.LoadBalancer == "" {
			continue
		}
		b.Members = lbmodel.SortMembers(b.Members)
		if b.Members == nil {
			b.Members = []lbmodel.Member{}
		}
		out.Backends = append(out.Backends, *b)
	}
	slices.SortFunc(out.Frontends, func(a, b Frontend) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Backends, func(a, b Backend) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// serverWeight is the weight a server line (its fields) gives, 0 when it
// gives none.
func serverWeight(fields []string) (int32, error) {
	i := slices.Index(fields, "weight")
	if i < 0 || i+1 >= len(fields) {
		return 0, nil
	}
	w, err := strconv.ParseInt(fields[i+1], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("weight %q", fields[i+1])
	}
	return int32(w), nil
}

// Words splits a configuration line into words as HAProxy's parser does:
// blanks separate words, single quotes hold anything, double quotes
// anything but a backslash escape, a backslash outside single quotes
// escapes the next character, and a "#" outside quotes starts a comment
// (comment reports one, which ends the line). Parse reads what Render
// writes with it; FuzzRenderModel checks with it that nothing rendered
// adds a word HAProxy would read.
func Words(line string) (words []string, comment bool) {
	var w strings.Builder
	inWord, single, double := false, false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case single && c == '\'':
			single = false
		case single:
			w.WriteByte(c)
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case double && c == '"':
			double = false
		case double:
			w.WriteByte(c)
		case c == '\'':
			single, inWord = true, true
		case c == '"':
			double, inWord = true, true
		case c == '#':
			if inWord {
				words = append(words, w.String())
			}
			return words, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, false
}

// keyValues reads key=value words; a value may be empty.
func keyValues(words []string) map[string]string {
	kv := map[string]string{}
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		kv[k] = v
	}
	return kv
}

// splitAddress parses ip:port, the last colon separating the port.
func splitAddress(s string) (netip.Addr, int32, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.Addr{}, 0, fmt.Errorf("address %q has no port", s)
	}
	ip, err := netip.ParseAddr(strings.Trim(s[:i], "[]"))
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("address %q: %w", s, err)
	}
	port, err := strconv.ParseUint(s[i+1:], 10, 16)
	if err != nil || port == 0 {
		return netip.Addr{}, 0, fmt.Errorf("address %q: bad port", s)
	}
	return ip.Unmap(), int32(port), nil
}
