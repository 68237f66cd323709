package lbmodel

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
)

// The regular expressions of rules (RegularExpression paths, header and
// query parameter matches) are written in Go's syntax (RE2), checked here,
// and run by the data planes: HAProxy's PCRE2, without UTF mode and with
// backtracking. Both accept more than either runs alike, and a backtracking
// engine takes time exponential or polynomial in the subject's length for
// some patterns (/(a|aa)+ cost HAProxy 40-94 ms a request; /.*.*.*x 1.5 s
// on a 7 kB path). CheckRegex owns the subset both run alike and cheaply:
//
//   - printable ASCII only, at most MaxRegexLength bytes;
//   - escapes: \ before any ASCII punctuation, \d \D \w \W \s \S, \b \B
//     outside brackets, \t \n \r \f, and \xHH of two hex digits up to 7F
//     (no \Q...\E, \x{...}, \p, \z, back-references or octal);
//   - groups ( ), (?: ) and the flag (?i), (?i: ), nested at most
//     maxRegexDepth deep (PCRE2 allows 250); no named groups or other
//     flags;
//   - classes [ ] with ranges, [^ ], the escapes above and POSIX names
//     ([:alpha:] and the others RE2 knows) inside brackets only;
//   - a literal { or } escaped: { opens a count {n}, {n,} or {n,m} only;
//   - no repetition or alternation inside a repetition that may repeat
//     more than once (*, +, {n,}, {n,m} with m > 1): (a|aa)+, (a+)+,
//     (ab?)*, (a?){30} are refused, (ab)+ and (a{3})+ are not;
//   - at most maxRegexChain unbounded repetitions (*, +, {n,}) that can
//     take the same characters one after the other: .*foo.* is served,
//     .*.*.*x is refused, [^/]+/[^/]+/[^/]+ is served (each stops at /).

// MaxRegexLength is the longest regular expression a rule may hold, in
// bytes (Gateway API bounds a path to 1024 characters).
const MaxRegexLength = 1024

const (
	// maxRegexDepth is how deep groups nest.
	maxRegexDepth = 32
	// maxRegexChain is how many unbounded repetitions may take the same
	// characters one after the other: two cost a backtracking engine time
	// quadratic in the subject (about 7 ms on a 7 kB path on HAProxy 2.6
	// with PCRE2 JIT), three cubic (1.5 s).
	maxRegexChain = 2
)

// CheckRegex returns why expr is not a regular expression of the subset the
// data planes run alike and cheaply (see above), nil when it is. Normalize
// checks every regular expression of a model with it, and the builders
// check each route's and Ingress's alone with it.
func CheckRegex(expr string) error {
	switch {
	case expr == "":
		return errors.New("an empty regular expression")
	case len(expr) > MaxRegexLength:
		return fmt.Errorf("a regular expression of %d bytes, more than %d", len(expr), MaxRegexLength)
	}
	for i := 0; i < len(expr); i++ {
		if c := expr[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("byte %d (%#x) is not printable ASCII", i, c)
		}
	}
	if err := scanRegex(expr); err != nil {
		return err
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return fmt.Errorf("not a regular expression: %w", err)
	}
	if err := checkRepeats(re, nil); err != nil {
		return err
	}
	return checkChains(re)
}

// posixClasses are the names of [:name:] that RE2 and PCRE2 both know.
var posixClasses = []string{"alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
	"space", "upper", "word", "xdigit"}

