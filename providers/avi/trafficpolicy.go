package avi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/vmware/alb-sdk/go/models"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// A pool's traffic policy (lbmodel.Policy) on the controller: fields of
// the Pool itself (lb_algorithm, lb_algorithm_hash,
// lb_algorithm_consistent_hash_hdr, connection_ramp_duration,
// graceful_disable_timeout, max_concurrent_connections_per_server) and two
// kinds of objects the pool refers to: a HealthMonitor
// (health_monitor_refs) and an ApplicationPersistenceProfile
// (application_persistence_profile_ref). Those are npl's own, marked with
// the cluster, named after their settings (ownedName) so that the pools of
// every load balancer that want the same settings share one, created
// before the pools that use them and deleted after (sweep); the system
// ones are used where they match. Every field name, enum value and range
// below is the controller's schema's (swagger/Pool.json, HealthMonitor.json,
// ApplicationPersistenceProfile.json of the pinned alb-sdk); the tests
// check them against it.
//
// A pool without a policy keeps the controller's defaults for all of
// these, as before policies existed; a pool with one has every field set
// (round robin, no ramp, no limit where the policy says nothing), so that
// what the policy leaves out is the model's default, not Avi's.

// The values of the pool fields.
const (
	algorithmRoundRobin       = "LB_ALGORITHM_ROUND_ROBIN"
	algorithmLeastConnections = "LB_ALGORITHM_LEAST_CONNECTIONS"
	algorithmConsistentHash   = "LB_ALGORITHM_CONSISTENT_HASH"
	hashSourceIP              = "LB_ALGORITHM_CONSISTENT_HASH_SOURCE_IP_ADDRESS"
	hashCustomHeader          = "LB_ALGORITHM_CONSISTENT_HASH_CUSTOM_HEADER"
	// maxRampMinutes is connection_ramp_duration's upper bound.
	maxRampMinutes = 300
	// maxGracefulMinutes is graceful_disable_timeout's upper bound.
	maxGracefulMinutes = 7200
)

// The values of the objects a pool refers to.
const (
	monitorTypeTCP  = "HEALTH_MONITOR_TCP"
	monitorTypeHTTP = "HEALTH_MONITOR_HTTP"
	// The defaults of a HealthMonitor, which System-TCP has.
	defaultSendInterval     = 10
	defaultReceiveTimeout   = 4
	defaultSuccessfulChecks = 2
	defaultFailedChecks     = 2
	// maxReceiveTimeout is receive_timeout's upper bound (send_interval's
	// is 3600, the model's too).
	maxReceiveTimeout = 2400

	persistClientIP   = "PERSISTENCE_TYPE_CLIENT_IP_ADDRESS"
	persistHTTPCookie = "PERSISTENCE_TYPE_HTTP_COOKIE"
	// systemPersistClientIP is the controller's client IP persistence
	// profile: its timeout is the controller's default, what a policy
	// without a timeout asks for.
	systemPersistClientIP = "System-Persistence-Client-IP"
	// maxIPPersistMinutes is ip_persistent_timeout's upper bound,
	// maxCookieMinutes the cookie timeout's.
	maxIPPersistMinutes = 720
	maxCookieMinutes    = 14400
	// persistentCookieVersion is the first API version whose cookie
	// persistence has is_persistent_cookie.
	persistentCookieVersion = "21.1.3"
)

// statusClasses are the values of http_response_code, by the first digit
// of the statuses they stand for.
var statusClasses = [...]string{1: "HTTP_1XX", 2: "HTTP_2XX", 3: "HTTP_3XX", 4: "HTTP_4XX", 5: "HTTP_5XX"}

var _ providers.PolicyCapable = (*Provider)(nil)

// PolicyCapabilities says what of a pool's policy Avi expresses
// (PolicyCapabilities, the package's statement).
func (p *Provider) PolicyCapabilities() lbmodel.PolicyCapabilities { return PolicyCapabilities() }

