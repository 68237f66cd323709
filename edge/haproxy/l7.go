package haproxy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
)

// The L7 rules of an HTTP frontend, rendered in three passes: per rule,
// named ACLs for its tests and an "http-request set-var" that records the
// first rule whose tests all pass (txn.npl_rule, its index); then the
// actions of the chosen rule (CORS, header filters, rewrites, redirect,
// fixed status); then use_backend on the chosen rule. Named ACLs keep every value
// a pattern of its own (after "--"), so that no value can end an anonymous
// ACL or pass for a flag.

const ruleVar = "txn.npl_rule"

// requestHost is the sample expression of the request's host: the Host
// header without its port (an IPv6 literal keeps its brackets).
const requestHost = "req.hdr(host),regsub(:[0-9]+$,)"

// Comment prefixes of what the configuration records of a frontend: the
// model's JSON of each rule and certificate, so that Parse reads back
// exactly what was rendered.
const (
	ruleComment = "# npl rule "
	tlsComment  = "# npl tls "
	sniComment  = "# npl sni "
	// clientComment records an HTTPS frontend's client certificate
	// validation (lbmodel.ClientValidation).
	clientComment = "# npl client-validation "
	// hostnamesComment records an HTTPS frontend's listener hostnames
	// (lbmodel.Listener.Hostnames).
	hostnamesComment = "# npl hostnames "
)

