package edge

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
)

// FuzzRenderModel renders arbitrary load balancers as npl-edge does with
// a PUT (checkRequest, the one check of the model and the edge's own, then
// the proxies and the configuration) and checks that no input adds a line,
// a section or a directive to HAProxy's configuration: every line is one
// the renderer writes, tokenised as HAProxy tokenises it (quotes,
// backslashes, "#" comments), with the sections and names it expects; and,
// when the haproxy binary is there, HAProxy's own parser ends lines where
// that check does (a sentinel directive after the last line must be
// reported at that line: no byte but a newline ends a line for HAProxy).
// make test runs the seeds, HAProxy's check included; make fuzz the
// fuzzer. A Service string with newlines and directives once ran an
// external check as root (REFERENCE 17).
func FuzzRenderModel(f *testing.F) {
	for _, s := range renderSeeds() {
		b, err := json.Marshal(s.lb)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s.cluster, b)
	}
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		f.Fatal("haproxy not found: run make deps (apt-get install haproxy)")
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, cluster string, data []byte) {
		var lb lbmodel.LoadBalancer
		if json.Unmarshal(data, &lb) != nil {
			return
		}
		if lb.HTTP != nil {
			// The key material never travels in the model's JSON: every
			// certificate gets the test's, so that HTTPS and terminating
			// TLS listeners render too.
			for i := range lb.HTTP.TLS {
				c := &lb.HTTP.TLS[i]
				c.CertPEM, c.KeyPEM, c.Fingerprint = fuzzCert.cert, fuzzCert.key, fuzzCert.fingerprint
			}
		}
		n, err := checkRequest(cluster, &lb)
		if err != nil {
			return
		}
		// What the edge renders and writes for its desired state: the
		// configuration, the certificate and CA files it names.
		e := &Edge{cfg: Config{Dir: dir, Checks: haproxy.DefaultChecks}, desired: map[lbKey]*lbmodel.LoadBalancer{{cluster, n.Name}: n}}
		if err := e.writeCerts(); err != nil {
			t.Fatal(err)
		}
		px := e.proxies()
		text := e.render(px).Text
		checkStructure(t, text, px)
		checkLinesWithHAProxy(t, bin, dir, text)
	})
}

type renderSeed struct {
	cluster string
	lb      *lbmodel.LoadBalancer
}

// renderSeeds are models of every kind and models that try to inject:
// values with newlines, quotes, "#", "${}" and "%[]"; names and owners with
// blanks; hosts and regular expressions that would end a word.
func renderSeeds() []renderSeed {
	const c = "c1"
	l4 := &lbmodel.LoadBalancer{Name: "c1--ns_web", Service: "ns/web", VIPs: []string{"198.18.200.1"}, Listeners: []lbmodel.Listener{
		{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "c1--ns_web-TCP-80", Members: []lbmodel.Member{
			{IP: "198.18.0.11", Port: 61000, Enabled: true}, {IP: "fd00::1", Port: 61001, Weight: 3}}}}}}
	name := "c1--ns_gw-GW"
	pool, sni := name+"_ns_route-R0", name+"_ns_tls-T0"
	l7 := &lbmodel.LoadBalancer{Name: name, Gateway: "ns/gw", Kind: lbmodel.L7, VIPs: []string{"198.18.200.2"},
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 443, Protocol: lbmodel.HTTPS},
			{Port: 8883, Protocol: lbmodel.TLS, SNI: []lbmodel.SNIRoute{{Host: "*.example.com", Pool: sni}, {Pool: sni}}},
			{Port: 9000, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: name + "-TCP-9000", Members: []lbmodel.Member{}}}},
		Pools: []lbmodel.Pool{{Name: pool, InvalidWeight: 1, Members: []lbmodel.Member{{IP: "198.18.0.11", Port: 61000, Enabled: true}}},
			{Name: sni, AppProtocol: lbmodel.AppProtocolH2C, Members: []lbmodel.Member{{IP: "198.18.0.12", Port: 61000, Enabled: true}}}},
		HTTP: &lbmodel.HTTPRoutes{DefaultPool: pool, TLS: []lbmodel.TLSCert{{Secret: "ns/tls", Hosts: []string{"a.example.com"}}},
			Rules: []lbmodel.Rule{
				{Host: "a.example.com", Path: "/x'y#z ${HOME} %[src]", PathType: lbmodel.PathPrefix, Pool: pool, Method: "GET",
					Headers:         []lbmodel.ValueMatch{{Name: "X-A", Value: "v'\"#;\\ %[req.hdr(host)] ${X}"}, {Name: "X-R", Value: `a'.*(x|y)$#\s`, Regex: true}},
					Query:           []lbmodel.ValueMatch{{Name: "q", Value: "1 if TRUE"}},
					RequestHeaders:  &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-S", Value: "' ; use_backend x"}}, Remove: []string{"X-G"}},
					ResponseHeaders: &lbmodel.HeaderFilter{Add: []lbmodel.Header{{Name: "X-O", Value: "%%{x}"}}},
					Rewrite:         &lbmodel.Rewrite{Hostname: "b.example.com", Path: &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/n'ew"}}},
				{Path: "^/re(g|x)$'", PathType: lbmodel.PathRegex, Redirect: &lbmodel.Redirect{Hostname: "c.example.com", StatusCode: 301,
					Path: &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/t o"}}},
				{Path: "/fixed", PathType: lbmodel.PathExact, FixedStatus: 503},
			}}}
	evilService := l4.Clone()
	evilService.Service = "ns/web\n    option external-check\n    external-check command /bin/sh"
	evilName := l4.Clone()
	evilName.Name = "c1--ns_web\nfrontend evil"
	evilPool := l4.Clone()
	evilPool.Listeners[0].Pool.Name = "c1--ns_web-TCP-80 if TRUE"
	evilHost := l7.Clone()
	evilHost.HTTP.Rules[0].Host = "a.example.com'\n    http-request deny"
	evilPath := l7.Clone()
	evilPath.HTTP.Rules[0].Path = "/a\n    http-request deny"
	// A client CA of a tenant's ConfigMap, with what would end the line
	// of a comment or a word beside its certificate.
	evilClientCA := l7.Clone()
	evilClientCA.Listeners[1].ClientValidation = &lbmodel.ClientValidation{
		CACertPEM: string(fuzzCert.cert) + "'\n    http-request deny # ${X}\r\n", Optional: true}
	// CORS of a tenant's route: header names with every character a token
	// may hold that HAProxy treats specially; origins that would end a
	// word or a line (Normalize refuses them).
	cors := l7.Clone()
	cors.HTTP.Rules[0].CORS = &lbmodel.CORS{AllowOrigins: []string{"https://*.example.com", "http://a.example:8080"}, AllowCredentials: true,
		AllowMethods: []string{"GET", "X'#%$|"}, AllowHeaders: []string{"x-'a", "x-%src%%"}, ExposeHeaders: []string{"*", "x-#$HOME", "x-|`~^"},
		MaxAgeSeconds: 3600}
	cors.HTTP.Rules[2].CORS = &lbmodel.CORS{AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, AllowHeaders: []string{"*"}, MaxAgeSeconds: 5}
	evilCORS := l7.Clone()
	evilCORS.HTTP.Rules[0].CORS = &lbmodel.CORS{AllowOrigins: []string{"https://a.example'\n    http-request deny", "https://b.example' '.*"},
		AllowHeaders: []string{"x-a\"\n    http-request deny"}, ExposeHeaders: []string{"x-b, ${X}"}, MaxAgeSeconds: 5}
	return []renderSeed{{c, l4}, {c, l7}, {c, evilService}, {c, evilName}, {c, evilPool}, {c, evilHost}, {c, evilPath},
		{c, evilClientCA}, {c, cors}, {c, evilCORS}, {"c1--x", l4}, {"c1\nfrontend", l4}}
}

// fuzzCert is a certificate and key the fuzzed models' certificates use,
// written to the directory HAProxy loads them from.
var fuzzCert = newTestCert()

// testCert is a certificate, its key and its fingerprint.
type testCert struct {
	cert, key   []byte
	fingerprint string
}

func newTestCert() (c testCert) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "a.example.com"},
		DNSNames: []string{"a.example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err)
	}
	c.cert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	c.key = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	c.fingerprint = lbmodel.CertFingerprint(c.cert)
	return c
}

