package api

// The load balancer as it crosses the wire. These types mirror the model of
// package lbmodel field by field, with the same JSON names, but they are
// the contract between two separately deployed binaries: a field is added
// here, with its meaning, when npl-edge serves it, and convert.go is the one
// place that maps them to and from the model.

// LoadBalancer is one load balancer of a cluster: the body of a PUT (inside
// LoadBalancerRequest), the answer to the GET of one, an item of List.
type LoadBalancer struct {
	// Name is the load balancer's name; it starts with "<cluster>--".
	Name string `json:"name"`
	// Service is the owning Service as "namespace/name", for logs and for
	// the readers of List.
	Service string `json:"service"`
	// RequestedVIP is the address the owner asked for; informative, the
	// edge serves VIPs.
	RequestedVIP string `json:"requestedVIP,omitempty"`
	// VIPs holds exactly one address in a PUT: the VIP to serve on. The
	// GET and List answers give the one served.
	VIPs []string `json:"vips,omitempty"`
	// Listeners are the frontends, one per protocol and port.
	Listeners []Listener `json:"listeners"`
	// Kind is "" or "L4" for a load balancer whose listeners each have a
	// pool, "L7" for one whose HTTP requests HTTP routes.
	Kind string `json:"kind,omitempty"`
	// Ingress is the owning Ingress as "namespace/name" of an L7 load
	// balancer of its own.
	Ingress string `json:"ingress,omitempty"`
	// Pools are the pools of an L7 load balancer, which its listeners share.
	Pools []Pool `json:"pools,omitempty"`
	// HTTP routes the requests of an L7 load balancer to its Pools.
	HTTP *HTTPRoutes `json:"http,omitempty"`
	// Gateway is the owning Gateway as "namespace/name" of an L7 load
	// balancer built from a Gateway and its routes.
	Gateway string `json:"gateway,omitempty"`
}

// Listener is one frontend port.
type Listener struct {
	// Port is the frontend port, 1-65535.
	Port int32 `json:"port"`
	// Protocol is TCP, UDP, HTTP, HTTPS or TLS.
	Protocol string `json:"protocol"`
	// Pool is the pool of a TCP or UDP listener; absent for HTTP, HTTPS
	// and TLS listeners.
	Pool Pool `json:"pool,omitzero"`
	// SNI are the routes of a TLS listener by server name, in the order
	// they are tried.
	SNI []SNIRoute `json:"sni,omitempty"`
	// Terminate makes a TLS listener terminate TLS and forward plain TCP.
	Terminate bool `json:"terminate,omitempty"`
	// ClientValidation makes an HTTPS listener of a Gateway verify its
	// clients' certificates; absent: it asks for none. An npl-edge that
	// does not know the field refuses the load balancer (400), so that no
	// edge serves the listener without the check.
	ClientValidation *ClientValidation `json:"clientValidation,omitempty"`
	// Hostnames are, on an HTTPS listener of a Gateway, the hostnames of
	// the Gateway listeners on its port ("" for one without hostname),
	// when two or more: a request whose Host another of them takes than
	// the one its TLS server name selected is answered 421. An npl-edge
	// that does not know the field refuses the load balancer (400).
	Hostnames []string `json:"hostnames,omitempty"`
}

// ClientValidation is how an HTTPS listener verifies its clients'
// certificates.
type ClientValidation struct {
	// CACertPEM are the CA certificates (PEM) a client's certificate must
	// chain to.
	CACertPEM string `json:"caCertPEM"`
	// Optional also serves clients without a certificate, or with one
	// that fails verification (Gateway API's AllowInsecureFallback).
	Optional bool `json:"optional,omitempty"`
}

// SNIRoute sends the TLS connections for a server name to a pool.
type SNIRoute struct {
	// Host is a host name, a wildcard "*.example.com", or empty for any.
	Host string `json:"host,omitempty"`
	// Pool names one of the load balancer's Pools.
	Pool string `json:"pool"`
}

