package bigip

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// A pool's traffic policy (lbmodel.Policy) on BIG-IP: the pool's
// loadBalancingMode and slowRampTime, its members' connectionLimit, its
// monitor (ltm/monitor/tcp or http), and the persistence profile
// (ltm/persistence/source-addr or cookie) in the persist of the virtual
// that uses the pool. Monitors and persistence profiles are npl's own,
// tagged with the cluster (shared: no load balancer in the tag), named
// after their settings so that identical ones are shared, written before
// the pools and virtuals that use them and deleted after (sweep); the
// built-in /Common/tcp and /Common/source_addr are used where they match.
//
// A pool without a policy keeps what it has of these, as before policies
// existed; a pool with one has them all set (round robin, no slow ramp, no
// limit where the policy says nothing), and the tag of the pool (and of
// its virtual, for persist) says so, so that the BIG-IP defaults come back
// when the policy goes.

// BIG-IP's values.
const (
	leastConnections      = "least-connections-member"
	ratioLeastConnections = "ratio-least-connections-member"
	// defaultSlowRamp is a pool's slowRampTime by default, in seconds.
	defaultSlowRamp = 10
	// The built-in tcp monitor checks every 5 s and marks a member down
	// after 16 s without an answer: three checks.
	defaultMonitorInterval = 5
	defaultMonitorFall     = 3
	builtinSourceAddr      = "/Common/source_addr"
)

// The names of npl's monitors and persistence profiles, after the
// cluster's: <cluster>--hm-<hash>, <cluster>--persist-<hash>.
const (
	monitorNamePart     = "--hm-"
	persistenceNamePart = "--persist-"
)

var _ providers.PolicyCapable = (*provider)(nil)

// PolicyCapabilities says what of a pool's policy BIG-IP expresses
// (PolicyCapabilities, the package's statement).
func (p *provider) PolicyCapabilities() lbmodel.PolicyCapabilities { return PolicyCapabilities() }

// PolicyCapabilities says what of a pool's policy BIG-IP expresses.
// Consistent hashing (it needs hash persistence or an iRule), header
// persistence (universal persistence and an iRule), idle timeouts of a
// cookie, timeouts, retries and backend TLS are not done. A UDP pool has
// no health check the model can ask for (a TCP connect to a UDP node port
// fails).
func PolicyCapabilities() lbmodel.PolicyCapabilities {
	l4 := lbmodel.PolicySupport{
		Persistence:  []lbmodel.PersistenceType{lbmodel.PersistSourceIP},
		HealthChecks: []lbmodel.HealthCheckType{lbmodel.CheckTCP, lbmodel.CheckHTTP}, HealthCheckHost: true,
		Algorithms: []lbmodel.AlgorithmType{lbmodel.RoundRobin, lbmodel.LeastConnections},
		SlowStart:  true, MaxConnections: true,
	}
	udp := l4
	udp.HealthChecks, udp.HealthCheckHost = nil, false
	http := l4
	http.Persistence = []lbmodel.PersistenceType{lbmodel.PersistSourceIP, lbmodel.PersistCookie}
	return lbmodel.PolicyCapabilities{Provider: Name, TCP: l4, UDP: udp, HTTP: http}
}

// sharedState is a monitor or persistence profile as read: its header and
// every property.
type sharedState struct {
	objectHeader
	props map[string]any
}

func (s *sharedState) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &s.objectHeader); err != nil {
		return err
	}
	return json.Unmarshal(b, &s.props)
}

type sharedKind = objectKind[sharedState, map[string]any]

// The kinds of npl's monitors and persistence profiles.
var (
	tcpMonitorKind = sharedKind{what: "tcp monitor", plural: "tcp monitors", collection: "ltm/monitor/tcp",
		updateMethod: http.MethodPatch, shared: true}
	httpMonitorKind = sharedKind{what: "http monitor", plural: "http monitors", collection: "ltm/monitor/http",
		updateMethod: http.MethodPatch, shared: true}
	sourceAddrKind = sharedKind{what: "source-addr persistence profile", plural: "source-addr persistence profiles",
		collection: "ltm/persistence/source-addr", updateMethod: http.MethodPatch, shared: true}
	cookieKind = sharedKind{what: "cookie persistence profile", plural: "cookie persistence profiles",
		collection: "ltm/persistence/cookie", updateMethod: http.MethodPatch, shared: true}
	sharedKinds = []*sharedKind{&tcpMonitorKind, &httpMonitorKind, &sourceAddrKind, &cookieKind}
)

