package lbmodel

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// CORS is how a rule answers cross-origin requests (Gateway API's HTTPRoute
// CORS filter): the load balancer answers preflight requests (OPTIONS with
// Origin and Access-Control-Request-Method) itself, 204 with the
// Access-Control-* headers when the origin is allowed and without them
// otherwise, and adds Access-Control-Allow-Origin (echoing the request's
// Origin), -Allow-Credentials and -Expose-Headers to the responses of the
// other requests from an allowed origin.
type CORS struct {
	// AllowOrigins are the origins allowed, sorted: "*" alone for every
	// origin, else <scheme>://<host>[:<port>] with scheme http or https
	// and a host name whose leftmost label may be "*" (one or more labels,
	// "*" alone for every host). Without a port the scheme's default port
	// is meant. Lower case.
	AllowOrigins []string `json:"allowOrigins,omitempty"`
	// AllowCredentials answers Access-Control-Allow-Credentials: true.
	AllowCredentials bool `json:"allowCredentials,omitempty"`
	// AllowMethods are the methods a preflight request may ask for,
	// sorted; "*" alone allows any, answered with the method asked for.
	AllowMethods []string `json:"allowMethods,omitempty"`
	// AllowHeaders are the request header names a preflight request may
	// ask for, sorted case-insensitively; "*" alone allows any, answered
	// with the names asked for.
	AllowHeaders []string `json:"allowHeaders,omitempty"`
	// ExposeHeaders are the response header names a script may read,
	// sorted case-insensitively; "*" stands for all of them, except with
	// AllowCredentials, where a browser reads it as a name and it is not
	// sent.
	ExposeHeaders []string `json:"exposeHeaders,omitempty"`
	// MaxAgeSeconds is how long a client may keep the answer to a
	// preflight request (Access-Control-Max-Age), at least 1.
	MaxAgeSeconds int32 `json:"maxAgeSeconds"`
}

// Bounds of a rule's CORS: Gateway API's limits of its lists and names.
const (
	MaxCORSItems      = 64
	maxCORSOriginLen  = 253
	maxCORSHeaderName = 256
)

// corsOriginRE is an origin of CORS.AllowOrigins other than "*" (Gateway
// API's CORSOrigin in lower case): a scheme, a host name (its leftmost
// label "*", or "*" alone) and an optional port. It holds no character
// HAProxy, a regular expression or a header would treat specially other
// than "." and "*", which CORSOriginPattern escapes.
var corsOriginRE = regexp.MustCompile(`^https?://(\*|(\*\.)?([a-z0-9-]+\.)*[a-z0-9-]+)(:[0-9]{1,5})?$`)

// normalizeCORS checks the CORS of a rule and returns a canonical copy:
// origins lower-cased and sorted, methods sorted, header names sorted
// case-insensitively, each given once; "*" alone in its list.
func normalizeCORS(c *CORS) (*CORS, error) {
	if c == nil {
		return nil, nil
	}
	out := CORS{AllowCredentials: c.AllowCredentials, MaxAgeSeconds: c.MaxAgeSeconds}
	if c.MaxAgeSeconds < 1 {
		return nil, fmt.Errorf("cors: maxAgeSeconds %d is not positive", c.MaxAgeSeconds)
	}
	var err error
	same := func(s string) string { return s }
	origins := make([]string, len(c.AllowOrigins))
	for i, o := range c.AllowOrigins {
		origins[i] = strings.ToLower(o)
	}
	if out.AllowOrigins, err = corsList("allowOrigins", origins, func(o string) error {
		if o == "*" {
			return nil
		}
		if len(o) > maxCORSOriginLen || !corsOriginRE.MatchString(o) {
			return fmt.Errorf("%q is not * nor <http or https>://<host>[:<port>]", o)
		}
		_, hostPort, _ := strings.Cut(o, "://")
		if _, port, ok := strings.Cut(hostPort, ":"); ok {
			if p, _ := strconv.Atoi(port); !validPort(int32(p)) {
				return fmt.Errorf("%q: port %s is out of 1-65535", o, port)
			}
		}
		return nil
	}, same); err != nil {
		return nil, err
	}
	if out.AllowMethods, err = corsList("allowMethods", c.AllowMethods, func(m string) error {
		if !isToken(m) {
			return fmt.Errorf("%q is not a method", m)
		}
		return nil
	}, same); err != nil {
		return nil, err
	}
	headerName := func(n string) error {
		if !isToken(n) || len(n) > maxCORSHeaderName {
			return fmt.Errorf("%q is not a header name", n)
		}
		return nil
	}
	if out.AllowHeaders, err = corsList("allowHeaders", c.AllowHeaders, headerName, strings.ToLower); err != nil {
		return nil, err
	}
	if out.ExposeHeaders, err = corsList("exposeHeaders", c.ExposeHeaders, headerName, strings.ToLower); err != nil {
		return nil, err
	}
	return &out, nil
}