// HTTPRoutes says which pool serves a request, and with which certificates
// the HTTPS and terminating TLS listeners serve.
type HTTPRoutes struct {
	// Rules are tried in order; the first that matches serves.
	Rules []Rule `json:"rules"`
	// DefaultPool serves the requests no rule matches; empty: 404.
	DefaultPool string `json:"defaultPool,omitempty"`
	// TLS are the certificates by Secret, without key material: the PEM
	// data travels in LoadBalancerRequest.Certificates.
	TLS []TLSCert `json:"tls,omitempty"`
}

// Rule sends the requests that match it to a pool, or answers them.
type Rule struct {
	// Host is a host name, a wildcard, or empty for every host.
	Host string `json:"host,omitempty"`
	// Path and PathType ("Exact", "Prefix", "RegularExpression") match the
	// request path.
	Path     string `json:"path"`
	PathType string `json:"pathType"`
	// Pool names the pool that serves; empty for a rule that answers by
	// itself (Redirect, FixedStatus).
	Pool string `json:"pool"`
	// Ports are the listener ports the rule serves on; empty: all.
	Ports []int32 `json:"ports,omitempty"`
	// Method is the request method the rule matches; empty: any.
	Method string `json:"method,omitempty"`
	// Headers and Query must all match.
	Headers []ValueMatch `json:"headers,omitempty"`
	Query   []ValueMatch `json:"query,omitempty"`
	// Order ranks rules that are otherwise equal, lowest first.
	Order int32 `json:"order,omitempty"`
	// RequestHeaders and ResponseHeaders change the headers of the request
	// sent to the pool and of the response sent back.
	RequestHeaders  *HeaderFilter `json:"requestHeaders,omitempty"`
	ResponseHeaders *HeaderFilter `json:"responseHeaders,omitempty"`
	// Redirect answers with a redirect.
	Redirect *Redirect `json:"redirect,omitempty"`
	// Rewrite changes the host or path of the request sent to the pool.
	Rewrite *Rewrite `json:"rewrite,omitempty"`
	// FixedStatus is the status a rule without Pool nor Redirect answers.
	FixedStatus int32 `json:"fixedStatus,omitempty"`
	// Backends, for a rule without Pool, Redirect or FixedStatus, are the
	// pools its requests are split between at random by weight, each with
	// its own request header filter (applied after the rule's).
	Backends []RuleBackend `json:"backends,omitempty"`
	// CORS answers the rule's cross-origin requests. An npl-edge older
	// than this field refuses it (unknown field), so that no edge serves
	// the rule without its answers.
	CORS *CORS `json:"cors,omitempty"`
}

// CORS is how a rule answers cross-origin requests: preflight requests
// (OPTIONS with Origin and Access-Control-Request-Method) by the edge, 204
// with the Access-Control-* headers when the origin is allowed, without
// them otherwise; the responses to the other requests from an allowed
// origin get Access-Control-Allow-Origin (the request's Origin),
// -Allow-Credentials and -Expose-Headers.
type CORS struct {
	// AllowOrigins: "*" alone, or <http or https>://<host>[:<port>], the
	// host's leftmost label "*" for one or more labels; lower case.
	AllowOrigins []string `json:"allowOrigins,omitempty"`
	// AllowCredentials answers Access-Control-Allow-Credentials: true.
	AllowCredentials bool `json:"allowCredentials,omitempty"`
	// AllowMethods a preflight request may ask for; "*" alone: any.
	AllowMethods []string `json:"allowMethods,omitempty"`
	// AllowHeaders a preflight request may ask for; "*" alone: any.
	AllowHeaders []string `json:"allowHeaders,omitempty"`
	// ExposeHeaders are the response headers a script may read.
	ExposeHeaders []string `json:"exposeHeaders,omitempty"`
	// MaxAgeSeconds is Access-Control-Max-Age of a preflight answer.
	MaxAgeSeconds int32 `json:"maxAgeSeconds"`
}

