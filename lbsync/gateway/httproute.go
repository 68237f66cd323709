package gateway

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// An HTTPRoute is served as rules of the HTTP and HTTPS listeners it
// attaches to (addRules), one pool per rule (rulePool, rules.go).

// checkHTTPRule checks the filters and regular expressions of an
// HTTPRoute rule.
func (b *build) checkHTTPRule(rt *routeView, i int) (gatewayv1.RouteConditionReason, error) {
	rule := &rt.http.Spec.Rules[i]
	if _, err := ruleFilters(rule); err != nil {
		reason := gatewayv1.RouteReasonUnsupportedValue
		if strings.Contains(err.Error(), "together") {
			reason = gatewayv1.RouteReasonIncompatibleFilters
		}
		return reason, err
	}
	if err := checkRegexes(rule); err != nil {
		return gatewayv1.RouteReasonUnsupportedValue, err
	}
	return "", nil
}

// checkRegexes checks the regular expressions of a rule's matches: only
// the subset the data planes run alike and cheaply (lbmodel.CheckRegex).
func checkRegexes(rule *gatewayv1.HTTPRouteRule) error {
	for _, m := range rule.Matches {
		if m.Path != nil && m.Path.Type != nil && *m.Path.Type == gatewayv1.PathMatchRegularExpression && m.Path.Value != nil {
			if err := lbmodel.CheckRegex(*m.Path.Value); err != nil {
				return fmt.Errorf("path regular expression %q: %w", *m.Path.Value, err)
			}
		}
		for _, h := range m.Headers {
			if h.Type != nil && *h.Type == gatewayv1.HeaderMatchRegularExpression {
				if err := lbmodel.CheckRegex(h.Value); err != nil {
					return fmt.Errorf("header %s regular expression %q: %w", h.Name, h.Value, err)
				}
			}
		}
		for _, q := range m.QueryParams {
			if q.Type != nil && *q.Type == gatewayv1.QueryParamMatchRegularExpression {
				if err := lbmodel.CheckRegex(q.Value); err != nil {
					return fmt.Errorf("query parameter %s regular expression %q: %w", q.Name, q.Value, err)
				}
			}
		}
	}
	return nil
}

// filters are the model's filters of one rule.
type filters struct {
	request, response *lbmodel.HeaderFilter
	redirect          *lbmodel.Redirect
	rewrite           *lbmodel.Rewrite
	cors              *lbmodel.CORS
}

// ruleFilters turns the filters of a rule (and of its single backendRef)
// into the model's, or says which npl-lbsync cannot serve. The filters of
// a backendRef among several (splitsBackends) are its own
// (backendRefFilter), checked here.
func ruleFilters(rule *gatewayv1.HTTPRouteRule) (filters, error) {
	var f filters
	all := rule.Filters
	if splitsBackends(rule) {
		for j, br := range rule.BackendRefs {
			if _, err := backendRefFilter(br); err != nil {
				return f, fmt.Errorf("backendRef %d: %w", j, err)
			}
		}
	} else {
		var err error
		if all, err = backendFilters(rule.Filters, rule.BackendRefs, func(br gatewayv1.HTTPBackendRef) []gatewayv1.HTTPRouteFilter { return br.Filters }); err != nil {
			return f, err
		}
	}
	seen := map[gatewayv1.HTTPRouteFilterType]bool{}
	for _, flt := range all {
		if seen[flt.Type] {
			return f, fmt.Errorf("filter %s given twice", flt.Type)
		}
		seen[flt.Type] = true
		switch flt.Type {
		case gatewayv1.HTTPRouteFilterRequestHeaderModifier:
			f.request = headerFilter(flt.RequestHeaderModifier)
		case gatewayv1.HTTPRouteFilterResponseHeaderModifier:
			f.response = headerFilter(flt.ResponseHeaderModifier)
		case gatewayv1.HTTPRouteFilterRequestRedirect:
			f.redirect = redirect(flt.RequestRedirect)
		case gatewayv1.HTTPRouteFilterURLRewrite:
			f.rewrite = rewrite(flt.URLRewrite)
		case gatewayv1.HTTPRouteFilterCORS:
			if flt.CORS == nil {
				return f, fmt.Errorf("filter CORS has no cors")
			}
			f.cors = cors(flt.CORS)
		default:
			return f, fmt.Errorf("filter %s is not supported", flt.Type)
		}
	}
	if f.redirect != nil && f.rewrite != nil {
		return f, fmt.Errorf("RequestRedirect and URLRewrite cannot be used together")
	}
	if f.redirect != nil && !lbmodel.ValidRedirectStatus(f.redirect.StatusCode) {
		return f, fmt.Errorf("redirect status code %d is not supported", f.redirect.StatusCode)
	}
	return f, nil
}

