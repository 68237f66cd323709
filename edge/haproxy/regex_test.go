package haproxy

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/lbmodel"
)

// TestRender_haproxyCompilesTheRegexSubset: every regular expression of
// lbmodel's subset (its corpus, and random ones it accepts), rendered as a
// path, header and query parameter match, passes haproxy -c: PCRE2 takes
// what npl-lbsync lets through.
func TestRender_haproxyCompilesTheRegexSubset(t *testing.T) {
	bin := haproxyBin(t)
	data, err := os.ReadFile("../../lbmodel/testdata/regex-subset.txt")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if !strings.HasPrefix(line, "#") {
			exprs = append(exprs, line)
		}
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for len(exprs) < 400 {
		if e := randomRegex(rnd); lbmodel.CheckRegex(e) == nil {
			exprs = append(exprs, e)
		}
	}
	var rules []lbmodel.Rule
	for _, e := range exprs {
		rules = append(rules, lbmodel.Rule{Path: e, PathType: lbmodel.PathRegex, Pool: "c1--ns-rx-p",
			Headers: []lbmodel.ValueMatch{{Name: "x-h", Value: e, Regex: true}},
			Query:   []lbmodel.ValueMatch{{Name: "q", Value: e, Regex: true}}})
	}
	px := Proxies{
		Frontends: []Frontend{{Name: "c1--ns-rx-L7-HTTP-80", Cluster: "c1", LoadBalancer: "c1--ns-rx", Gateway: "ns/rx", HTTP: true,
			VIP: netip.MustParseAddr("198.18.200.9"), Port: 80, Rules: rules}},
		Backends: []Backend{{Name: "c1--ns-rx-p", Cluster: "c1", LoadBalancer: "c1--ns-rx", HTTP: true, Members: []lbmodel.Member{}}},
	}
	dir := t.TempDir()
	r := Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), InvalidSocket: filepath.Join(dir, "500.sock"), Checks: DefaultChecks}, px)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, r.Text, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(context.Background(), bin, path); err != nil {
		t.Fatalf("haproxy refused regular expressions of the subset: %v", err)
	}
}

// randomRegex strings tokens of the subset and a few beyond it together.
func randomRegex(rnd *rand.Rand) string {
	tokens := []string{"a", "/", ".", "\\.", "[a-z]", "[^/]", "\\d", "\\w", "\\S", "(", ")", "(?:", "(?i)", "(?i:", "|", "*",
		"+", "?", "{2}", "{1,3}", "{2,}", "{0}", "^", "$", "\\b", "\\B", "\\x41", "\\x00", "[[:alpha:]]", "[", "]", "[^", "-",
		"\\{", "\\}", "\\]", "\\-", "'", "\"", "#", "%", "\\\\", " ", "\\t"}
	var b strings.Builder
	for range 1 + rnd.IntN(12) {
		b.WriteString(tokens[rnd.IntN(len(tokens))])
	}
	return b.String()
}
