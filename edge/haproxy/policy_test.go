package haproxy

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/lbmodel"
)

// TestRender_policyAsHAProxyKeywords: each policy field of the sample's
// backends becomes its HAProxy keyword, on the backend or on every server.
func TestRender_policyAsHAProxyKeywords(t *testing.T) {
	text := string(Render(testGlobals, sampleProxies()).Text)
	for _, want := range []string{
		// Source persistence and a consistent hash of the source (L4).
		"backend c1--ns-web-TCP-80\n    description npl cluster=c1 lb=c1--ns-web\n    # npl policy {",
		"    balance source\n    hash-type consistent\n    stick-table type ip size 100k expire 10800s\n    stick on src\n",
		// An HTTP check with its host, statuses and timing.
		"    option httpchk\n    http-check send meth GET uri '/health z'\\''' ver HTTP/1.1 hdr Host 'web.example'\n" +
			"    http-check expect rstatus '^(2[0-9][0-9]|302)$'\n    timeout check 2s\n",
		"    server 198.18.0.11_61001 198.18.0.11:61001 check inter 5000ms fall 3 rise 2 slowstart 10s maxconn 100\n",
		// An IPv6 VIP's table; least connections.
		"    balance leastconn\n    stick-table type ipv6 size 100k\n    stick on src\n",
		// A cookie the edge inserts (dynamic: a server added at runtime has
		// one too), its lifetimes and permanence; a hash of a cookie.
		"    balance hash 'req.cook(u\\'\\''1)'\n    hash-type consistent\n",
		"    cookie 'it'\\''s' insert indirect nocache dynamic maxlife 3600s maxidle 600s attr 'Max-Age=3600'\n    dynamic-cookie-key '",
		// Timeouts, and retries the request timeout caps (1000/300: 2).
		"    timeout server 300ms\n    retries 2\n    retry-on conn-failure empty-response response-timeout 500 503\n",
		// TLS to the members, verifying the one subject alternative name.
		"check inter 2000ms fall 2 rise 1 ssl verify required ca-file /run/ca/a\\ b.pem sni str(a.example) verifyhost a.example check-sni a.example\n",
		"backend npl_ca_files\n    server ca0 127.0.0.1:1 disabled ssl verify required ca-file /run/ca/a\\ b.pem\n",
		// Header persistence and a hash of a header; a request timeout
		// alone leaves no retry.
		"    balance 'hdr(x-user#1)'\n    hash-type consistent\n    stick-table type string len 128 size 100k expire 60s\n    stick on 'req.hdr(x-session)'\n" +
			"    timeout server 500ms\n    retries 0\n",
		// A pool's TLS copy checks with TCP what the pool checks with HTTP.
		"backend c1--ns-gw-a:tls\n    description npl cluster=c1 lb=c1--ns-gw pool=c1--ns-gw-a\n    # npl policy {",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the configuration lacks %q:\n%s", want, text)
		}
	}
	gwTLS := text[strings.Index(text, "\nbackend c1--ns-gw-a:tls\n")+1:]
	gwTLS = gwTLS[:strings.Index(gwTLS, "\nbackend ")]
	if strings.Contains(gwTLS, "httpchk") || !strings.Contains(gwTLS, "stick on src") {
		t.Errorf("the TLS copy of a pool:\n%s", gwTLS)
	}
}

// TestStatusRegex_matchesExactlyTheRanges: every status of 100-599 is
// matched by the expression of a set of ranges exactly when a range holds
// it.
func TestStatusRegex_matchesExactlyTheRanges(t *testing.T) {
	for _, ranges := range [][]lbmodel.StatusRange{
		{{Min: 200, Max: 399}},
		{{Min: 200, Max: 200}},
		{{Min: 101, Max: 110}, {Min: 204, Max: 204}, {Min: 290, Max: 311}, {Min: 599, Max: 599}},
		{{Min: 100, Max: 599}},
	} {
		re := regexp.MustCompile(statusRegex(ranges))
		for c := int32(100); c < 600; c++ {
			in := false
			for _, r := range ranges {
				in = in || c >= r.Min && c <= r.Max
			}
			if re.MatchString(strconv.Itoa(int(c))) != in {
				t.Errorf("%s on %d: %v, want %v", re, c, !in, in)
			}
		}
	}
}
