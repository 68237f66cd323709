package gateway

import (
	"fmt"
	"regexp"

	"github.com/nodeportlocal/npl/lbmodel"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// gRPC requests are HTTP/2 POSTs to /<service>/<method>: a GRPCRoute is
// served as HTTP rules of the listeners it attaches to, whose pools speak
// h2c (lbmodel.AppProtocolH2C).

// checkGRPCRule says why a GRPCRoute rule cannot be served: a filter other
// than the header modifiers, filters on one backendRef among several, or a
// regular expression that does not compile.
func checkGRPCRule(rule *gatewayv1.GRPCRouteRule) (gatewayv1.RouteConditionReason, error) {
	if _, _, err := grpcFilters(rule); err != nil {
		return gatewayv1.RouteReasonUnsupportedValue, err
	}
	for _, m := range rule.Matches {
		if m.Method != nil && m.Method.Type != nil && *m.Method.Type == gatewayv1.GRPCMethodMatchRegularExpression {
			for _, v := range []*string{m.Method.Service, m.Method.Method} {
				if v == nil {
					continue
				}
				if err := lbmodel.CheckRegex(*v); err != nil {
					return gatewayv1.RouteReasonUnsupportedValue, fmt.Errorf("method regular expression %q: %w", *v, err)
				}
			}
		}
		for _, h := range m.Headers {
			if h.Type != nil && *h.Type == gatewayv1.GRPCHeaderMatchRegularExpression {
				if err := lbmodel.CheckRegex(h.Value); err != nil {
					return gatewayv1.RouteReasonUnsupportedValue, fmt.Errorf("header %s regular expression %q: %w", h.Name, h.Value, err)
				}
			}
		}
	}
	return "", nil
}

// grpcFilters returns the header filters of a GRPCRoute rule (and of its
// single backendRef), or says which npl-lbsync cannot serve.
func grpcFilters(rule *gatewayv1.GRPCRouteRule) (request, response *lbmodel.HeaderFilter, err error) {
	all, err := backendFilters(rule.Filters, rule.BackendRefs, func(br gatewayv1.GRPCBackendRef) []gatewayv1.GRPCRouteFilter { return br.Filters })
	if err != nil {
		return nil, nil, err
	}
	seen := map[gatewayv1.GRPCRouteFilterType]bool{}
	for _, f := range all {
		if seen[f.Type] {
			return nil, nil, fmt.Errorf("filter %s given twice", f.Type)
		}
		seen[f.Type] = true
		switch f.Type {
		case gatewayv1.GRPCRouteFilterRequestHeaderModifier:
			request = headerFilter(f.RequestHeaderModifier)
		case gatewayv1.GRPCRouteFilterResponseHeaderModifier:
			response = headerFilter(f.ResponseHeaderModifier)
		default:
			return nil, nil, fmt.Errorf("filter %s is not supported", f.Type)
		}
	}
	return request, response, nil
}

// addGRPCRules adds the rules and pools of one attached GRPCRoute: per
// rule match and effective host, a rule on the path of its method; a rule
// whose backendRefs are all invalid answers 500, the pool of one with some
// invalid answers their share 500 (an HTTP 500, which gRPC clients see as
// an error).
func (b *build) addGRPCRules(at *attachment, lb *lbmodel.LoadBalancer) {
	rt := at.route
	for i := range rt.grpc.Spec.Rules {
		rule := &rt.grpc.Spec.Rules[i]
		req, resp, _ := grpcFilters(rule) // checked by checkRoute
		base := lbmodel.Rule{RequestHeaders: req, ResponseHeaders: resp, Pool: b.rulePool(rt, i)}
		if base.Pool == "" {
			base.RequestHeaders, base.FixedStatus = nil, 500
		}
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []gatewayv1.GRPCRouteMatch{{}}
		}
		for _, m := range matches {
			r := base
			r.Path, r.PathType = grpcPath(m.Method)
			for _, h := range m.Headers {
				r.Headers = addHeaderMatch(r.Headers, lbmodel.ValueMatch{Name: string(h.Name), Value: h.Value,
					Regex: h.Type != nil && *h.Type == gatewayv1.GRPCHeaderMatchRegularExpression})
			}
			b.addRule(lb, r, at.hosts, rt, i)
		}
	}
}

// grpcPath is the path match of a gRPC method match: every path without
// one; /<service>/<method> exactly; the prefix /<service> for a service
// alone; a regular expression for a method alone (any service) and for
// the RegularExpression type.
func grpcPath(m *gatewayv1.GRPCMethodMatch) (string, lbmodel.PathType) {
	if m == nil {
		return "/", lbmodel.PathPrefix
	}
	var service, method string
	if m.Service != nil {
		service = *m.Service
	}
	if m.Method != nil {
		method = *m.Method
	}
	if m.Type != nil && *m.Type == gatewayv1.GRPCMethodMatchRegularExpression {
		if service == "" {
			service = "[^/]+"
		}
		if method == "" {
			method = "[^/]+"
		}
		return "/(?:" + service + ")/(?:" + method + ")", lbmodel.PathRegex
	}
	switch {
	case service != "" && method != "":
		return "/" + service + "/" + method, lbmodel.PathExact
	case service != "":
		return "/" + service, lbmodel.PathPrefix
	case method != "":
		return "/[^/]+/" + regexp.QuoteMeta(method), lbmodel.PathRegex
	}
	return "/", lbmodel.PathPrefix
}