// corsList checks one list of a CORS (what names it): at most
// MaxCORSItems, each value valid (check) and given once as fold makes it,
// "*" alone but in exposeHeaders (where Gateway API lets it stand beside
// names). It returns a sorted copy, nil for none.
func corsList(what string, vs []string, check func(string) error, fold func(string) string) ([]string, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	if len(vs) > MaxCORSItems {
		return nil, fmt.Errorf("cors: %s: %d values, more than %d", what, len(vs), MaxCORSItems)
	}
	out := slices.Clone(vs)
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(fold(a), fold(b)), cmp.Compare(a, b)) })
	for i, v := range out {
		if err := check(v); err != nil {
			return nil, fmt.Errorf("cors: %s: %w", what, err)
		}
		if i > 0 && fold(out[i-1]) == fold(v) {
			return nil, fmt.Errorf("cors: %s: %q given twice", what, v)
		}
	}
	if len(out) > 1 && slices.Contains(out, "*") && what != "exposeHeaders" {
		return nil, fmt.Errorf("cors: %s: * stands alone", what)
	}
	return out, nil
}

// CORSOriginPattern is the regular expression, anchored at both ends, of
// the request Origin values (lower-cased) that origin of
// CORS.AllowOrigins allows, other than "*": "*." stands for one or more
// labels, a host "*" for any host, and the scheme's default port may be
// given or not.
func CORSOriginPattern(origin string) string {
	scheme, rest, _ := strings.Cut(origin, "://")
	host, port, hasPort := strings.Cut(rest, ":")
	defaultPort := map[string]string{"http": "80", "https": "443"}[scheme]
	var b strings.Builder
	b.WriteString("^" + scheme + "://")
	switch {
	case host == "*":
		b.WriteString(`[a-z0-9.-]+`)
	case strings.HasPrefix(host, "*."):
		b.WriteString(`([a-z0-9-]+\.)+` + regexp.QuoteMeta(host[2:]))
	default:
		b.WriteString(regexp.QuoteMeta(host))
	}
	switch {
	case !hasPort || port == defaultPort:
		b.WriteString("(:" + defaultPort + ")?")
	default:
		b.WriteString(":" + port)
	}
	return b.String() + "$"
}

// CORSUnsupported returns the ErrUnsupported error (UnsupportedRule) of
// the first rule of lb that answers cross-origin requests (Rule.CORS), for
// a provider that cannot: without its answers a browser refuses the
// responses the route is there to share. Nil when no rule has one.
func CORSUnsupported(lb *LoadBalancer) error {
	if lb.HTTP == nil {
		return nil
	}
	for _, r := range lb.HTTP.Rules {
		if r.CORS != nil {
			return UnsupportedRule(r, "cors (cross-origin requests, the HTTPRoute CORS filter)")
		}
	}
	return nil
}

func (c *CORS) clone() *CORS {
	if c == nil {
		return nil
	}
	out := *c
	out.AllowOrigins = slices.Clone(c.AllowOrigins)
	out.AllowMethods = slices.Clone(c.AllowMethods)
	out.AllowHeaders = slices.Clone(c.AllowHeaders)
	out.ExposeHeaders = slices.Clone(c.ExposeHeaders)
	return &out
}