// PolicyCapabilities says what of a pool's policy Avi expresses. Header
// persistence is not: Avi's custom header persistence maps header values
// to servers configured by hand, it does not keep a client on the server
// it reached. A consistent hash on a cookie needs a DataScript. There is
// no idle timeout for a cookie. Timeouts, retries and backend TLS are not
// done yet. A UDP pool has no health check the model can ask for (a TCP
// connect to a UDP node port fails).
func PolicyCapabilities() lbmodel.PolicyCapabilities {
	algorithms := []lbmodel.AlgorithmType{lbmodel.RoundRobin, lbmodel.LeastConnections, lbmodel.ConsistentHash}
	checks := []lbmodel.HealthCheckType{lbmodel.CheckTCP, lbmodel.CheckHTTP}
	l4 := lbmodel.PolicySupport{
		Persistence:  []lbmodel.PersistenceType{lbmodel.PersistSourceIP},
		HealthChecks: checks, HealthCheckHost: true,
		Algorithms: algorithms, HashKeys: []lbmodel.HashKey{lbmodel.HashSourceIP},
		SlowStart: true, MaxConnections: true,
	}
	udp := l4
	udp.HealthChecks, udp.HealthCheckHost = nil, false
	http := l4
	http.Persistence = []lbmodel.PersistenceType{lbmodel.PersistSourceIP, lbmodel.PersistCookie}
	http.HashKeys = []lbmodel.HashKey{lbmodel.HashSourceIP, lbmodel.HashHeader}
	return lbmodel.PolicyCapabilities{Provider: Name, TCP: l4, UDP: udp, HTTP: http}
}

// poolPolicySpec is what a policy sets on the Pool itself; nil on a pool
// without a policy, whose fields are then the controller's.
type poolPolicySpec struct {
	Algorithm  string `json:"algorithm"`
	Hash       string `json:"hash,omitempty"`
	HashHeader string `json:"hashHeader,omitempty"`
	// RampMinutes is connection_ramp_duration.
	RampMinutes    int32 `json:"ramp"`
	MaxConnections int32 `json:"maxConnections,omitempty"`
	// Persistence names the ApplicationPersistenceProfile, "" for none.
	Persistence string `json:"persistence,omitempty"`
}

// monitorSpec is the part of an npl HealthMonitor the provider decides.
type monitorSpec struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Interval int32  `json:"interval"`
	Timeout  int32  `json:"timeout"`
	Rise     int32  `json:"rise"`
	Fall     int32  `json:"fall"`
	// Request, Exact and Codes are an HTTP check's http_monitor.
	Request string   `json:"request,omitempty"`
	Exact   bool     `json:"exact,omitempty"`
	Codes   []string `json:"codes,omitempty"`
	Markers markers  `json:"markers"`
}

// persistenceSpec is the part of an npl ApplicationPersistenceProfile the
// provider decides; the timeouts are in minutes.
type persistenceSpec struct {
	Name          string `json:"name"`
	Type          string `json:"type"`
	IPTimeout     int32  `json:"ipTimeout,omitempty"`
	CookieName    string `json:"cookieName,omitempty"`
	CookieTimeout int32  `json:"cookieTimeout,omitempty"`
	// PersistentCookie is is_persistent_cookie (21.1.3 and later).
	PersistentCookie bool    `json:"persistentCookie,omitempty"`
	Markers          markers `json:"markers"`
}

// persistenceProfile is an ApplicationPersistenceProfile with what the
// pinned alb-sdk's model (20.1) lacks: the cookie's is_persistent_cookie.
type persistenceProfile struct {
	models.ApplicationPersistenceProfile
	HTTPCookiePersistenceProfile *cookiePersistence `json:"http_cookie_persistence_profile,omitempty"`
}

type cookiePersistence struct {
	models.HTTPCookiePersistenceProfile
	IsPersistentCookie *bool `json:"is_persistent_cookie,omitempty"`
}

// The prefixes of the names of npl's monitors and persistence profiles,
// after the cluster's: <cluster>--hm-<hash>, <cluster>--persist-<hash>.
const (
	monitorNamePart     = "--hm-"
	persistenceNamePart = "--persist-"
)

