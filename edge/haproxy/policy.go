package haproxy

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
)

// A pool's traffic policy (lbmodel.Policy) as HAProxy's backend: its
// algorithm, persistence, health check, timeouts and retries are lines of
// the backend (the frame: a change reloads); the check's timing, slow
// start, the connection cap and TLS to the members are keywords of every
// server, the same in the configuration and in a runtime "add server"
// (ServerArgs), so that a member added without a reload has them too.
// HAProxy 2.6 accepts each of them in "add server", but for "cookie":
// cookie persistence uses dynamic cookies (a hash of a key, the server's
// address and port), which "set dynamic-cookie-key" computes for a server
// added at runtime (DynamicCookieCommand).

// policyComment prefixes the model's JSON of a backend's policy, so that
// Parse reads back exactly the policy rendered.
const policyComment = "# npl policy "

// stickTableSize bounds the entries of a persistence table (source
// addresses or header values); HAProxy allocates them as they come and
// drops the least recently used beyond it, so that clients sending new
// addresses or header values (an IPv6 prefix holds plenty) cost an edge
// at most some tens of megabytes per pool.
const stickTableSize = "100k"

// policyLines are the lines of backend b that its policy renders, in
// order: the policy's JSON, the balance algorithm, persistence, the health
// check, timeouts and retries. A backend without policy gets round robin.
func (b Backend) policyLines() []string {
	p := b.Policy
	if p == nil {
		return []string{"    balance roundrobin"}
	}
	out := []string{"    " + policyComment + jsonLine(p)}
	out = append(out, balanceLines(p.Algorithm)...)
	if s := p.Persistence; s != nil {
		switch s.Type {
		case lbmodel.PersistSourceIP:
			out = append(out, "    stick-table type "+b.addressTable()+" size "+stickTableSize+expire(s.TimeoutSeconds), "    stick on src")
		case lbmodel.PersistHeader:
			// The table's entries expire after a time without requests:
			// the idle timeout, else the lifetime counted the same way.
			t := s.IdleTimeoutSeconds
			if t == 0 {
				t = s.TimeoutSeconds
			}
			out = append(out, "    stick-table type string len 128 size "+stickTableSize+expire(t),
				"    stick on "+quote("req.hdr("+fetchArg(s.Name)+")"))
		case lbmodel.PersistCookie:
			c := "    cookie " + quote(s.Name) + " insert indirect nocache dynamic"
			if s.TimeoutSeconds > 0 {
				c += " maxlife " + strconv.Itoa(int(s.TimeoutSeconds)) + "s"
			}
			if s.IdleTimeoutSeconds > 0 {
				c += " maxidle " + strconv.Itoa(int(s.IdleTimeoutSeconds)) + "s"
			}
			if s.Permanent {
				c += " attr " + quote("Max-Age="+strconv.Itoa(int(s.TimeoutSeconds)))
			}
			out = append(out, c, "    dynamic-cookie-key "+quote(b.cookieKey()))
		}
	}
	if c := b.check(); c != nil {
		if c.Type == lbmodel.CheckHTTP {
			send := "    http-check send meth GET uri " + quote(c.Path)
			if c.Host != "" {
				send += " ver HTTP/1.1 hdr Host " + quote(c.Host)
			}
			out = append(out, "    option httpchk", send)
			if len(c.ExpectedStatuses) > 0 {
				out = append(out, "    http-check expect rstatus "+quote(statusRegex(c.ExpectedStatuses)))
			}
		}
		if c.TimeoutSeconds > 0 {
			out = append(out, "    timeout check "+strconv.Itoa(int(c.TimeoutSeconds))+"s")
		}
	}
	if b.HTTP {
		out = append(out, timeoutLines(p.Timeouts, p.Retry)...)
	}
	return out
}