// splitsBackends reports whether rule sends its requests to its
// backendRefs as backends of their own (lbmodel.Rule.Backends, a pool
// each): it has several, and one of them has filters, which apply to the
// requests sent to it only.
func splitsBackends(rule *gatewayv1.HTTPRouteRule) bool {
	return len(rule.BackendRefs) > 1 &&
		slices.ContainsFunc(rule.BackendRefs, func(br gatewayv1.HTTPBackendRef) bool { return len(br.Filters) > 0 })
}

// backendRefFilter returns the request header filter of a backendRef among
// several (splitsBackends), the one filter npl-lbsync serves there: a load
// balancer answers or rewrites a request before it picks the backend.
func backendRefFilter(br gatewayv1.HTTPBackendRef) (*lbmodel.HeaderFilter, error) {
	var out *lbmodel.HeaderFilter
	for i, flt := range br.Filters {
		switch {
		case flt.Type != gatewayv1.HTTPRouteFilterRequestHeaderModifier:
			return nil, fmt.Errorf("filter %s of one backendRef among several is not supported", flt.Type)
		case i > 0:
			return nil, fmt.Errorf("filter %s given twice", flt.Type)
		}
		out = headerFilter(flt.RequestHeaderModifier)
	}
	return out, nil
}

// checkSplitPersistence refuses session persistence (the rule's own, or
// its backends' XBackendTrafficPolicy's: policy with withTrafficPolicy)
// on a rule that splits its requests between its backendRefs: each
// request picks its backend anew, so no session would stay on one.
func (b *build) checkSplitPersistence(rt *routeView, i int, policy *lbmodel.Policy) error {
	if rt.kind != KindHTTPRoute || !splitsBackends(&rt.http.Spec.Rules[i]) {
		return nil
	}
	if policy, _ = b.withTrafficPolicy(rt, i, policy.Clone()); policy != nil && policy.Persistence != nil {
		return fmt.Errorf("session persistence on a rule whose backendRefs have filters of their own is not supported (each request picks its backendRef anew)")
	}
	return nil
}

func headerFilter(h *gatewayv1.HTTPHeaderFilter) *lbmodel.HeaderFilter {
	if h == nil {
		return nil
	}
	out := &lbmodel.HeaderFilter{Remove: slices.Clone(h.Remove)}
	for _, s := range h.Set {
		out.Set = append(out.Set, lbmodel.Header{Name: string(s.Name), Value: s.Value})
	}
	for _, a := range h.Add {
		out.Add = append(out.Add, lbmodel.Header{Name: string(a.Name), Value: a.Value})
	}
	return out
}

func pathModifier(p *gatewayv1.HTTPPathModifier) *lbmodel.PathModifier {
	if p == nil {
		return nil
	}
	switch p.Type {
	case gatewayv1.FullPathHTTPPathModifier:
		if p.ReplaceFullPath != nil {
			return &lbmodel.PathModifier{Type: string(p.Type), Value: *p.ReplaceFullPath}
		}
	case gatewayv1.PrefixMatchHTTPPathModifier:
		if p.ReplacePrefixMatch != nil {
			return &lbmodel.PathModifier{Type: string(p.Type), Value: *p.ReplacePrefixMatch}
		}
	}
	return nil
}

func redirect(r *gatewayv1.HTTPRequestRedirectFilter) *lbmodel.Redirect {
	if r == nil {
		return nil
	}
	out := &lbmodel.Redirect{StatusCode: 302, Path: pathModifier(r.Path)}
	if r.StatusCode != nil {
		out.StatusCode = int32(*r.StatusCode)
	}
	if r.Scheme != nil {
		out.Scheme = *r.Scheme
	}
	if r.Hostname != nil {
		out.Hostname = string(*r.Hostname)
	}
	switch {
	case r.Port != nil:
		out.Port = *r.Port
	case out.Scheme == "https":
		out.Port = 443
	case out.Scheme == "http":
		out.Port = 80
	}
	return out
}

// defaultCORSMaxAge is the Access-Control-Max-Age of a CORS filter
// without maxAge: Gateway API's default.
const defaultCORSMaxAge = 5