var (
	monitorKind = objKind[models.HealthMonitor]{
		typ:      "healthmonitor",
		meta:     func(o *models.HealthMonitor) (**string, **string) { return &o.UUID, &o.LastModified },
		owner:    func(o *models.HealthMonitor) string { return markersOf(o.Markers).Cluster },
		byMarker: true,
	}
	persistenceKind = objKind[persistenceProfile]{
		typ:      "applicationpersistenceprofile",
		meta:     func(o *persistenceProfile) (**string, **string) { return &o.UUID, &o.LastModified },
		owner:    func(o *persistenceProfile) string { return markersOf(o.Markers).Cluster },
		byMarker: true,
	}
)

// ownedName names an object by its settings (spec without name and
// markers): identical settings share one object.
func (p *Provider) ownedName(part string, settings any) string {
	return lbmodel.Shorten(p.cfg.ClusterName+part+checksum(settings), maxNameLength)
}

// policyObjects are the monitors and persistence profiles the pools of a
// load balancer use, each once, sorted by name, and what the plan could
// not express exactly of their policies.
type policyObjects struct {
	monitors    []monitorSpec
	persistence []persistenceSpec
	warnings    []string
}

func (o *policyObjects) addMonitor(s monitorSpec) {
	if !slices.ContainsFunc(o.monitors, func(m monitorSpec) bool { return m.Name == s.Name }) {
		o.monitors = append(o.monitors, s)
		slices.SortFunc(o.monitors, func(a, b monitorSpec) int { return cmp.Compare(a.Name, b.Name) })
	}
}

func (o *policyObjects) addPersistence(s persistenceSpec) {
	if !slices.ContainsFunc(o.persistence, func(m persistenceSpec) bool { return m.Name == s.Name }) {
		o.persistence = append(o.persistence, s)
		slices.SortFunc(o.persistence, func(a, b persistenceSpec) int { return cmp.Compare(a.Name, b.Name) })
	}
}

func (o *policyObjects) warn(format string, args ...any) {
	w := fmt.Sprintf(format, args...)
	if !slices.Contains(o.warnings, w) {
		o.warnings = append(o.warnings, w)
	}
}

// names are the names of the objects, for the sweep to keep.
func (o *policyObjects) names() map[string]bool {
	out := map[string]bool{}
	for _, m := range o.monitors {
		out[m.Name] = true
	}
	for _, s := range o.persistence {
		out[s.Name] = true
	}
	return out
}

