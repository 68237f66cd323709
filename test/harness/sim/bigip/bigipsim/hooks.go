package bigipsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Fault makes matching calls fail or slow down. go-bigip sleeps 10 s and
// retries on a 503 (and on "there is an active asynchronous task executing"),
// so tests should inject 500 or 502 unless they test that retry.
type Fault struct {
	// Method matches the HTTP method; empty matches any.
	Method string `json:"method,omitempty"`
	// Path is a regular expression matched against the URL path, for
	// example "ltm/pool/~npl-c~web$"; empty matches any.
	Path string `json:"path,omitempty"`
	// Status answers matching calls with this error status; 0 only delays.
	Status int `json:"status,omitempty"`
	// Message is the error message; a BIG-IP-like text when empty.
	Message string `json:"message,omitempty"`
	// Count ends the fault after this many matching calls; 0 for no limit.
	Count int `json:"count,omitempty"`
	// For ends the fault this long after it is injected; 0 for no limit.
	For time.Duration `json:"-"`
	// Latency delays matching calls before they are answered.
	Latency time.Duration `json:"-"`
}

// UnmarshalJSON reads a Fault with durations written as "250ms"; unknown
// keys are errors, so a typo does not inject a fault that matches everything.
func (f *Fault) UnmarshalJSON(b []byte) error {
	type plain Fault
	var w struct {
		plain
		For     string `json:"for,omitempty"`
		Latency string `json:"latency,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*f = Fault(w.plain)
	for _, d := range []struct {
		s   string
		dst *time.Duration
	}{{w.For, &f.For}, {w.Latency, &f.Latency}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("fault duration %q: %w", d.s, err)
		}
		*d.dst = v
	}
	return nil
}

// MarshalJSON writes a Fault with durations as "250ms".
func (f Fault) MarshalJSON() ([]byte, error) {
	type plain Fault
	w := struct {
		plain
		For     string `json:"for,omitempty"`
		Latency string `json:"latency,omitempty"`
	}{plain: plain(f)}
	if f.For > 0 {
		w.For = f.For.String()
	}
	if f.Latency > 0 {
		w.Latency = f.Latency.String()
	}
	return json.Marshal(w)
}

type fault struct {
	Fault
	id      int
	path    *regexp.Regexp
	left    int
	expires time.Time
}

// InjectFault adds a fault and returns its id for RemoveFault.
func (s *Server) InjectFault(f Fault) (int, error) {
	af := &fault{Fault: f, left: f.Count}
	if f.Path != "" {
		re, err := regexp.Compile(f.Path)
		if err != nil {
			return 0, fmt.Errorf("fault path: %w", err)
		}
		af.path = re
	}
	if f.For > 0 {
		af.expires = time.Now().Add(f.For)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultSeq++
	af.id = s.faultSeq
	s.faults = append(s.faults, af)
	return af.id, nil
}

// RemoveFault removes one fault.
func (s *Server) RemoveFault(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.id == id {
			s.faults = append(s.faults[:i], s.faults[i+1:]...)
			return
		}
	}
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// matchFault returns the first live fault that matches the call, and uses
// up one of its calls.
func (s *Server) matchFault(method, path string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	live := s.faults[:0]
	var hit *Fault
	for _, f := range s.faults {
		if !f.expires.IsZero() && now.After(f.expires) {
			continue
		}
		if hit == nil && (f.Method == "" || strings.EqualFold(f.Method, method)) && (f.path == nil || f.path.MatchString(path)) {
			c := f.Fault
			hit = &c
			if f.Count > 0 {
				f.left--
				if f.left == 0 {
					continue
				}
			}
		}
		live = append(live, f)
	}
	s.faults = live
	return hit
}

func writeFault(w http.ResponseWriter, f *Fault, path string) {
	msg := f.Message
	if msg == "" {
		msg = fmt.Sprintf("01070000:3: %s (fault injected by bigipsim on %s)", http.StatusText(f.Status), path)
	}
	writeResponse(w, errorf(f.Status, "%s", msg))
}

// Kinds of path the counters use.
const (
	KindLogin       = "login"
	KindToken       = "token"
	KindTransaction = "transaction"
	KindPool        = "pool"
	KindMember      = "member"
	KindVirtual     = "virtual"
	KindProfile     = "virtual-profile"
	KindPolicy      = "virtual-policy"
	KindNode        = "node"
	KindMonitor     = "monitor"
	KindPersistence = "persistence"
	KindFolder      = "folder"
	KindPartition   = "partition"
	KindLTMPolicy   = "ltm-policy"
	KindClientSSL   = "client-ssl"
	KindSSLCert     = "ssl-cert"
	KindSSLKey      = "ssl-key"
	KindUpload      = "upload"
	KindOther       = "other"
)

// kindOf classifies a URL path for the counters.
func kindOf(path string) string {
	switch {
	case path == loginPath:
		return KindLogin
	case strings.HasPrefix(path, tokensPath):
		return KindToken
	case path == txnPath || strings.HasPrefix(path, txnPath+"/"):
		return KindTransaction
	case strings.HasPrefix(path, uploadsPath):
		return KindUpload
	case !strings.HasPrefix(path, tmPrefix):
		return KindOther
	}
	s := strings.Split(strings.Trim(strings.TrimPrefix(path, tmPrefix), "/"), "/")
	if len(s) < 2 {
		return KindOther
	}
	switch s[0] + "/" + s[1] {
	case "ltm/pool":
		if len(s) > 3 && s[3] == "members" {
			return KindMember
		}
		return KindPool
	case "ltm/virtual":
		if len(s) > 3 && s[3] == "profiles" {
			return KindProfile
		}
		if len(s) > 3 && s[3] == "policies" {
			return KindPolicy
		}
		return KindVirtual
	case "ltm/node":
		return KindNode
	case "ltm/monitor":
		return KindMonitor
	case "ltm/persistence":
		return KindPersistence
	case "sys/folder":
		return KindFolder
	case "auth/partition":
		return KindPartition
	case "ltm/policy":
		return KindLTMPolicy
	case "ltm/profile":
		if len(s) > 2 && s[2] == "client-ssl" {
			return KindClientSSL
		}
	case "sys/file":
		if len(s) > 2 && s[2] == "ssl-cert" {
			return KindSSLCert
		}
		if len(s) > 2 && s[2] == "ssl-key" {
			return KindSSLKey
		}
	}
	return KindOther
}

func (s *Server) count(method, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method+" "+kindOf(path)]++
	if method != http.MethodGet && strings.HasPrefix(path, tmPrefix) {
		s.writes++
	}
}

// Calls returns how many calls the server received, by "METHOD kind" (for
// example "PUT pool", "GET virtual"; see the Kind constants), whatever their
// outcome, faults and authentication failures included.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

// Count returns how many calls of method on kind the server received.
func (s *Server) Count(method, kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method+" "+kind]
}

// Writes returns how many POST, PUT, PATCH and DELETE calls under /mgmt/tm/
// the server received, whatever their outcome.
func (s *Server) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// ResetCounters sets every counter to zero.
func (s *Server) ResetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = map[string]int{}
	s.writes = 0
}

// State is the configuration a Server holds, in a form tests compare.
type State struct {
	Partitions []string  `json:"partitions"`
	Pools      []Pool    `json:"pools"`
	Virtuals   []Virtual `json:"virtuals"`
	Nodes      []Node    `json:"nodes"`
	// Policies are LTM policies, drafts included.
	Policies          []Policy           `json:"policies"`
	ClientSSLProfiles []ClientSSLProfile `json:"clientSSLProfiles"`
	// Certificates and Keys are sys/file ssl-cert and ssl-key objects.
	Certificates []File `json:"certificates"`
	Keys         []File `json:"keys"`
	// Monitors and Persistence are the monitors and persistence profiles
	// made through the API (not the built-in ones).
	Monitors    []Derived `json:"monitors,omitempty"`
	Persistence []Derived `json:"persistence,omitempty"`
}

// Derived is a monitor or a persistence profile in State: its type (tcp,
// cookie, …), its parent, and its other properties but the ones every
// object has.
type Derived struct {
	FullPath     string         `json:"fullPath"`
	Type         string         `json:"type"`
	Description  string         `json:"description,omitempty"`
	DefaultsFrom string         `json:"defaultsFrom"`
	Properties   map[string]any `json:"properties"`
}

// Policy is an LTM policy in State; each rule reads as a line such as
// "r0: httpHost host equals [a.example.com]; httpUri path startsWith [/]
// -> forward /P/pool".
type Policy struct {
	FullPath    string   `json:"fullPath"`
	Description string   `json:"description,omitempty"`
	Status      string   `json:"status"`
	Rules       []string `json:"rules"`
}

// ClientSSLProfile is a client-ssl profile in State.
type ClientSSLProfile struct {
	FullPath    string `json:"fullPath"`
	Description string `json:"description,omitempty"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	SNIDefault  bool   `json:"sniDefault"`
	ServerName  string `json:"serverName,omitempty"`
}

// File is an ssl-cert or ssl-key in State.
type File struct {
	FullPath string `json:"fullPath"`
	Checksum string `json:"checksum"`
}

// Pool is a pool in State.
type Pool struct {
	FullPath    string `json:"fullPath"`
	Description string `json:"description,omitempty"`
	Monitor     string `json:"monitor,omitempty"`
	// LoadBalancingMode is empty for round-robin.
	LoadBalancingMode string   `json:"loadBalancingMode,omitempty"`
	Members           []Member `json:"members"`
}

// Member is a pool member in State.
type Member struct {
	FullPath string `json:"fullPath"`
	Address  string `json:"address"`
	Session  string `json:"session"`
	State    string `json:"state"`
	// Ratio is zero for the default ratio, 1.
	Ratio int `json:"ratio,omitempty"`
}

// Virtual is a virtual server in State.
type Virtual struct {
	FullPath                 string   `json:"fullPath"`
	Description              string   `json:"description,omitempty"`
	Destination              string   `json:"destination"`
	IPProtocol               string   `json:"ipProtocol"`
	Pool                     string   `json:"pool,omitempty"`
	SourceAddressTranslation string   `json:"sourceAddressTranslation"`
	Profiles                 []string `json:"profiles"`
	Policies                 []string `json:"policies,omitempty"`
	Persist                  []string `json:"persist,omitempty"`
}

// Node is a node in State.
type Node struct {
	FullPath string `json:"fullPath"`
	Address  string `json:"address"`
}

// ruleLine renders a policy rule for State.
func ruleLine(r policyRule) string {
	var conds, acts []string
	for _, c := range r.conditions {
		var parts []string
		for _, k := range []string{"not", "httpHost", "httpUri", "httpMethod", "httpHeader", "host", "path", "all", "queryString",
			"queryParameter", "equals", "startsWith", "endsWith", "contains"} {
			if c[k] != true {
				continue
			}
			parts = append(parts, k)
			if (k == "queryParameter" || k == "httpHeader") && str(c, "tmName") != "" {
				parts = append(parts, "name="+str(c, "tmName"))
			}
		}
		conds = append(conds, fmt.Sprintf("%s %v", strings.Join(parts, " "), c["values"]))
	}
	for _, a := range r.actions {
		at := ""
		if a["response"] == true {
			at = " at response"
		}
		switch {
		case a["forward"] == true:
			acts = append(acts, "forward "+str(a, "pool"))
		case a["reset"] == true:
			acts = append(acts, "reset")
		case a["httpReply"] == true:
			acts = append(acts, "redirect "+str(a, "location"))
		case a["httpHeader"] == true:
			for _, op := range []string{"replace", "insert", "remove"} {
				if a[op] == true {
					line := "header " + op + " " + str(a, "tmName")
					if op != "remove" {
						line += " " + str(a, "value")
					}
					acts = append(acts, line+at)
				}
			}
		case a["httpUri"] == true:
			for _, part := range []string{"path", "queryString", "value"} {
				if v := str(a, part); v != "" {
					acts = append(acts, "uri replace "+part+" "+v)
				}
			}
		case a["httpHost"] == true:
			acts = append(acts, "host replace "+str(a, "value"))
		}
	}
	return fmt.Sprintf("%s: %s -> %s", str(r.props, "name"), strings.Join(conds, "; "), strings.Join(acts, ", "))
}

// Dump returns the whole configuration, sorted by full path; members keep
// their order in the pool.
func (s *Server) Dump() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	out := State{Partitions: sortedKeys(st.folders), Pools: []Pool{}, Virtuals: []Virtual{}, Nodes: []Node{}}
	for _, fp := range sortedKeys(st.pools) {
		p := st.pools[fp]
		dp := Pool{FullPath: fp, Description: str(p.props, "description"), Monitor: str(p.props, "monitor"), Members: []Member{}}
		if mode := str(p.props, "loadBalancingMode"); mode != "round-robin" {
			dp.LoadBalancingMode = mode
		}
		for _, m := range p.members {
			dm := Member{FullPath: str(m, "fullPath"), Address: str(m, "address"), Session: str(m, "session"), State: str(m, "state")}
			if r := intOf(m["ratio"]); r != 1 {
				dm.Ratio = r
			}
			dp.Members = append(dp.Members, dm)
		}
		out.Pools = append(out.Pools, dp)
	}
	for _, fp := range sortedKeys(st.virtuals) {
		v := st.virtuals[fp]
		sat, _ := v.props["sourceAddressTranslation"].(map[string]any)
		dv := Virtual{
			FullPath: fp, Description: str(v.props, "description"), Destination: str(v.props, "destination"),
			IPProtocol: str(v.props, "ipProtocol"), Pool: str(v.props, "pool"), SourceAddressTranslation: str(sat, "type"),
			Profiles: []string{},
		}
		for _, p := range v.profiles {
			dv.Profiles = append(dv.Profiles, str(p, "fullPath"))
		}
		for _, p := range v.policies {
			dv.Policies = append(dv.Policies, str(p, "fullPath"))
		}
		for _, p := range v.persist {
			dv.Persist = append(dv.Persist, persistPath(p))
		}
		out.Virtuals = append(out.Virtuals, dv)
	}
	for _, fp := range sortedKeys(st.policies) {
		p := st.policies[fp]
		dp := Policy{FullPath: fp, Description: str(p.props, "description"), Status: str(p.props, "status"), Rules: []string{}}
		for _, r := range p.rules {
			dp.Rules = append(dp.Rules, ruleLine(r))
		}
		out.Policies = append(out.Policies, dp)
	}
	for _, fp := range sortedKeys(st.sslProfiles) {
		p := st.sslProfiles[fp]
		dp := ClientSSLProfile{FullPath: fp, Description: str(p, "description"), SNIDefault: str(p, "sniDefault") == "true"}
		if n := str(p, "serverName"); n != "none" {
			dp.ServerName = n
		}
		if certs, keys := chainFiles(p, "ssl-cert"), chainFiles(p, "ssl-key"); len(certs) == 1 && len(keys) == 1 {
			dp.Cert, dp.Key = certs[0], keys[0]
		}
		out.ClientSSLProfiles = append(out.ClientSSLProfiles, dp)
	}
	for _, fp := range sortedKeys(st.certs) {
		out.Certificates = append(out.Certificates, File{FullPath: fp, Checksum: str(st.certs[fp].props, "checksum")})
	}
	for _, fp := range sortedKeys(st.keys) {
		out.Keys = append(out.Keys, File{FullPath: fp, Checksum: str(st.keys[fp].props, "checksum")})
	}
	for _, fp := range sortedKeys(st.nodes) {
		out.Nodes = append(out.Nodes, Node{FullPath: fp, Address: str(st.nodes[fp], "address")})
	}
	out.Monitors, out.Persistence = dumpDerived(st.monitors), dumpDerived(st.persistence)
	return out
}

// dumpDerived lists the objects of all that are not built in, sorted by
// full path.
func dumpDerived(all map[string]map[string]obj) []Derived {
	var out []Derived
	for _, typ := range sortedKeys(all) {
		for _, fp := range sortedKeys(all[typ]) {
			m := all[typ][fp]
			if m["builtin"] == true {
				continue
			}
			d := Derived{FullPath: fp, Type: typ, Description: str(m, "description"), DefaultsFrom: str(m, "defaultsFrom"),
				Properties: map[string]any{}}
			for k, v := range m {
				if _, common := readBack[k]; !common && k != "defaultsFrom" {
					d.Properties[k] = deepCopy(v)
				}
			}
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Derived) int { return strings.Compare(a.FullPath, b.FullPath) })
	return out
}