// balanceLines are the algorithm's lines; a hash is consistent, so that a
// member added or gone moves few keys, and dynamic, as "add server" needs.
func balanceLines(a *lbmodel.Algorithm) []string {
	switch {
	case a == nil || a.Type == lbmodel.RoundRobin:
		return []string{"    balance roundrobin"}
	case a.Type == lbmodel.LeastConnections:
		return []string{"    balance leastconn"}
	}
	var by string
	switch a.HashOn {
	case lbmodel.HashSourceIP:
		by = "source"
	case lbmodel.HashHeader:
		// HAProxy takes what is between the parentheses as is: a token
		// holds no parenthesis, and the quotes keep a "#".
		by = quote("hdr(" + a.HashName + ")")
	case lbmodel.HashCookie:
		by = "hash " + quote("req.cook("+fetchArg(a.HashName)+")")
	}
	return []string{"    balance " + by, "    hash-type consistent"}
}

// timeoutLines are an HTTP backend's timeout and retries. HAProxy bounds
// each wait for a member's answer ("timeout server", answered 504), not a
// whole exchange: the backend request timeout, else the request timeout,
// is that bound, and a request timeout caps the retries so that the tries
// together stay within it, as Gateway API wants of the two.
func timeoutLines(t *lbmodel.Timeouts, r *lbmodel.Retry) []string {
	var out []string
	var perTry int32
	if t != nil {
		perTry = t.BackendRequestMillis
		if perTry == 0 {
			perTry = t.RequestMillis
		}
		if perTry > 0 {
			out = append(out, "    timeout server "+strconv.Itoa(int(perTry))+"ms")
		}
	}
	if r == nil {
		return out
	}
	retries := r.Attempts
	if t != nil && t.RequestMillis > 0 && perTry > 0 {
		retries = min(retries, t.RequestMillis/perTry-1)
	}
	on := []string{"conn-failure", "empty-response", "response-timeout"}
	for _, c := range r.Codes {
		on = append(on, strconv.Itoa(int(c)))
	}
	return append(out, "    retries "+strconv.Itoa(int(retries)), "    retry-on "+strings.Join(on, " "))
}

func expire(seconds int32) string {
	if seconds == 0 {
		return ""
	}
	return " expire " + strconv.Itoa(int(seconds)) + "s"
}

// addressTable is the stick table type of the clients' addresses: the
// frontend's family, which the backend's members share.
func (b Backend) addressTable() string {
	if b.IPv6 {
		return "ipv6"
	}
	return "ip"
}

// cookieKey is the key of a backend's dynamic cookies: the same on every
// edge and across reloads, so that a client's cookie keeps its member
// wherever and whenever it comes back.
func (b Backend) cookieKey() string {
	sum := sha256.Sum256([]byte("npl dynamic cookie " + b.Name))
	return hex.EncodeToString(sum[:16])
}

// DynamicCookieCommand is the runtime command that gives every server of
// backend b its dynamic cookie, those added at runtime too (HAProxy 2.6
// computes it for them only when the key is set); empty when b has no
// cookie persistence.
func (b Backend) DynamicCookieCommand() string {
	if b.Policy == nil || b.Policy.Persistence == nil || b.Policy.Persistence.Type != lbmodel.PersistCookie {
		return ""
	}
	return "set dynamic-cookie-key backend " + b.Name + " " + b.cookieKey()
}

// check is the health check of b's members, nil for the edge's default: a
// TCP-mode copy of a pool for TLS routes checks with TCP what the pool
// checks with HTTP (its members speak TLS there).
func (b Backend) check() *lbmodel.HealthCheck {
	if b.Policy == nil || b.Policy.HealthCheck == nil {
		return nil
	}
	c := *b.Policy.HealthCheck
	if b.Pool != "" && c.Type == lbmodel.CheckHTTP {
		c = lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: c.IntervalSeconds, TimeoutSeconds: c.TimeoutSeconds, Rise: c.Rise, Fall: c.Fall}
	}
	return &c
}