// poolPolicy lays the policy of model pool pl out into spec: the
// monitors of its Avi pools (defaultMonitor without a health check), their
// graceful_disable_timeout, what the policy sets on them and the record of
// it; it adds the objects they use to o and returns the policy as applied
// (pl's, where Avi's values differ from it, Avi's: rounded up to
// minutes, say). weights is the number of Avi pools the model pool is
// split into (a Gateway's pool of several member weights): a client is
// kept on a member only within the pool of its weight.
func (p *Provider) poolPolicy(o *policyObjects, spec *poolSpec, pl lbmodel.Pool, defaultMonitor string, weights int) *lbmodel.Policy {
	spec.Monitors, spec.Graceful, spec.Policy, spec.Record = []string{defaultMonitor}, gracefulDisableTimeout, nil, ""
	if pl.Policy == nil {
		return nil
	}
	applied := pl.Policy.Clone()
	if d := applied.DrainSeconds; d != nil {
		// npl-lbsync keeps a draining member DrainSeconds; the controller
		// lets its connections finish as long, in whole minutes.
		spec.Graceful = min(minutesUp(*d), maxGracefulMinutes)
		*d = spec.Graceful * 60
	}
	ps := &poolPolicySpec{Algorithm: algorithmRoundRobin, MaxConnections: applied.MaxConnectionsPerMember}
	if a := applied.Algorithm; a != nil {
		switch a.Type {
		case lbmodel.LeastConnections:
			ps.Algorithm = algorithmLeastConnections
		case lbmodel.ConsistentHash:
			ps.Algorithm, ps.Hash = algorithmConsistentHash, hashSourceIP
			if a.HashOn == lbmodel.HashHeader {
				ps.Hash, ps.HashHeader = hashCustomHeader, a.HashName
			}
			if weights > 1 {
				o.warn("pool %s: policy algorithm.type=ConsistentHash holds among members of one weight only on Avi (a pool group picks the pool of a weight first)", pl.Name)
			}
		}
	}
	if s := applied.SlowStartSeconds; s > 0 {
		ps.RampMinutes = min(minutesUp(s), maxRampMinutes)
		applied.SlowStartSeconds = ps.RampMinutes * 60
		if s%60 != 0 {
			o.warn("pool %s: policy slowStartSeconds %d is %d minutes on Avi (connection_ramp_duration is in whole minutes)", pl.Name, s, ps.RampMinutes)
		}
	}
	if c := applied.HealthCheck; c != nil {
		m := p.monitorOf(o, pl.Name, c)
		if m.Name != monitorTCP {
			o.addMonitor(m)
		}
		spec.Monitors = []string{m.Name}
	}
	if s := applied.Persistence; s != nil {
		ps.Persistence = p.persistenceOf(o, pl.Name, s)
		if weights > 1 {
			o.warn("pool %s: policy persistence holds among members of one weight only on Avi (a pool group picks the pool of a weight first)", pl.Name)
		}
	}
	spec.Policy = ps
	spec.Record = recordOf(applied, ps, spec.Monitors)
	return applied
}

// policyRecord is what the description of a pool with a policy holds: the
// policy as applied, and the checksum of the pool fields that express it,
// so that List reports the policy while the pool still has those fields.
type policyRecord struct {
	Policy *lbmodel.Policy `json:"policy"`
	Sum    string          `json:"sum"`
}

func recordOf(applied *lbmodel.Policy, ps *poolPolicySpec, monitors []string) string {
	b, err := json.Marshal(policyRecord{Policy: applied, Sum: policyFieldsSum(ps, monitors)})
	if err != nil {
		panic(fmt.Sprintf("record of a policy: %v", err)) // plain data
	}
	return string(b)
}

func policyFieldsSum(ps *poolPolicySpec, monitors []string) string {
	return checksum(struct {
		Policy   *poolPolicySpec `json:"policy"`
		Monitors []string        `json:"monitors"`
	}{ps, monitors})
}

// appliedPolicy is the policy a pool's description records, nil when it
// records none or the pool no longer has the fields that express it.
func appliedPolicy(o *models.Pool) *lbmodel.Policy {
	var r policyRecord
	if o == nil || json.Unmarshal([]byte(deref(o.Description)), &r) != nil || r.Policy == nil {
		return nil
	}
	if r.Sum != policyFieldsSum(poolPolicySpecOf(o), poolSpecOf(o, false).Monitors) {
		return nil
	}
	return r.Policy
}