// RuleBackend is one of the backends of a rule (Rule.Backends).
type RuleBackend struct {
	// Pool names the pool that serves this share; empty answers it 500.
	Pool string `json:"pool,omitempty"`
	// Weight is the share: Weight of the sum of the backends' weights.
	Weight int32 `json:"weight"`
	// RequestHeaders changes the headers of the requests sent to Pool.
	RequestHeaders *HeaderFilter `json:"requestHeaders,omitempty"`
}

// ValueMatch tests a header or a query parameter.
type ValueMatch struct {
	// Name is the header (case-insensitive) or parameter (exact) name.
	Name string `json:"name"`
	// Value is compared exactly, or as a whole-value regular expression
	// when Regex is set.
	Value string `json:"value"`
	Regex bool   `json:"regex,omitempty"`
}

// Header is a header name and value.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HeaderFilter sets, adds and removes headers.
type HeaderFilter struct {
	Set    []Header `json:"set,omitempty"`
	Add    []Header `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// PathModifier replaces a request path.
type PathModifier struct {
	// Type is "ReplaceFullPath" or "ReplacePrefixMatch".
	Type  string `json:"type"`
	Value string `json:"value"`
}

// Redirect answers with a redirect to the request's URL with these parts
// replaced; an empty part keeps the request's.
type Redirect struct {
	Scheme   string        `json:"scheme,omitempty"`
	Hostname string        `json:"hostname,omitempty"`
	Port     int32         `json:"port,omitempty"`
	Path     *PathModifier `json:"path,omitempty"`
	// StatusCode is 301, 302, 303, 307 or 308.
	StatusCode int32 `json:"statusCode"`
}

// Rewrite changes the request sent to the pool.
type Rewrite struct {
	Hostname string        `json:"hostname,omitempty"`
	Path     *PathModifier `json:"path,omitempty"`
}

// TLSCert names a certificate of the HTTPS and terminating TLS listeners.
type TLSCert struct {
	// Secret is the Kubernetes Secret as "namespace/name"; the PEM data of
	// a PUT's Certificates entry of the same Secret goes with it.
	Secret string `json:"secret"`
	// Hosts are the host names it serves.
	Hosts []string `json:"hosts,omitempty"`
	// Fingerprint is the SHA-256 of the certificate chain's DER bytes.
	Fingerprint string `json:"fingerprint"`
	// Ports are the listener ports that serve it; empty: every HTTPS one.
	Ports []int32 `json:"ports,omitempty"`
}

// Pool is a named set of members.
type Pool struct {
	// Name is the pool's name.
	Name string `json:"name"`
	// AppProtocol is "" for HTTP/1.1 or "h2c" for HTTP/2 without TLS.
	AppProtocol string `json:"appProtocol,omitempty"`
	// Members are the backends.
	Members []Member `json:"members"`
	// InvalidWeight is the share of requests answered 500, in the unit of
	// the members' weights.
	InvalidWeight int32 `json:"invalidWeight,omitempty"`
	// Policy is how the members are picked, kept, checked and ramped up;
	// absent: HAProxy's defaults (round robin, a TCP check).
	Policy *Policy `json:"policy,omitempty"`
}

// Policy is a pool's traffic policy. Durations are in the unit their
// name says.
type Policy struct {
	// Persistence keeps a client on a member.
	Persistence *Persistence `json:"persistence,omitempty"`
	// HealthCheck is every member's check.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// Algorithm picks the member.
	Algorithm *Algorithm `json:"algorithm,omitempty"`
	// SlowStartSeconds ramps a member that comes up over this long.
	SlowStartSeconds int32 `json:"slowStartSeconds,omitempty"`
	// DrainSeconds is how long a terminating member stays, disabled.
	DrainSeconds *int32 `json:"drainSeconds,omitempty"`
	// MaxConnectionsPerMember caps each member's connections; 0: no cap.
	MaxConnectionsPerMember int32 `json:"maxConnectionsPerMember,omitempty"`
	// Timeouts, Retry and BackendTLS: pools of HTTP rules only.
	Timeouts   *Timeouts   `json:"timeouts,omitempty"`
	Retry      *Retry      `json:"retry,omitempty"`
	BackendTLS *BackendTLS `json:"backendTLS,omitempty"`
}

// Persistence keeps a client on a member.
type Persistence struct {
	// Type is "SourceIP", "Cookie" or "Header".
	Type string `json:"type"`
	// Name is the cookie's or header's name.
	Name string `json:"name,omitempty"`
	// TimeoutSeconds: a source address's idle time, a cookie's or header
	// session's lifetime; 0: none.
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// IdleTimeoutSeconds ends an idle cookie or header session.
	IdleTimeoutSeconds int32 `json:"idleTimeoutSeconds,omitempty"`
	// Permanent gives the cookie an expiry of TimeoutSeconds.
	Permanent bool `json:"permanent,omitempty"`
}

// HealthCheck is the active check of every member.
type HealthCheck struct {
	// Type is "TCP" or "HTTP".
	Type string `json:"type"`
	// Path and Host of an HTTP check's GET.
	Path string `json:"path,omitempty"`
	Host string `json:"host,omitempty"`
	// ExpectedStatuses are the healthy answers; absent: 200-399.
	ExpectedStatuses []StatusRange `json:"expectedStatuses,omitempty"`
	// IntervalSeconds, TimeoutSeconds, Rise and Fall; 0: the default.
	IntervalSeconds int32 `json:"intervalSeconds,omitempty"`
	TimeoutSeconds  int32 `json:"timeoutSeconds,omitempty"`
	Rise            int32 `json:"rise,omitempty"`
	Fall            int32 `json:"fall,omitempty"`
}

// StatusRange is the HTTP statuses Min to Max, both included.
type StatusRange struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

// Algorithm picks a member.
type Algorithm struct {
	// Type is "RoundRobin", "LeastConnections" or "ConsistentHash".
	Type string `json:"type"`
	// HashOn ("SourceIP", "Header", "Cookie") and HashName of a hash.
	HashOn   string `json:"hashOn,omitempty"`
	HashName string `json:"hashName,omitempty"`
}

// Timeouts of an HTTP request, in milliseconds; 0: none.
type Timeouts struct {
	RequestMillis        int32 `json:"requestMillis,omitempty"`
	BackendRequestMillis int32 `json:"backendRequestMillis,omitempty"`
}

// Retry of a failed HTTP request.
type Retry struct {
	// Attempts is how many retries, Codes the answers retried besides a
	// failed connection, BackoffMillis the wait before each.
	Attempts      int32   `json:"attempts"`
	Codes         []int32 `json:"codes,omitempty"`
	BackoffMillis int32   `json:"backoffMillis,omitempty"`
}

// BackendTLS is TLS to the members, verified.
type BackendTLS struct {
	// Hostname is the SNI and, without SubjectAltNames, the verified name.
	Hostname string `json:"hostname"`
	// SubjectAltNames are the names one of which the certificate carries.
	SubjectAltNames []SubjectAltName `json:"subjectAltNames,omitempty"`
	// CACertPEM are the CA certificates; SystemCAs the host's trust store.
	CACertPEM string `json:"caCertPEM,omitempty"`
	SystemCAs bool   `json:"systemCAs,omitempty"`
}

// SubjectAltName is a certificate name: Type "Hostname" or "URI".
type SubjectAltName struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// Member is one backend, nodeIP:nodePort in NodePortLocal mode.
type Member struct {
	IP   string `json:"ip"`
	Port int32  `json:"port"`
	// Enabled is false for a draining member: no new connection.
	Enabled bool `json:"enabled"`
	// Weight is 1-256; 0 means 1.
	Weight int32 `json:"weight,omitempty"`
}
