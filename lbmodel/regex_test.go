package lbmodel

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// subsetAccepted reads testdata/regex-subset.txt: regular expressions
// of the subset, one a line; edge/haproxy's test has HAProxy compile each.
func subsetAccepted(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile("testdata/regex-subset.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

func TestCheckRegex_acceptsTheSubset(t *testing.T) {
	for _, expr := range subsetAccepted(t) {
		if err := CheckRegex(expr); err != nil {
			t.Errorf("CheckRegex(%q) = %v; want nil", expr, err)
		}
	}
}

func TestCheckRegex_refusesWhatTheDataPlanesRunOtherwiseOrSlowly(t *testing.T) {
	for _, c := range []struct{ name, expr, want string }{
		{"empty", ``, "an empty regular expression"},
		{"too long", "/" + strings.Repeat("a", MaxRegexLength), "more than 1024"},
		{"a control character", "/x\x7f", "not printable ASCII"},
		{"non-ASCII (a rune in RE2, bytes in PCRE2)", "/é+", "not printable ASCII"},
		{"not RE2", `/a(`, "not a regular expression"},
		{"\\Q quotes the anchors HAProxy adds", `/x\Qfoo`, `the escape \Q is not supported`},
		{"\\E", `/x\Efoo`, `the escape \E is not supported`},
		{"\\x{...} beyond a byte", `/\x{100}`, `\x takes two hex digits`},
		{"\\x above 7F", `/\xff`, `\x takes two hex digits`},
		{"\\p", `/\pL`, `the escape \p is not supported`},
		{"\\z", `/a\z`, `the escape \z is not supported`},
		{"octal", `/\0101`, `the escape \0 is not supported`},
		{"\\v (a class in PCRE2)", `/\v`, `the escape \v is not supported`},
		{"\\b in a class (backspace)", `[\b]`, `the escape \b is not supported`},
		{"a trailing backslash", `/a\`, "a trailing"},
		{"groups nested too deep", strings.Repeat("(", 260) + "a" + strings.Repeat(")", 260), "nested more than 32 deep"},
		{"a named group", `/(?P<x>a)`, "only the groups"},
		{"another flag", `(?s)/a.b`, "only the groups"},
		{"a POSIX class outside brackets", `/[:alpha:]`, "outside brackets"},
		{"an unknown POSIX class", `/[[:nope:]]`, "POSIX class"},
		{"a literal {", `/a{`, "a literal { must be escaped"},
		{"{,n} (a count in newer PCRE2 only)", `/a{,3}`, "a literal { must be escaped"},
		{"a literal }", `/a}`, "a literal } must be escaped"},
		{"an alternation repeated", `/(a|aa)+`, "alternation"},
		{"an alternation of words repeated", `/(foo|bar)*`, "alternation"},
		{"a repetition repeated", `/(a+)+b`, "nested repetitions"},
		{"an optional part repeated", `/(ab?)*`, "nested repetitions"},
		{"an optional part counted", `/(a?){30}a{30}`, "nested repetitions"},
		{"three unbounded in a row", `/.*.*.*x`, "more than 2 unbounded repetitions in a row"},
		{"three classes in a row", `/[a-z]*[a-z]*[a-z]*x`, "more than 2 unbounded"},
		{"three across literals they take", `/.*a.*b.*c`, "more than 2 unbounded"},
		{"three across an optional part", `/a*b?a*c?a+`, "more than 2 unbounded"},
		{"three across groups", `/(.*)(x.*)(.*)`, "more than 2 unbounded"},
		{"an anchor repeated", `/^*`, "a repetition of an assertion"},
		{"a boundary repeated", `/a\b+`, "a repetition of an assertion"},
		{"what precedes a flag repeated", `/\}(?i){2}`, "a repetition of an assertion"},
		{"a range from a set", `[\w-{]`, "a range that starts at a set"},
		{"a range to a set", `[a-\d]`, "a range that ends at a set"},
		{"a range to a POSIX class", `[a-[:digit:]]`, "a range that ends at a set"},
		{"a collating element", `[.a.]`, "POSIX collating element"},
		{"a collating element in a class", `[a[=b=]]`, "POSIX collating element"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckRegex(c.expr)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("CheckRegex(%q) = %v; want an error saying %q", c.expr, err, c.want)
			}
		})
	}
}

// FuzzCheckRegex: what CheckRegex accepts, Go's regexp compiles, and
// CheckRegex never panics.
func FuzzCheckRegex(f *testing.F) {
	for _, e := range subsetAccepted(f) {
		f.Add(e)
	}
	f.Add(`/(a|aa)+`)
	f.Add(`[[:^alpha:]]`)
	f.Fuzz(func(t *testing.T, expr string) {
		if CheckRegex(expr) == nil {
			if _, err := regexp.Compile(expr); err != nil {
				t.Fatalf("CheckRegex accepted %q, which RE2 refuses: %v", expr, err)
			}
		}
	})
}