// monitorOf is the HealthMonitor of check c of pool pool: System-TCP when
// it asks for nothing System-TCP does not do. Avi wants the receive
// timeout below the send interval (and at most 2400 s), and an HTTP
// check's good answers as whole classes (2XX): what differs from c is
// reported, and c changed to what is applied.
func (p *Provider) monitorOf(o *policyObjects, pool string, c *lbmodel.HealthCheck) monitorSpec {
	m := monitorSpec{Type: monitorTypeTCP, Interval: cmp.Or(c.IntervalSeconds, defaultSendInterval),
		Rise: cmp.Or(c.Rise, defaultSuccessfulChecks), Fall: cmp.Or(c.Fall, defaultFailedChecks),
		Markers: markers{Cluster: p.cfg.ClusterName}}
	if m.Interval == 1 {
		m.Interval, c.IntervalSeconds = 2, 2
		o.warn("pool %s: policy healthCheck.intervalSeconds 1 is 2 seconds on Avi (its receive timeout must be below the interval, and at least 1 second)", pool)
	}
	m.Timeout = c.TimeoutSeconds
	if m.Timeout == 0 {
		m.Timeout = min(defaultReceiveTimeout, m.Interval-1)
	}
	if want := m.Timeout; want >= m.Interval || want > maxReceiveTimeout {
		m.Timeout = min(m.Interval-1, maxReceiveTimeout)
		if c.TimeoutSeconds != 0 {
			c.TimeoutSeconds = m.Timeout
			o.warn("pool %s: policy healthCheck.timeoutSeconds %d is %d seconds on Avi (its receive timeout is below the interval, at most %d)",
				pool, want, m.Timeout, maxReceiveTimeout)
		}
	}
	if c.Type == lbmodel.CheckHTTP {
		m.Type = monitorTypeHTTP
		m.Request = "GET " + c.Path + " HTTP/1.0"
		if c.Host != "" {
			// The controller adds its own Host header (the server's name)
			// unless the request is exact.
			m.Request, m.Exact = "GET "+c.Path+" HTTP/1.1\r\nHost: "+c.Host+"\r\nConnection: close\r\n\r\n", true
		}
		var exact bool
		m.Codes, exact = responseClasses(c.ExpectedStatuses)
		if !exact {
			o.warn("pool %s: policy healthCheck.expectedStatuses %s are checked as %v on Avi (it checks whole classes of statuses)",
				pool, statusRanges(c.ExpectedStatuses), m.Codes)
			c.ExpectedStatuses = classRanges(m.Codes)
		}
	}
	if m.Type == monitorTypeTCP && m.Interval == defaultSendInterval && m.Timeout == defaultReceiveTimeout &&
		m.Rise == defaultSuccessfulChecks && m.Fall == defaultFailedChecks {
		return monitorSpec{Name: monitorTCP}
	}
	m.Name = p.ownedName(monitorNamePart, monitorSettings(m))
	return m
}

// monitorSettings is what names a monitor: its spec without name and
// markers.
func monitorSettings(m monitorSpec) monitorSpec {
	m.Name, m.Markers = "", markers{}
	return m
}

// responseClasses are the http_response_code classes that hold the
// statuses of ranges (200-399 when empty), and whether they hold nothing
// else.
func responseClasses(ranges []lbmodel.StatusRange) ([]string, bool) {
	if len(ranges) == 0 {
		ranges = []lbmodel.StatusRange{{Min: 200, Max: 399}}
	}
	var covered [len(statusClasses)]int32 // statuses of each class the ranges hold
	for _, r := range ranges {
		for s := r.Min; s <= r.Max; s++ {
			covered[s/100]++
		}
	}
	var out []string
	exact := true
	for class, n := range covered {
		if n > 0 {
			out = append(out, statusClasses[class])
			exact = exact && n == 100
		}
	}
	return out, exact
}

// classRanges are the statuses of http_response_code classes, as sorted,
// merged ranges.
func classRanges(codes []string) []lbmodel.StatusRange {
	var out []lbmodel.StatusRange
	for class, code := range statusClasses {
		if class == 0 || !slices.Contains(codes, code) {
			continue
		}
		lo, hi := int32(class*100), int32(class*100+99)
		if n := len(out); n > 0 && out[n-1].Max+1 == lo {
			out[n-1].Max = hi
			continue
		}
		out = append(out, lbmodel.StatusRange{Min: lo, Max: hi})
	}
	return out
}

// statusRanges spells ranges as the model's users write them: 200-204,300.
func statusRanges(ranges []lbmodel.StatusRange) string {
	out := ""
	for i, r := range ranges {
		if i > 0 {
			out += ","
		}
		if r.Min == r.Max {
			out += fmt.Sprint(r.Min)
		} else {
			out += fmt.Sprintf("%d-%d", r.Min, r.Max)
		}
	}
	if out == "" {
		return "200-399"
	}
	return out
}

