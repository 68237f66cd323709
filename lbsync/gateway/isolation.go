package gateway

import (
	"math"
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Gateway API's listener isolation: a request goes to the listener of the
// most specific hostname that matches it, and only there.

// covers reports whether a listener hostname pattern takes every request
// for host (a name or a wildcard): the same, or a wildcard above it.
func covers(pattern, host string) bool {
	if pattern == host {
		return true
	}
	return strings.HasPrefix(pattern, "*.") && host != "" && strings.HasSuffix(host, pattern[1:]) && len(host) > len(pattern)-1
}

// capturedElsewhere reports whether the requests for host, which a route
// gets on listener l, go to another listener of l's port whose hostname is
// more specific and covers host (listener isolation): the route's rules
// for host would never be reached on l, and must not be reached on the
// other.
func capturedElsewhere(l *listener, host string, ls []*listener) bool {
	return slices.ContainsFunc(ls, func(m *listener) bool {
		if m == l || !m.served() || m.spec.Port != l.spec.Port || m.hostname == "" || m.hostname == l.hostname {
			return false
		}
		moreSpecific := l.hostname == "" || covers(l.hostname, m.hostname)
		return moreSpecific && covers(m.hostname, host)
	})
}

// isolationOrder ranks the rules of isolation after every route rule.
const isolationOrder = math.MaxInt32

// isolation returns, for each served listener whose hostname is more
// specific than that of another listener on its port, a rule that answers
// 404 to the requests for that hostname no route of the listener matches:
// Gateway API's listener isolation. A request goes to the listener of the
// most specific matching hostname only; without the rule it would fall
// through to the routes of the less specific listener. The rule's path is
// the prefix "/" with the last Order, which ranks after every other path
// of its host (Exact, RegularExpression, longer prefixes, and "/" with
// method, header or query tests); a route's own plain "/" rule replaces
// it.
func isolation(ls []*listener) []lbmodel.Rule {
	var out []lbmodel.Rule
	for _, l := range ls {
		if !l.served() || l.hostname == "" {
			continue
		}
		shadows := slices.ContainsFunc(ls, func(m *listener) bool {
			return m != l && m.served() && m.spec.Port == l.spec.Port && m.hostname != l.hostname &&
				(m.hostname == "" || (strings.HasPrefix(m.hostname, "*.") && strings.HasSuffix(l.hostname, m.hostname[1:])))
		})
		if shadows {
			out = append(out, lbmodel.Rule{Host: l.hostname, Path: "/", PathType: lbmodel.PathPrefix, FixedStatus: 404,
				Ports: []int32{l.spec.Port}, Order: isolationOrder})
		}
	}
	return out
}