// serverPolicy are the server keywords of b's policy: the check's timing
// (the edge's defaults c where the policy leaves them), slow start, the
// connection cap and TLS to the member.
func (b Backend) serverPolicy(c Checks) string {
	if hc := b.check(); hc != nil {
		if hc.IntervalSeconds > 0 {
			c.Inter = time.Duration(hc.IntervalSeconds) * time.Second
		}
		if hc.Fall > 0 {
			c.Fall = int(hc.Fall)
		}
		if hc.Rise > 0 {
			c.Rise = int(hc.Rise)
		}
	}
	s := c.Options()
	p := b.Policy
	if p == nil {
		return s
	}
	if p.SlowStartSeconds > 0 {
		s += " slowstart " + strconv.Itoa(int(p.SlowStartSeconds)) + "s"
	}
	if p.MaxConnectionsPerMember > 0 {
		s += " maxconn " + strconv.Itoa(int(p.MaxConnectionsPerMember))
	}
	if t := p.BackendTLS; t != nil && b.HTTP {
		ca := "@system-ca"
		if !t.SystemCAs {
			ca = b.CAFile
		}
		// HAProxy checks the certificate against the SNI it sends, and
		// verifyhost only without one: the hostname is the one name it
		// verifies (a subject alternative name, when the policy has one,
		// is the hostname: api.PolicyCapabilities).
		s += " ssl verify required ca-file " + serverWord(ca) + " sni " + serverWord("str("+t.Hostname+")") +
			" verifyhost " + serverWord(t.Hostname) + " check-sni " + serverWord(t.Hostname)
	}
	return s
}

// caFilesBackend is the name of the backend that loads the CA files of
// backend TLS; no load balancer's proxy has it (theirs hold "--").
const caFilesBackend = "npl_ca_files"

// caFileLines are the lines of a backend whose disabled servers name each
// CA file of the backends' TLS to their members, so that HAProxy loads
// every one of them when it starts: a server added at runtime may name
// only a CA file loaded already ("add server" reads no file), and a pool
// may have no member yet when its policy comes. None when no backend
// speaks TLS to its members.
func caFileLines(backs []Backend) []string {
	var files []string
	for _, b := range backs {
		if b.Policy == nil || b.Policy.BackendTLS == nil || !b.HTTP {
			continue
		}
		f := b.CAFile
		if b.Policy.BackendTLS.SystemCAs {
			f = "@system-ca"
		}
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil
	}
	slices.Sort(files)
	out := []string{"# The CA files of TLS to the members, loaded for the members added at runtime.",
		"backend " + caFilesBackend}
	for i, f := range files {
		out = append(out, "    server ca"+strconv.Itoa(i)+" 127.0.0.1:1 disabled ssl verify required ca-file "+serverWord(f))
	}
	return out
}

// serverWord writes s as one word of a server's keywords, the same in the
// configuration and in a runtime "add server": the CLI takes no quotes,
// but both take a backslash before any character as that character.
func serverWord(s string) string {
	var b strings.Builder
	for _, c := range s {
		plain := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-/@:()*", c)
		if !plain {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// statusRegex is a regular expression that matches exactly the HTTP
// statuses of ranges (within 100-599): whole hundreds and tens as
// wildcards, the rest as digit classes.
func statusRegex(ranges []lbmodel.StatusRange) string {
	var in [600]bool
	for _, r := range ranges {
		for c := r.Min; c <= r.Max && c < 600; c++ {
			in[c] = true
		}
	}
	all := func(from, n int) bool {
		for c := from; c < from+n; c++ {
			if !in[c] {
				return false
			}
		}
		return true
	}
	var alts []string
	for h := 100; h < 600; h += 100 {
		if all(h, 100) {
			alts = append(alts, strconv.Itoa(h/100)+"[0-9][0-9]")
			continue
		}
		for t := h; t < h+100; t += 10 {
			prefix := strconv.Itoa(t / 10)
			if all(t, 10) {
				alts = append(alts, prefix+"[0-9]")
				continue
			}
			var digits string
			for c := t; c < t+10; c++ {
				if in[c] {
					digits += strconv.Itoa(c % 10)
				}
			}
			switch len(digits) {
			case 0:
			case 1:
				alts = append(alts, prefix+digits)
			default:
				alts = append(alts, prefix+"["+digits+"]")
			}
		}
	}
	return "^(" + strings.Join(alts, "|") + ")$"
}