// persistenceOf is the name of the ApplicationPersistenceProfile of
// persistence s of pool pool (s is changed to what is applied) (System-Persistence-Client-IP for client IP
// persistence without a timeout), adding npl's to o. Timeouts are whole
// minutes on Avi, rounded up (and reported when they were not), and at
// most what Avi allows. A cookie's timeout ends its session only for a
// persistent cookie (is_persistent_cookie, from API 21.1.3: the model's
// permanent cookie): Avi honours a session cookie past its timeout while
// the browser's session lasts, which is reported, as a permanent cookie
// is before 21.1.3.
func (p *Provider) persistenceOf(o *policyObjects, pool string, s *lbmodel.Persistence) string {
	spec := persistenceSpec{Markers: markers{Cluster: p.cfg.ClusterName}}
	limit := func(minutes, most int32) int32 {
		if s.TimeoutSeconds%60 != 0 || minutes > most {
			o.warn("pool %s: policy persistence.timeoutSeconds %d is %d minutes on Avi (whole minutes, at most %d)",
				pool, s.TimeoutSeconds, min(minutes, most), most)
		}
		s.TimeoutSeconds = min(minutes, most) * 60
		return min(minutes, most)
	}
	switch s.Type {
	case lbmodel.PersistSourceIP:
		if s.TimeoutSeconds == 0 {
			return systemPersistClientIP
		}
		spec.Type, spec.IPTimeout = persistClientIP, limit(minutesUp(s.TimeoutSeconds), maxIPPersistMinutes)
	case lbmodel.PersistCookie:
		spec.Type, spec.CookieName = persistHTTPCookie, s.Name
		if s.TimeoutSeconds > 0 {
			spec.CookieTimeout = limit(minutesUp(s.TimeoutSeconds), maxCookieMinutes)
		}
		switch {
		case s.Permanent && p.speaks(persistentCookieVersion):
			spec.PersistentCookie = true
		case s.Permanent:
			o.warn("pool %s: policy persistence.permanent needs Avi API %s or later, the controller speaks %s", pool,
				persistentCookieVersion, p.version)
			s.Permanent = false
		case s.TimeoutSeconds > 0:
			o.warn("pool %s: policy persistence.timeoutSeconds does not end a session cookie on Avi, which honours it "+
				"past its timeout while the browser's session lasts (a permanent cookie's ends)", pool)
		}
		if !s.Permanent {
			s.TimeoutSeconds = 0 // what ends a session cookie: the browser
		}
	}
	spec.Name = p.ownedName(persistenceNamePart, persistenceSettings(spec))
	o.addPersistence(spec)
	return spec.Name
}

// speaks reports whether the provider's API version is v or later.
func (p *Provider) speaks(v string) bool {
	have, ok := parseVersion(p.version)
	want, _ := parseVersion(v)
	return ok && slices.Compare(have[:], want[:]) >= 0
}

func persistenceSettings(s persistenceSpec) persistenceSpec {
	s.Name, s.Markers = "", markers{}
	return s
}

// minutesUp is s seconds in whole minutes, rounded up.
func minutesUp(s int32) int32 { return (s + 59) / 60 }

// Reading the pool's part back.

// poolPolicySpecOf reads what a policy sets of a pool, as the controller
// holds it.
func poolPolicySpecOf(o *models.Pool) *poolPolicySpec {
	s := &poolPolicySpec{Algorithm: deref(o.LbAlgorithm), Persistence: refName(o.ApplicationPersistenceProfileRef)}
	if s.Algorithm == algorithmConsistentHash {
		s.Hash = deref(o.LbAlgorithmHash)
		if s.Hash == hashCustomHeader {
			s.HashHeader = deref(o.LbAlgorithmConsistentHashHdr)
		}
	}
	if o.ConnectionRampDuration != nil {
		s.RampMinutes = *o.ConnectionRampDuration
	}
	if o.MaxConcurrentConnectionsPerServer != nil {
		s.MaxConnections = *o.MaxConcurrentConnectionsPerServer
	}
	return s
}