// scanRegex checks the escapes, groups, classes and counts of expr, a
// printable ASCII string, against the subset.
func scanRegex(expr string) error {
	depth := 0
	assertion := false // the last token is ^, $, \b, \B or a flag
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		if assertion && strings.IndexByte("*+?{", c) >= 0 {
			// RE2 repeats an assertion, or what precedes a flag; PCRE2
			// refuses to.
			return fmt.Errorf("at %d: a repetition of an assertion (^, $, \\b, \\B) or a flag", i)
		}
		assertion = c == '^' || c == '$'
		switch c {
		case '\\':
			n, _, err := scanEscape(expr, i, false)
			if err != nil {
				return err
			}
			assertion = expr[i+1] == 'b' || expr[i+1] == 'B'
			i += n
		case '[':
			end, err := scanClass(expr, i)
			if err != nil {
				return err
			}
			i = end
		case '(':
			rest := expr[i+1:]
			switch {
			case strings.HasPrefix(rest, "?i)"):
				i += len("?i)")
				assertion = true
				continue
			case strings.HasPrefix(rest, "?:"):
				i += len("?:")
			case strings.HasPrefix(rest, "?i:"):
				i += len("?i:")
			case strings.HasPrefix(rest, "?"):
				return fmt.Errorf("at %d: only the groups ( ), (?: ), (?i: ) and the flag (?i) are supported", i)
			}
			depth++
			if depth > maxRegexDepth {
				return fmt.Errorf("at %d: groups nested more than %d deep", i, maxRegexDepth)
			}
		case ')':
			depth--
		case '{':
			n, ok := countLength(expr[i:])
			if !ok {
				return fmt.Errorf("at %d: a literal { must be escaped (\\{): { opens a count {n}, {n,} or {n,m}", i)
			}
			i += n - 1
		case '}':
			return fmt.Errorf("at %d: a literal } must be escaped (\\})", i)
		}
	}
	return nil
}

// scanClass checks the class that opens at expr[start] ('[') and returns
// the index of its closing ']' (len(expr) when it has none: the parser
// refuses it). A range's ends are single characters: RE2 takes [\w-a] as
// \w, - and a, PCRE2 refuses it.
func scanClass(expr string, start int) (int, error) {
	if strings.HasPrefix(expr[start:], "[:") {
		return 0, fmt.Errorf("at %d: a POSIX class [:name:] outside brackets", start)
	}
	if err := collating(expr, start); err != nil {
		return 0, err
	}
	i := start + 1
	if strings.HasPrefix(expr[i:], "^") {
		i++
	}
	first := i
	// set: the last member is a set (\w, [:alpha:]); dash: it is a - that
	// makes a range.
	set, dash := false, false
	for ; i < len(expr); i++ {
		c := expr[i]
		member := false
		switch {
		case c == ']' && i > first:
			return i, nil
		case c == '\\':
			n, isSet, err := scanEscape(expr, i, true)
			if err != nil {
				return 0, err
			}
			if isSet && dash {
				return 0, fmt.Errorf("at %d: a range that ends at a set", i)
			}
			i += n
			set, member = isSet, true
		case c == '[' && collating(expr, i) != nil:
			return 0, collating(expr, i)
		case c == '[' && strings.HasPrefix(expr[i:], "[:"):
			end := strings.Index(expr[i+2:], ":]")
			if end < 0 || !slices.Contains(posixClasses, strings.TrimPrefix(expr[i+2:i+2+end], "^")) {
				return 0, fmt.Errorf("at %d: [: opens no known POSIX class name", i)
			}
			if dash {
				return 0, fmt.Errorf("at %d: a range that ends at a set", i)
			}
			i += 2 + end + 1
			set, member = true, true
		case c == '-' && i > first && !dash && i+1 < len(expr) && expr[i+1] != ']':
			if set {
				return 0, fmt.Errorf("at %d: a range that starts at a set; escape the - (\\-)", i)
			}
			dash = true
			continue
		}
		if !member {
			set = false
		}
		dash = false
	}
	return len(expr), nil
}

// collating refuses the [. and [= at expr[i]: PCRE2 takes them for the
// POSIX collating elements it does not support, RE2 for characters.
func collating(expr string, i int) error {
	if strings.HasPrefix(expr[i:], "[.") || strings.HasPrefix(expr[i:], "[=") {
		return fmt.Errorf("at %d: %s opens a POSIX collating element; escape the [ (\\[)", i, expr[i:i+2])
	}
	return nil
}

