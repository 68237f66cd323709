package haproxy

import (
	"slices"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
)

// A rule's CORS (lbmodel.CORS) is rendered in two parts. Among the rule's
// actions, before its header filters change the request: the request's
// Origin, when the rule allows it, is kept in corsOriginVar; a preflight
// request (OPTIONS with Origin and Access-Control-Request-Method) keeps
// the method and headers it asks for (from an allowed origin) and is
// answered 204 by HAProxy, never sent to the pool. Among the
// after-response rules, which also change HAProxy's own answers: the
// Access-Control-* headers, on the responses of an allowed origin, those
// of a preflight on the 204 of an allowed one.
const (
	corsOriginVar  = "txn.npl_cors_origin"
	corsMethodVar  = "txn.npl_cors_method"
	corsHeadersVar = "txn.npl_cors_headers"
)

// corsPreflight is the condition of a preflight request.
const corsPreflight = "METH_OPTIONS { req.hdr(origin) -m found } { req.hdr(access-control-request-method) -m found }"

// renderCORSRequest writes the request part of the CORS c of rule i,
// chosen by the ACL sel.
func renderCORSRequest(c *lbmodel.CORS, i int, sel string, emit func(string)) {
	if len(c.AllowOrigins) > 0 {
		allowed := "npl_cors" + strconv.Itoa(i) + "_origin"
		if c.AllowOrigins[0] == "*" {
			emit("    acl " + allowed + " req.hdr(origin) -m found")
		} else {
			patterns := make([]string, len(c.AllowOrigins))
			for j, o := range c.AllowOrigins {
				patterns[j] = quote(lbmodel.CORSOriginPattern(o))
			}
			emit("    acl " + allowed + " " + quote("req.fhdr(origin),lower") + " -m reg -- " + strings.Join(patterns, " "))
		}
		emit("    http-request set-var(" + corsOriginVar + ") req.fhdr(origin) if " + sel + " " + allowed)
		fromAllowed := sel + " " + corsPreflight + " { var(" + corsOriginVar + ") -m found }"
		emit("    http-request set-var(" + corsMethodVar + ") req.fhdr(access-control-request-method) if " + fromAllowed)
		emit("    http-request set-var(" + corsHeadersVar + ") req.fhdr(access-control-request-headers) if " + fromAllowed +
			" { req.hdr(access-control-request-headers) -m found }")
	}
	emit("    http-request return status 204 if " + sel + " " + corsPreflight)
}

// renderCORSResponse writes the after-response part of the CORS c of the
// rule chosen by the ACL sel.
func renderCORSResponse(c *lbmodel.CORS, sel string, emit func(string)) {
	set := func(name, value, cond string) {
		emit("    http-after-response set-header " + name + " " + value + " if " + sel + " " + cond)
	}
	// The Access-Control-Allow-Origin of the response depends on the
	// request's Origin: a cache must not give it to another origin.
	emit("    http-after-response add-header vary origin if " + sel)
	if len(c.AllowOrigins) == 0 {
		return
	}
	allowed := "{ var(" + corsOriginVar + ") -m found }"
	preflight := "{ var(" + corsMethodVar + ") -m found }"
	set("access-control-allow-origin", quote("%[var("+corsOriginVar+")]"), allowed)
	if c.AllowCredentials {
		set("access-control-allow-credentials", "true", allowed)
	}
	expose := c.ExposeHeaders
	if c.AllowCredentials {
		// With credentials a browser reads "*" as a header name.
		expose = slices.DeleteFunc(slices.Clone(expose), func(h string) bool { return h == "*" })
	}
	if len(expose) > 0 {
		set("access-control-expose-headers", quote(logFormat(strings.Join(expose, ", "))), allowed)
	}
	switch {
	case len(c.AllowMethods) == 0:
	case c.AllowMethods[0] == "*":
		// The method asked for: "*" is no answer with credentials.
		set("access-control-allow-methods", quote("%[var("+corsMethodVar+")]"), preflight)
	default:
		set("access-control-allow-methods", quote(logFormat(strings.Join(c.AllowMethods, ", "))), preflight)
	}
	switch {
	case len(c.AllowHeaders) == 0:
	case c.AllowHeaders[0] == "*":
		set("access-control-allow-headers", quote("%[var("+corsHeadersVar+")]"), preflight+" { var("+corsHeadersVar+") -m found }")
	default:
		set("access-control-allow-headers", quote(logFormat(strings.Join(c.AllowHeaders, ", "))), preflight)
	}
	set("access-control-max-age", strconv.Itoa(int(c.MaxAgeSeconds)), preflight)
}