// sharedObject is a monitor or persistence profile as a policy wants it:
// its kind, its name, and the properties it sets.
type sharedObject struct {
	kind     *sharedKind
	name     string
	settings map[string]any
}

// policyObjects are the monitors and persistence profiles a load
// balancer's pools and virtuals use, each once, and what its policies
// cannot have exactly.
type policyObjects struct {
	objects  []sharedObject
	warnings []string
}

func (o *policyObjects) add(s sharedObject) {
	if !slices.ContainsFunc(o.objects, func(x sharedObject) bool { return x.name == s.name }) {
		o.objects = append(o.objects, s)
		slices.SortFunc(o.objects, func(a, b sharedObject) int { return cmp.Compare(a.name, b.name) })
	}
}

func (o *policyObjects) warn(format string, args ...any) {
	if w := fmt.Sprintf(format, args...); !slices.Contains(o.warnings, w) {
		o.warnings = append(o.warnings, w)
	}
}

func (o *policyObjects) gap(pool, field string) {
	o.warn("%s", lbmodel.PolicyGap{Pool: pool, Field: field, Provider: Name})
}

// names are the objects' names, which a sweep keeps.
func (o *policyObjects) names() map[string]bool {
	out := map[string]bool{}
	for _, s := range o.objects {
		out[s.name] = true
	}
	return out
}

// poolPolicy is what a policy sets on one pool.
type poolPolicy struct {
	// managed is set when the pool has a policy: slowRamp and
	// connectionLimit are then the provider's.
	managed         bool
	leastConns      bool
	monitor         string
	slowRamp        int32
	connectionLimit int32
	// persist is the persistence profile of the virtual that uses the
	// pool (nil for none): added to the objects by whoever uses it.
	persist *sharedObject
	// persistPath is its full path, or a built-in profile's.
	persistPath string
	// applied is the policy as applied: pl's without what BIG-IP does not
	// express of it (the pool's tag records it).
	applied *lbmodel.Policy
}

// policyFields are the pool fields a policy sets: what the checksum in
// the pool's tag covers.
type policyFields struct {
	Mode     string `json:"mode"`
	SlowRamp int32  `json:"slowRamp"`
	Limit    int32  `json:"limit"`
	Monitor  string `json:"monitor"`
}