// quote writes s as one word of HAProxy's configuration: single-quoted
// (nothing is special inside), a single quote written as '\” (HAProxy
// joins the quoted and escaped parts of a word, as a shell does).
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fetchArg escapes s for the argument list of a sample fetch, which treats
// quotes, backslashes, commas and parentheses.
func fetchArg(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\'",()`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// logFormat escapes literal text for a log-format string (a header value,
// a redirect location), where % starts a variable.
func logFormat(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// jsonLine is v as JSON on one line (JSON escapes newlines).
func jsonLine(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the model's types always marshal
	}
	return string(b)
}

// hostTest is the ACL test of host (a name or a wildcard *.name, not
// empty) on fetch, a lower-case sample: the name exactly; for a wildcard,
// one label before its suffix, or one or more when manyLabels (Gateway
// API's wildcard hostnames).
func hostTest(fetch, host string, manyLabels bool) string {
	if !strings.HasPrefix(host, "*.") {
		return quote(fetch) + " -m str -- " + quote(strings.ToLower(host))
	}
	labels := "[^.]+"
	if manyLabels {
		labels = ".+"
	}
	return quote(fetch) + " -m reg -- " + quote("^"+labels+regexp.QuoteMeta(strings.ToLower(host[1:]))+"$")
}

// Variables of the misdirected request check: the index in
// Frontend.Hostnames of the listener the TLS server name selected, and of
// the one the Host header selects.
const (
	sniListenerVar  = "txn.npl_sni_listener"
	hostListenerVar = "txn.npl_host_listener"
)

// renderMisdirected writes the check of an HTTPS frontend f whose port
// serves several Gateway listeners (f.Hostnames, most specific first): the
// first hostname the server name matches selects the connection's
// listener, the first the Host header matches the request's, and a request
// whose listener is not its connection's is answered 421 (Misdirected
// Request), as Gateway API asks (a client that reuses a connection for a
// host another listener serves). A listener without hostname takes every
// name; without a server name, or a Host no listener takes, nothing is
// misdirected: the request gets its rule, or 404.
func renderMisdirected(f Frontend, emit func(string)) {
	if len(f.Hostnames) < 2 || len(f.Certificates) == 0 {
		return
	}
	emit("    " + hostnamesComment + jsonLine(f.Hostnames))
	for i, h := range f.Hostnames {
		id := "npl_l" + strconv.Itoa(i)
		sni, host := "{ ssl_fc_sni -m found }", ""
		if h != "" {
			emit("    acl " + id + "_sni " + hostTest("ssl_fc_sni,lower", h, true))
			emit("    acl " + id + "_host " + hostTest(requestHost+",lower", h, true))
			sni, host = id+"_sni", " "+id+"_host"
		}
		emit(fmt.Sprintf("    http-request set-var(%s) int(%d) if !{ var(%s) -m found } %s", sniListenerVar, i, sniListenerVar, sni))
		emit(fmt.Sprintf("    http-request set-var(%s) int(%d) if !{ var(%s) -m found }%s", hostListenerVar, i, hostListenerVar, host))
	}
	emit(fmt.Sprintf("    http-request return status 421 if { var(%s) -m found } { var(%s) -m found } !{ var(%s),sub(%s) -m int 0 }",
		sniListenerVar, hostListenerVar, sniListenerVar, hostListenerVar))
}

// renderRules writes the rules of an HTTP frontend f with emit.
func renderRules(f Frontend, emit func(string)) {
	https := len(f.Certificates) > 0
	renderMisdirected(f, emit)
	for i, r := range f.Rules {
		emit("    " + ruleComment + jsonLine(r))
		id := "npl_r" + strconv.Itoa(i)
		conds := []string{"!{ var(" + ruleVar + ") -m found }"}
		acl := func(name, test string) {
			emit("    acl " + id + name + " " + test)
		}
		if r.Host != "" {
			// One label before a wildcard's suffix for an Ingress, one or
			// more for a Gateway (Gateway API's wildcard hostnames).
			acl("_host", hostTest(requestHost+",lower", r.Host, f.Gateway != ""))
			conds = append(conds, id+"_host")
		}
		pathAll := false
		if r.PathType == lbmodel.PathRegex {
			acl("_path", "path -m reg -- "+quote("^(?:"+r.Path+")$"))
		} else {
			for _, m := range r.PathMatches() {
				switch {
				case m.Prefix && m.Path == "/":
					pathAll = true
				case m.Prefix:
					acl("_path", "path_beg -- "+quote(m.Path))
				default:
					acl("_path", "path -m str -- "+quote(m.Path))
				}
			}
		}
		if !pathAll {
			conds = append(conds, id+"_path")
		}
		if r.Method != "" {
			acl("_method", "method -m str -- "+quote(r.Method))
			conds = append(conds, id+"_method")
		}
		for j, h := range r.Headers {
			acl("_h"+strconv.Itoa(j), valueTest("req.fhdr("+fetchArg(h.Name)+")", h))
			conds = append(conds, id+"_h"+strconv.Itoa(j))
		}
		for j, q := range r.Query {
			acl("_q"+strconv.Itoa(j), valueTest("url_param("+fetchArg(q.Name)+")", q))
			conds = append(conds, id+"_q"+strconv.Itoa(j))
		}
		emit(fmt.Sprintf("    http-request set-var(%s) int(%d) if %s", ruleVar, i, strings.Join(conds, " ")))
	}
	for i, r := range f.Rules {
		sel := "npl_sel" + strconv.Itoa(i)
		emit(fmt.Sprintf("    acl %s var(%s) -m int %d", sel, ruleVar, i))
		if c := r.CORS; c != nil {
			// Before the header filters: the client's Origin counts, and
			// a preflight request is answered whatever else the rule does.
			renderCORSRequest(c, i, sel, emit)
		}
		if h := r.RequestHeaders; h != nil {
			headerFilter("http-request", h, sel, emit)
		}
		if w := r.Rewrite; w != nil {
			if w.Hostname != "" {
				emit("    http-request set-header host " + quote(logFormat(w.Hostname)) + " if " + sel)
			}
			if w.Path != nil {
				pathModifier(r, i, w.Path, sel, emit)
			}
		}
		if d := r.Redirect; d != nil {
			if d.Path != nil {
				pathModifier(r, i, d.Path, sel, emit)
			}
			emit(fmt.Sprintf("    http-request redirect location %s code %d if %s", quote(location(d, https, f.Port)), d.StatusCode, sel))
		}
		if r.FixedStatus != 0 {
			emit(fmt.Sprintf("    http-request return status %d if %s", r.FixedStatus, sel))
		}
		renderPick(r, i, emit)
	}
	if f.DefaultBackend == "" {
		// Gateway API and Ingress controllers answer 404 to a request no
		// rule matches (HAProxy would answer 503, no backend).
		emit(fmt.Sprintf("    http-request return status 404 if !{ var(%s) -m found }", ruleVar))
	}
	for i, r := range f.Rules {
		if h := r.ResponseHeaders; h != nil {
			// After-response rules also change the answers HAProxy makes
			// itself (redirects, fixed statuses).
			headerFilter("http-after-response", h, "npl_sel"+strconv.Itoa(i), emit)
		}
		if c := r.CORS; c != nil {
			renderCORSResponse(c, "npl_sel"+strconv.Itoa(i), emit)
		}
	}
	for i, r := range f.Rules {
		if r.Pool != "" {
			emit("    use_backend " + r.Pool + " if npl_sel" + strconv.Itoa(i))
		}
		for j, b := range r.Backends {
			if b.Pool != "" {
				emit("    use_backend " + b.Pool + " if " + pickSel(i, j))
			}
		}
	}
}

// pickVar holds the number drawn for the rule chosen, when it splits its
// requests between backends (Rule.Backends).
const pickVar = "txn.npl_pick"

// pickSel is the condition of backend j of rule i: the rule chosen, and the
// number drawn in the backend's range (renderPick).
func pickSel(i, j int) string {
	return "npl_sel" + strconv.Itoa(i) + " npl_pick" + strconv.Itoa(i) + "_" + strconv.Itoa(j)
}

// renderPick writes, for rule r (index i) with backends, the draw of a
// number below the sum of their weights, an ACL per backend for its range
// of numbers, its request header filter (after the rule's) and, for a
// share without a pool, the answer 500.
func renderPick(r lbmodel.Rule, i int, emit func(string)) {
	if len(r.Backends) == 0 {
		return
	}
	var total int64
	for _, b := range r.Backends {
		total += int64(b.Weight)
	}
	emit(fmt.Sprintf("    http-request set-var(%s) rand(%d) if npl_sel%d", pickVar, total, i))
	var low int64
	for j, b := range r.Backends {
		high := low + int64(b.Weight) - 1
		emit(fmt.Sprintf("    acl npl_pick%d_%d var(%s) -m int %d:%d", i, j, pickVar, low, high))
		low = high + 1
		if h := b.RequestHeaders; h != nil {
			headerFilter("http-request", h, pickSel(i, j), emit)
		}
		if b.Pool == "" {
			emit("    http-request return status 500 if " + pickSel(i, j))
		}
	}
}

// valueTest is the ACL test of a header or query parameter match on fetch.
func valueTest(fetch string, m lbmodel.ValueMatch) string {
	switch {
	case m.Regex:
		return quote(fetch) + " -m reg -- " + quote("^(?:"+m.Value+")$")
	case m.Value == "":
		return quote(fetch) + " -m len 0"
	}
	return quote(fetch) + " -m str -- " + quote(m.Value)
}

// headerFilter writes the set, add and del rules of a header filter for
// the rule selected by ACL sel; directive is http-request or
// http-after-response.
func headerFilter(directive string, h *lbmodel.HeaderFilter, sel string, emit func(string)) {
	for _, x := range h.Set {
		emit("    " + directive + " set-header " + quote(x.Name) + " " + quote(logFormat(x.Value)) + " if " + sel)
	}
	for _, x := range h.Add {
		emit("    " + directive + " add-header " + quote(x.Name) + " " + quote(logFormat(x.Value)) + " if " + sel)
	}
	for _, n := range h.Remove {
		emit("    " + directive + " del-header " + quote(n) + " if " + sel)
	}
}

// pathModifier writes the path change of rule r (index i), selected by
// sel: a whole new path, or the prefix the rule matched replaced. The
// query string stays.
func pathModifier(r lbmodel.Rule, i int, m *lbmodel.PathModifier, sel string, emit func(string)) {
	if m.Type == lbmodel.ReplaceFullPath {
		emit("    http-request set-path " + quote(logFormat(m.Value)) + " if " + sel)
		return
	}
	// ReplacePrefixMatch: the path equal to the prefix becomes the
	// replacement ("/" for an empty one); a path under it keeps what
	// follows the prefix, "/" included, after the replacement without its
	// trailing "/".
	exact := "npl_r" + strconv.Itoa(i) + "_prefix"
	emit("    acl " + exact + " path -m str -- " + quote(r.Path))
	whole := m.Value
	if whole == "" {
		whole = "/"
	}
	emit("    http-request set-path " + quote(logFormat(whole)) + " if " + sel + " " + exact)
	prefix := strings.TrimSuffix(r.Path, "/")
	emit("    http-request replace-path " + quote("^"+regexp.QuoteMeta(prefix)+"(/.*)$") + " " +
		quote(logFormat(strings.TrimSuffix(m.Value, "/"))+`\1`) + " if " + sel + " !" + exact)
}

// location is the log-format of the Location of redirect d on a listener
// of port (https when it terminates TLS): the request's URL with d's parts
// replaced. With neither scheme nor port, the port is the listener's; with
// a scheme only, the scheme's; a scheme's default port is left out.
func location(d *lbmodel.Redirect, https bool, port int32) string {
	scheme := "http"
	if https {
		scheme = "https"
	}
	if d.Scheme != "" {
		scheme = d.Scheme
	}
	p := d.Port
	if p == 0 {
		p = port
		if d.Scheme != "" {
			p = defaultPort(d.Scheme)
		}
	}
	host := "%[" + requestHost + "]"
	if d.Hostname != "" {
		host = logFormat(d.Hostname)
	}
	loc := scheme + "://" + host
	if p != defaultPort(scheme) {
		loc += ":" + strconv.Itoa(int(p))
	}
	// The path after any path modifier, with the query.
	return loc + "%[pathq]"
}

func defaultPort(scheme string) int32 {
	if scheme == "https" {
		return 443
	}
	return 80
}

// sniInspectDelay bounds how long a passthrough TLS listener waits for the
// ClientHello that names the server.
const sniInspectDelay = "5s"

// renderSNI writes the routes of a TLS listener f with emit: a passthrough
// listener reads the server name from the ClientHello it waits for
// (req.ssl_sni), a terminating one from the handshake it made
// (ssl_fc_sni). The routes are tried in order; the route for every name
// (empty host) is the default backend. A connection no route takes has no
// backend: HAProxy closes it.
func renderSNI(f Frontend, emit func(string)) {
	fetch := "ssl_fc_sni,lower"
	if len(f.Certificates) == 0 {
		fetch = "req.ssl_sni,lower"
		emit("    tcp-request inspect-delay " + sniInspectDelay)
		emit("    tcp-request content accept if { req.ssl_hello_type 1 }")
	}
	for i, r := range f.SNI {
		emit("    " + sniComment + jsonLine(r))
		backend := TLSBackendName(r.Pool)
		id := "npl_s" + strconv.Itoa(i)
		if r.Host == "" {
			emit("    use_backend " + backend)
			continue
		}
		// One or more labels, as Gateway API's wildcard hostnames.
		emit("    acl " + id + " " + hostTest(fetch, r.Host, true))
		emit("    use_backend " + backend + " if " + id)
	}
}