// directives are the first words of the lines the renderer writes inside a
// section.
var directives = []string{"stats", "hard-stop-after", "mode", "timeout", "retries", "option", "bind", "description",
	"acl", "http-request", "http-after-response", "use_backend", "default_backend", "balance", "server", "tcp-request"}

// checkStructure fails t when text, a configuration of px, has a line the
// renderer did not write: a section other than global, defaults, the
// invalid share's frontend and px's proxies, or a line whose first word
// (as HAProxy splits it) is no directive the renderer writes, or that a
// "#" outside quotes cuts short.
func checkStructure(t *testing.T, text []byte, px haproxy.Proxies) {
	t.Helper()
	names := map[string]bool{"npl_invalid": true}
	for _, f := range px.Frontends {
		names[f.Name] = true
	}
	for _, b := range px.Backends {
		names[b.Name] = true
	}
	sections, want := 0, 3+len(px.Frontends)+len(px.Backends) // global, defaults, npl_invalid
	for i, line := range strings.Split(strings.TrimSuffix(string(text), "\n"), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		words, cut := haproxy.Words(line)
		fail := func(why string) { t.Fatalf("line %d %q: %s\n%s", i+1, line, why, text) }
		switch {
		case cut:
			fail("a # outside quotes cuts the line")
		case line == "global" || line == "defaults":
			sections++
		case line[0] != ' ':
			if len(words) != 2 || (words[0] != "frontend" && words[0] != "backend") || !names[words[1]] {
				fail("not a section of the configuration")
			}
			sections++
		case !slices.Contains(directives, words[0]):
			fail("not a directive the renderer writes")
		case words[0] == "use_backend" || words[0] == "default_backend":
			if !names[words[1]] || len(words) > 2 && (len(words) < 4 || words[2] != "if") {
				fail("not a backend of the configuration")
			}
		}
	}
	if sections != want {
		t.Fatalf("%d sections, want %d:\n%s", sections, want, text)
	}
}

var sentinelRE = regexp.MustCompile(`parsing \[[^\]]*:(\d+)\] : unknown keyword 'npl-fuzz-sentinel'`)

// checkLinesWithHAProxy has HAProxy parse text with a sentinel directive
// after its last line, and fails t unless HAProxy reports the sentinel at
// that line: HAProxy counts exactly the lines the renderer wrote.
func checkLinesWithHAProxy(t *testing.T, bin, dir string, text []byte) {
	t.Helper()
	f, err := os.CreateTemp(dir, "haproxy-*.cfg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	lines := strings.Count(string(text), "\n")
	if _, err := fmt.Fprintf(f, "%s    npl-fuzz-sentinel\n", text); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "-c", "-f", f.Name()).CombinedOutput()
	m := sentinelRE.FindSubmatch(out)
	if m == nil || string(m[1]) != fmt.Sprint(lines+1) {
		t.Fatalf("HAProxy did not count %d lines (sentinel %q):\n%s\n%s", lines, m, out, text)
	}
}