// setPoolPolicy writes s into the pool o.
func setPoolPolicy(o *models.Pool, s *poolPolicySpec) {
	if s == nil {
		return
	}
	o.LbAlgorithm = ptr(s.Algorithm)
	if s.Hash != "" {
		o.LbAlgorithmHash = ptr(s.Hash)
	}
	if s.HashHeader != "" {
		o.LbAlgorithmConsistentHashHdr = ptr(s.HashHeader)
	}
	o.ConnectionRampDuration = ptr(s.RampMinutes)
	if s.MaxConnections > 0 {
		o.MaxConcurrentConnectionsPerServer = ptr(s.MaxConnections)
	}
	if s.Persistence != "" {
		o.ApplicationPersistenceProfileRef = nameRef(persistenceKind.typ, s.Persistence)
	}
}

// The objects.

func (p *Provider) monitorModel(s monitorSpec) *models.HealthMonitor {
	o := &models.HealthMonitor{
		Name: ptr(s.Name), Type: ptr(s.Type), Markers: markerLabels(s.Markers),
		SendInterval: ptr(s.Interval), ReceiveTimeout: ptr(s.Timeout),
		SuccessfulChecks: ptr(s.Rise), FailedChecks: ptr(s.Fall),
	}
	if s.Type == monitorTypeHTTP {
		o.HTTPMonitor = &models.HealthMonitorHTTP{HTTPRequest: ptr(s.Request), HTTPResponseCode: slices.Clone(s.Codes)}
		if s.Exact {
			o.HTTPMonitor.ExactHTTPRequest = ptr(true)
		}
	}
	return o
}

func monitorSpecOf(o *models.HealthMonitor) monitorSpec {
	s := monitorSpec{Name: deref(o.Name), Type: deref(o.Type), Markers: markersOf(o.Markers)}
	for _, f := range []struct {
		to   *int32
		from *int32
	}{{&s.Interval, o.SendInterval}, {&s.Timeout, o.ReceiveTimeout}, {&s.Rise, o.SuccessfulChecks}, {&s.Fall, o.FailedChecks}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if h := o.HTTPMonitor; h != nil && s.Type == monitorTypeHTTP {
		s.Request = deref(h.HTTPRequest)
		s.Exact = h.ExactHTTPRequest != nil && *h.ExactHTTPRequest
		s.Codes = slices.Sorted(slices.Values(h.HTTPResponseCode))
	}
	return s
}

func (p *Provider) persistenceModel(s persistenceSpec) *persistenceProfile {
	o := &persistenceProfile{ApplicationPersistenceProfile: models.ApplicationPersistenceProfile{
		Name: ptr(s.Name), PersistenceType: ptr(s.Type), Markers: markerLabels(s.Markers)}}
	switch s.Type {
	case persistClientIP:
		o.IPPersistenceProfile = &models.IPPersistenceProfile{IPPersistentTimeout: ptr(s.IPTimeout)}
	case persistHTTPCookie:
		c := &cookiePersistence{HTTPCookiePersistenceProfile: models.HTTPCookiePersistenceProfile{CookieName: ptr(s.CookieName)}}
		if s.CookieTimeout > 0 {
			c.Timeout = ptr(s.CookieTimeout)
		}
		if s.PersistentCookie {
			c.IsPersistentCookie = ptr(true)
		}
		o.HTTPCookiePersistenceProfile = c
	}
	return o
}

func persistenceSpecOf(o *persistenceProfile) persistenceSpec {
	s := persistenceSpec{Name: deref(o.Name), Type: deref(o.PersistenceType), Markers: markersOf(o.Markers)}
	if ip := o.IPPersistenceProfile; ip != nil && s.Type == persistClientIP && ip.IPPersistentTimeout != nil {
		s.IPTimeout = *ip.IPPersistentTimeout
	}
	if c := o.HTTPCookiePersistenceProfile; c != nil && s.Type == persistHTTPCookie {
		s.CookieName = deref(c.CookieName)
		if c.Timeout != nil {
			s.CookieTimeout = *c.Timeout
		}
		s.PersistentCookie = c.IsPersistentCookie != nil && *c.IsPersistentCookie
	}
	return s
}