func (f policyFields) sum() string {
	b, _ := json.Marshal(f) // plain data
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// appliedPolicy is the policy a pool's tag records, nil when it records
// none or the pool no longer has the fields that express it.
func appliedPolicy(pl *poolState) *lbmodel.Policy {
	t := readTag(pl.Description)
	if t.Policy == nil {
		return nil
	}
	f := policyFields{Mode: cmp.Or(pl.LoadBalancingMode, roundRobin), Monitor: strings.TrimSpace(pl.Monitor), Limit: t.Policy.MaxConnectionsPerMember}
	if pl.SlowRampTime != nil {
		f.SlowRamp = *pl.SlowRampTime
	}
	for _, m := range pl.MembersReference.Items {
		if m.ConnectionLimit != f.Limit {
			return nil
		}
	}
	if f.sum() != t.PolicySum {
		return nil
	}
	return t.Policy
}

// poolPolicy lays the policy of model pool pl out, adding its monitor to
// o; defaultMonitor is the monitor of a pool without a health check.
func (p *provider) poolPolicy(o *policyObjects, pl lbmodel.Pool, defaultMonitor string) poolPolicy {
	pp := poolPolicy{monitor: defaultMonitor}
	if pl.Policy == nil {
		return pp
	}
	pol := pl.Policy.Clone()
	pp.managed, pp.applied = true, pol
	pp.leastConns = pol.Algorithm != nil && pol.Algorithm.Type == lbmodel.LeastConnections
	pp.slowRamp, pp.connectionLimit = pol.SlowStartSeconds, pol.MaxConnectionsPerMember
	if c := pol.HealthCheck; c != nil {
		pp.monitor = p.monitorOf(o, pl.Name, c)
	}
	if s := pol.Persistence; s != nil {
		pp.persist, pp.persistPath = p.persistenceOf(o, pl.Name, s)
	}
	return pp
}

// httpPersistence is the persistence profile of the HTTP and HTTPS
// virtuals of an L7 load balancer, whose pools and their policies are
// pools and policies: a virtual persists for every pool its policy
// forwards to, so the profile applies only when every pool asks for the
// same; otherwise each pool's is reported and none applied.
func (p *provider) httpPersistence(o *policyObjects, pools []lbmodel.Pool, policies []poolPolicy) string {
	alike := !slices.ContainsFunc(policies, func(pp poolPolicy) bool { return pp.persistPath != policies[0].persistPath })
	if len(policies) == 0 || policies[0].persistPath == "" {
		alike = false
	}
	for i, pp := range policies {
		switch {
		case pp.persistPath == "":
		case alike && pp.persist != nil:
			o.add(*pp.persist)
		case !alike:
			o.warn("pool %s: policy persistence is not applied on BIG-IP: it persists per virtual server, and the pools of the "+
				"load balancer's HTTP listeners do not all persist alike", pools[i].Name)
			pp.applied.Persistence = nil
		}
	}
	if !alike {
		return ""
	}
	return policies[0].persistPath
}

// lbMode is the pool's loadBalancingMode: ratio-member or
// ratio-least-connections-member when a member has a weight, round-robin
// or least-connections-member otherwise.
func (pp poolPolicy) lbMode(members []lbmodel.Member) string {
	weighted := slices.ContainsFunc(members, func(m lbmodel.Member) bool { return m.Weight > 1 })
	switch {
	case pp.leastConns && weighted:
		return ratioLeastConnections
	case pp.leastConns:
		return leastConnections
	case weighted:
		return ratioMember
	}
	return roundRobin
}

// monitorOf returns the full path of the monitor of check c of pool pool,
// adding npl's to o: /Common/tcp when it asks for nothing else. c is
// changed to what is applied. BIG-IP's
// monitor has an interval and a timeout after which a member without an
// answer is down (the interval × fall, and a second), and a time after the
// first answer before a member is up again (the interval × (rise - 1));
// the timeout of one check is not expressed.
func (p *provider) monitorOf(o *policyObjects, pool string, c *lbmodel.HealthCheck) string {
	interval := cmp.Or(c.IntervalSeconds, defaultMonitorInterval)
	settings := map[string]any{
		"interval":    interval,
		"timeout":     interval*cmp.Or(c.Fall, defaultMonitorFall) + 1,
		"timeUntilUp": interval * (max(c.Rise, 1) - 1),
	}
	if c.TimeoutSeconds != 0 {
		o.gap(pool, "healthCheck.timeoutSeconds")
		c.TimeoutSeconds = 0
	}
	kind, parent := &tcpMonitorKind, "/Common/tcp"
	builtin := interval == defaultMonitorInterval && cmp.Or(c.Fall, defaultMonitorFall) == defaultMonitorFall && c.Rise <= 1
	switch {
	case c.Type == lbmodel.CheckTCP && builtin:
		return parent
	case c.Type == lbmodel.CheckHTTP:
		kind, parent = &httpMonitorKind, "/Common/http"
		// BIG-IP reads \r\n in a send string as the characters.
		settings["send"] = "GET " + c.Path + ` HTTP/1.0\r\n\r\n`
		if c.Host != "" {
			settings["send"] = "GET " + c.Path + ` HTTP/1.1\r\nHost: ` + c.Host + `\r\nConnection: Close\r\n\r\n`
		}
		settings["recv"] = `^HTTP/1\.[01] ` + statusPattern(c.ExpectedStatuses)
	}
	settings["defaultsFrom"] = parent
	s := sharedObject{kind: kind, name: p.sharedName(monitorNamePart, kind, settings), settings: settings}
	o.add(s)
	return fullPath(p.cfg.Partition, s.name)
}

// statusPattern is a regular expression of the statuses of ranges
// (200-399 when empty): (2[0-9][0-9]|30[0-4]).
func statusPattern(ranges []lbmodel.StatusRange) string {
	if len(ranges) == 0 {
		ranges = []lbmodel.StatusRange{{Min: 200, Max: 399}}
	}
	var in [600]bool
	for _, r := range ranges {
		for s := r.Min; s <= r.Max; s++ {
			in[s] = true
		}
	}
	var alts []string
	for h := 1; h <= 5; h++ {
		if !slices.Contains(in[h*100:h*100+100], false) {
			alts = append(alts, fmt.Sprintf("%d[0-9][0-9]", h))
			continue
		}
		for t := range 10 {
			var units []string
			for u := range 10 {
				if in[h*100+t*10+u] {
					units = append(units, strconv.Itoa(u))
				}
			}
			switch len(units) {
			case 0:
			case 1:
				alts = append(alts, fmt.Sprintf("%d%d%s", h, t, units[0]))
			case 10:
				alts = append(alts, fmt.Sprintf("%d%d[0-9]", h, t))
			default:
				alts = append(alts, fmt.Sprintf("%d%d[%s]", h, t, strings.Join(units, "")))
			}
		}
	}
	return "(" + strings.Join(alts, "|") + ")"
}

// persistenceOf returns the persistence profile of persistence s of pool
// pool (s changed to what is applied) (nil for the built-in /Common/source_addr, which keeps a client
// 180 s, BIG-IP's own timeout) and its full path. A cookie's expiration
// makes it permanent: a session cookie with a lifetime is not expressed.
func (p *provider) persistenceOf(o *policyObjects, pool string, s *lbmodel.Persistence) (*sharedObject, string) {
	var kind *sharedKind
	var settings map[string]any
	switch s.Type {
	case lbmodel.PersistSourceIP:
		if s.TimeoutSeconds == 0 {
			return nil, builtinSourceAddr
		}
		kind = &sourceAddrKind
		settings = map[string]any{"defaultsFrom": builtinSourceAddr, "timeout": strconv.Itoa(int(s.TimeoutSeconds))}
	case lbmodel.PersistCookie:
		kind = &cookieKind
		expiration := "0"
		if s.Permanent {
			expiration = formatExpiration(s.TimeoutSeconds)
		} else if s.TimeoutSeconds != 0 {
			o.gap(pool, "persistence.timeoutSeconds")
			s.TimeoutSeconds = 0
		}
		settings = map[string]any{"defaultsFrom": "/Common/cookie", "method": "insert", "cookieName": s.Name, "expiration": expiration}
	default:
		return nil, ""
	}
	obj := &sharedObject{kind: kind, name: p.sharedName(persistenceNamePart, kind, settings), settings: settings}
	return obj, fullPath(p.cfg.Partition, obj.name)
}

// formatExpiration spells seconds as a cookie's expiration, d:h:m:s.
func formatExpiration(s int32) string {
	return fmt.Sprintf("%d:%d:%d:%d", s/86400, s%86400/3600, s%3600/60, s%60)
}

// expirationSeconds reads an expiration BIG-IP shows: seconds, m:s, h:m:s
// or d:h:m:s; -1 when it does not parse.
func expirationSeconds(v string) int64 {
	parts := strings.Split(v, ":")
	if len(parts) > 4 {
		return -1
	}
	var total int64
	for i, unit := range []int64{1, 60, 3600, 86400}[:len(parts)] {
		n, err := strconv.ParseInt(parts[len(parts)-1-i], 10, 64)
		if err != nil || n < 0 {
			return -1
		}
		total += n * unit
	}
	return total
}

// sharedName names an object of kind by its settings.
func (p *provider) sharedName(part string, kind *sharedKind, settings map[string]any) string {
	b, err := json.Marshal(map[string]any{"kind": kind.collection, "settings": settings})
	if err != nil {
		panic(fmt.Sprintf("settings of %s: %v", kind.what, err)) // plain data
	}
	sum := sha256.Sum256(b)
	return p.cfg.common.ClusterName + part + hex.EncodeToString(sum[:8])
}

// sharedTag is the description of npl's shared objects: the cluster's,
// no load balancer's.
func (p *provider) sharedTag() string {
	return ownerTag{Owner: ownerName, Cluster: p.cfg.common.ClusterName, Shared: true}.String()
}

// ownsShared reports whether description is the cluster's shared tag.
func (p *provider) ownsShared(description string) bool {
	var t ownerTag
	return json.Unmarshal([]byte(description), &t) == nil && t.Owner == ownerName && t.Cluster == p.cfg.common.ClusterName && t.Shared
}

// sameSetting compares a property as read with what npl sends: as text,
// and an expiration by its seconds.
func sameSetting(key string, have, want any) bool {
	if key == "expiration" {
		h, _ := have.(string)
		w, _ := want.(string)
		return expirationSeconds(h) == expirationSeconds(w) && expirationSeconds(w) >= 0
	}
	return fmt.Sprint(have) == fmt.Sprint(want)
}