// scanEscape checks the escape at expr[i] (a backslash) and returns how
// many bytes after the backslash it takes and whether it is a set of
// characters (\d, \w, \s and their complements).
func scanEscape(expr string, i int, inClass bool) (int, bool, error) {
	if i+1 >= len(expr) {
		return 0, false, errors.New("a trailing \\")
	}
	n := expr[i+1]
	switch {
	case !isAlnum(n):
		return 1, false, nil // escaped punctuation
	case strings.IndexByte("dDwWsS", n) >= 0:
		return 1, true, nil
	case strings.IndexByte("tnrf", n) >= 0:
		return 1, false, nil
	case (n == 'b' || n == 'B') && !inClass:
		return 1, false, nil
	case n == 'x':
		if i+3 < len(expr) && isHex(expr[i+2]) && isHex(expr[i+3]) && expr[i+2] <= '7' {
			return 3, false, nil
		}
		return 0, false, fmt.Errorf("at %d: \\x takes two hex digits of a value up to 7F (\\x{...} is not supported)", i)
	}
	return 0, false, fmt.Errorf("at %d: the escape \\%c is not supported", i, n)
}

// countLength returns the length of the count {n}, {n,} or {n,m} that s
// starts with.
func countLength(s string) (int, bool) {
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return 0, false
	}
	lo, hi, comma := strings.Cut(s[1:end], ",")
	if !isDigits(lo) || (comma && hi != "" && !isDigits(hi)) {
		return 0, false
	}
	return end + 1, true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// repeatsMany reports whether re is a repetition that may repeat its
// expression more than once.
func repeatsMany(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpStar, syntax.OpPlus:
		return true
	case syntax.OpRepeat:
		return re.Max == -1 || re.Max > 1
	}
	return false
}

// varies reports whether re is a repetition of a varying count: ?, *, +,
// {n,}, {n,m} with n < m.
func varies(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		return true
	case syntax.OpRepeat:
		return re.Max != re.Min
	}
	return false
}

// checkRepeats refuses a varying repetition or an alternation inside a
// repetition that may repeat more than once (outer, nil at the top): the
// ways to split a subject between them grow exponentially.
func checkRepeats(re, outer *syntax.Regexp) error {
	if outer != nil {
		switch {
		case varies(re):
			return fmt.Errorf("the repetition %s inside the repetition %s: nested repetitions are not supported", re, outer)
		case re.Op == syntax.OpAlternate:
			return fmt.Errorf("the alternation %s inside the repetition %s is not supported", re, outer)
		}
	}
	if outer == nil && repeatsMany(re) {
		outer = re
	}
	for _, sub := range re.Sub {
		if err := checkRepeats(sub, outer); err != nil {
			return err
		}
	}
	return nil
}

// unbounded reports whether re is a repetition without an upper bound.
func unbounded(re *syntax.Regexp) bool {
	return re.Op == syntax.OpStar || re.Op == syntax.OpPlus || re.Op == syntax.OpRepeat && re.Max == -1
}

// holdsUnbounded reports whether re is or holds an unbounded repetition.
func holdsUnbounded(re *syntax.Regexp) bool {
	return unbounded(re) || slices.ContainsFunc(re.Sub, holdsUnbounded)
}

// checkChains refuses more than maxRegexChain unbounded repetitions in a
// row of any sequence of re that can take the same characters: a subject
// can be split between them in polynomially many ways, each of which a
// backtracking engine tries when the match fails.
func checkChains(re *syntax.Regexp) error {
	if re.Op == syntax.OpConcat {
		chain := 0
		var set charSet // what the last unbounded repetition of the chain takes
		for _, e := range flatten(re.Sub) {
			switch {
			case holdsUnbounded(e):
				s := charsOf(e)
				if chain > 0 && s.meets(set) {
					chain++
				} else {
					chain = 1
				}
				set = s
				if chain > maxRegexChain {
					return fmt.Errorf("more than %d unbounded repetitions in a row take the same characters (up to %s): "+
						"a subject that fails costs time of their power", maxRegexChain, e)
				}
			case chain > 0 && !skippable(e) && !absorbs(set, e):
				chain = 0 // the last repetition cannot run past e
			}
		}
	}
	for _, sub := range re.Sub {
		if err := checkChains(sub); err != nil {
			return err
		}
	}
	return nil
}