// cors is the model of a CORS filter; Normalize checks its values.
func cors(c *gatewayv1.HTTPCORSFilter) *lbmodel.CORS {
	out := &lbmodel.CORS{AllowCredentials: c.AllowCredentials != nil && *c.AllowCredentials, MaxAgeSeconds: c.MaxAge}
	if out.MaxAgeSeconds == 0 {
		out.MaxAgeSeconds = defaultCORSMaxAge
	}
	for _, o := range c.AllowOrigins {
		out.AllowOrigins = append(out.AllowOrigins, string(o))
	}
	for _, m := range c.AllowMethods {
		out.AllowMethods = append(out.AllowMethods, string(m))
	}
	for _, h := range c.AllowHeaders {
		out.AllowHeaders = append(out.AllowHeaders, string(h))
	}
	for _, h := range c.ExposeHeaders {
		out.ExposeHeaders = append(out.ExposeHeaders, string(h))
	}
	return out
}

func rewrite(r *gatewayv1.HTTPURLRewriteFilter) *lbmodel.Rewrite {
	if r == nil {
		return nil
	}
	out := &lbmodel.Rewrite{Path: pathModifier(r.Path)}
	if r.Hostname != nil {
		out.Hostname = string(*r.Hostname)
	}
	return out
}

// addRules adds the rules and pools of one attached HTTPRoute.
func (b *build) addRules(at *attachment, lb *lbmodel.LoadBalancer) {
	rt := at.route
	for i := range rt.http.Spec.Rules {
		rule := &rt.http.Spec.Rules[i]
		f, _ := ruleFilters(rule) // checked by checkRoute
		base := lbmodel.Rule{RequestHeaders: f.request, ResponseHeaders: f.response, Redirect: f.redirect, Rewrite: f.rewrite, CORS: f.cors}
		switch {
		case f.redirect != nil:
		case splitsBackends(rule):
			base.Backends = b.splitBackends(rt, i)
		default:
			base.Pool = b.rulePool(rt, i)
		}
		if base.Pool == "" && base.Backends == nil {
			// A rule that answers by itself sends nothing on: what
			// changes the request has no use.
			base.RequestHeaders, base.Rewrite = nil, nil
			if f.redirect == nil {
				base.FixedStatus = 500
			}
		}
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []gatewayv1.HTTPRouteMatch{{}}
		}
		for _, m := range matches {
			r := base
			r.Path, r.PathType = matchPath(m.Path)
			if m.Method != nil {
				r.Method = string(*m.Method)
			}
			for _, h := range m.Headers {
				r.Headers = addHeaderMatch(r.Headers, lbmodel.ValueMatch{Name: string(h.Name), Value: h.Value,
					Regex: h.Type != nil && *h.Type == gatewayv1.HeaderMatchRegularExpression})
			}
			for _, q := range m.QueryParams {
				if !slices.ContainsFunc(r.Query, func(v lbmodel.ValueMatch) bool { return v.Name == string(q.Name) }) {
					r.Query = append(r.Query, lbmodel.ValueMatch{Name: string(q.Name), Value: q.Value,
						Regex: q.Type != nil && *q.Type == gatewayv1.QueryParamMatchRegularExpression})
				}
			}
			b.addRule(lb, r, at.hosts, rt, i)
		}
	}
}

// addHeaderMatch adds m to the header matches ms of a rule unless one has
// its name (case-insensitively): Gateway API counts the first match of a
// name, in an HTTPRoute's matches as in a GRPCRoute's.
func addHeaderMatch(ms []lbmodel.ValueMatch, m lbmodel.ValueMatch) []lbmodel.ValueMatch {
	if slices.ContainsFunc(ms, func(v lbmodel.ValueMatch) bool { return strings.EqualFold(v.Name, m.Name) }) {
		return ms
	}
	return append(ms, m)
}

// matchPath returns the model path of a path match: Prefix paths lose a
// trailing "/" (Gateway API ignores it), the default is the prefix "/".
func matchPath(m *gatewayv1.HTTPPathMatch) (string, lbmodel.PathType) {
	typ, value := gatewayv1.PathMatchPathPrefix, "/"
	if m != nil {
		if m.Type != nil {
			typ = *m.Type
		}
		if m.Value != nil {
			value = *m.Value
		}
	}
	switch typ {
	case gatewayv1.PathMatchExact:
		return value, lbmodel.PathExact
	case gatewayv1.PathMatchRegularExpression:
		return value, lbmodel.PathRegex
	}
	if t := strings.TrimRight(value, "/"); t != "" {
		value = t
	} else {
		value = "/"
	}
	return value, lbmodel.PathPrefix
}