// flatten returns the sequence a concatenation's elements make, groups and
// nested concatenations opened.
func flatten(seq []*syntax.Regexp) []*syntax.Regexp {
	var out []*syntax.Regexp
	for _, e := range seq {
		switch {
		case e.Op == syntax.OpConcat:
			out = append(out, flatten(e.Sub)...)
		case e.Op == syntax.OpCapture && len(e.Sub) == 1:
			out = append(out, flatten(e.Sub)...)
		default:
			out = append(out, e)
		}
	}
	return out
}

// skippable reports whether e may match the empty string without
// characters: an anchor, a boundary, an optional part.
func skippable(e *syntax.Regexp) bool {
	switch e.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary, syntax.OpQuest, syntax.OpStar:
		return true
	case syntax.OpRepeat:
		return e.Min == 0
	case syntax.OpCapture:
		return skippable(e.Sub[0])
	}
	return false
}

// absorbs reports whether an unbounded repetition that takes set can take
// what e matches too, so that the two compete for characters.
func absorbs(set charSet, e *syntax.Regexp) bool {
	switch e.Op {
	case syntax.OpLiteral:
		for _, r := range e.Rune {
			if !set.meets(runeSet(r, e.Flags&syntax.FoldCase != 0)) {
				return false
			}
		}
		return true
	case syntax.OpConcat:
		for _, s := range e.Sub {
			if !skippable(s) && !absorbs(set, s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		return slices.ContainsFunc(e.Sub, func(s *syntax.Regexp) bool { return absorbs(set, s) })
	case syntax.OpCapture, syntax.OpRepeat, syntax.OpPlus:
		return absorbs(set, e.Sub[0])
	}
	return set.meets(charsOf(e))
}

// charSet is a set of characters: the ASCII ones by bit, every other one
// at once.
type charSet struct {
	ascii    [2]uint64
	nonASCII bool
}

func (s *charSet) add(lo, hi rune) {
	for r := max(lo, 0); r <= min(hi, 127); r++ {
		s.ascii[r/64] |= 1 << (r % 64)
	}
	if hi > 127 {
		s.nonASCII = true
	}
}

func (s charSet) union(t charSet) charSet {
	return charSet{ascii: [2]uint64{s.ascii[0] | t.ascii[0], s.ascii[1] | t.ascii[1]}, nonASCII: s.nonASCII || t.nonASCII}
}

func (s charSet) meets(t charSet) bool {
	return s.ascii[0]&t.ascii[0] != 0 || s.ascii[1]&t.ascii[1] != 0 || s.nonASCII && t.nonASCII
}

// runeSet is the set of r, with its other case when fold is set.
func runeSet(r rune, fold bool) charSet {
	var s charSet
	s.add(r, r)
	if fold {
		for f := unicodeFold(r); f != r; f = unicodeFold(f) {
			s.add(f, f)
		}
	}
	return s
}

// unicodeFold is the next rune of r's case-folding orbit (ASCII letters
// only: the subset is ASCII).
func unicodeFold(r rune) rune {
	switch {
	case r >= 'a' && r <= 'z':
		return r - 'a' + 'A'
	case r >= 'A' && r <= 'Z':
		return r - 'A' + 'a'
	}
	return r
}

// charsOf returns every character re can match.
func charsOf(re *syntax.Regexp) charSet {
	var s charSet
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			s = s.union(runeSet(r, re.Flags&syntax.FoldCase != 0))
		}
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			s.add(re.Rune[i], re.Rune[i+1])
		}
	case syntax.OpAnyCharNotNL:
		s.add(0, '\n'-1)
		s.add('\n'+1, 0x10ffff)
	case syntax.OpAnyChar:
		s.add(0, 0x10ffff)
	default:
		for _, sub := range re.Sub {
			s = s.union(charsOf(sub))
		}
	}
	return s
}
