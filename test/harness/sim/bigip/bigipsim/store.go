package bigipsim

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// obj is one configuration object as JSON properties. Objects keep the
// properties clients send, so a simulator round-trip looks like BIG-IP's.
type obj = map[string]any

// store is the whole configuration. It is not safe for concurrent use; the
// Server serialises access.
type store struct {
	gen      int64
	folders  map[string]obj // partition name -> folder
	pools    map[string]*pool
	virtuals map[string]*virtual
	nodes    map[string]obj
	monitors map[string]map[string]obj // monitor type -> full path -> monitor
	// persistence are persistence profiles: type -> full path -> profile.
	persistence map[string]map[string]obj
	// policies are LTM policies by full path, drafts under /P/Drafts/.
	policies    map[string]*policy
	sslProfiles map[string]obj // client-ssl profiles by full path
	certs       map[string]*sslFile
	keys        map[string]*sslFile
	// uploads are the files uploaded for sys/file objects, by name. They
	// are not configuration: a transaction's copy shares them.
	uploads map[string][]byte
}

type pool struct {
	props   obj
	members []obj // in insertion order, as BIG-IP lists them
}

type virtual struct {
	props    obj
	profiles []obj
	policies []obj
	// persist are the persistence profiles, as BIG-IP lists them in the
	// virtual's persist property.
	persist []obj
	dest    endpoint // parsed destination, to find clashes quickly
}

const (
	commonPartition = "Common"
	selfLinkBase    = "https://localhost/mgmt/tm/"
	selfLinkVersion = "?ver=17.1.0"
)

// builtinMonitors are the monitors every BIG-IP has in /Common.
var builtinMonitors = map[string]string{
	"tcp":           "tcp",
	"udp":           "udp",
	"http":          "http",
	"https":         "https",
	"icmp":          "icmp",
	"gateway-icmp":  "gateway_icmp",
	"tcp-half-open": "tcp_half_open",
}

// builtinPersistence are the persistence profiles every BIG-IP has in
// /Common, by type, and their properties (as BIG-IP 14.1 answers them).
var builtinPersistence = map[string]string{"source-addr": "source_addr", "cookie": "cookie"}

var builtinPersistenceProps = map[string]obj{
	"source-addr": {"hashAlgorithm": "default", "mapProxies": "enabled", "mapProxyAddress": "none", "mapProxyClass": "none",
		"mask": "none", "matchAcrossPools": "disabled", "matchAcrossServices": "disabled", "matchAcrossVirtuals": "disabled",
		"mirror": "disabled", "overrideConnectionLimit": "disabled", "timeout": "180"},
	"cookie": {"alwaysSend": "disabled", "cookieEncryption": "disabled", "cookieName": "none", "encryptCookiePoolname": "disabled",
		"expiration": "0", "hashLength": 0, "hashOffset": 0, "httponly": "enabled", "matchAcrossPools": "disabled",
		"matchAcrossServices": "disabled", "matchAcrossVirtuals": "disabled", "method": "insert", "mirror": "disabled",
		"overrideConnectionLimit": "disabled", "secure": "enabled", "timeout": "180"},
}

// builtinProfiles are the /Common profiles a virtual may reference, with the
// ipProtocol each needs ("" for any).
var builtinProfiles = map[string]string{
	"tcp": "tcp", "tcp-lan-optimized": "tcp", "tcp-wan-optimized": "tcp", "tcp-mobile-optimized": "tcp",
	"f5-tcp-progressive": "tcp", "http": "tcp", "fasthttp": "tcp", "clientssl": "tcp", "serverssl": "tcp",
	"oneconnect": "tcp", "websocket": "tcp", "http2": "tcp",
	"udp": "udp", "udp_gtm_dns": "udp",
	"fastL4": "",
}

func newStore() *store {
	st := &store{
		folders:  map[string]obj{},
		pools:    map[string]*pool{},
		virtuals: map[string]*virtual{},
		nodes:    map[string]obj{},
		monitors: map[string]map[string]obj{},

		persistence: map[string]map[string]obj{},
		policies:    map[string]*policy{},
		sslProfiles: map[string]obj{},
		certs:       map[string]*sslFile{},
		keys:        map[string]*sslFile{},
		uploads:     map[string][]byte{},
	}
	st.folders[commonPartition] = st.newFolder(commonPartition, "")
	for typ, name := range builtinMonitors {
		fp := "/" + commonPartition + "/" + name
		st.monitors[typ] = map[string]obj{fp: {
			"kind":         "tm:ltm:monitor:" + typ + ":" + typ + "state",
			"name":         name,
			"partition":    commonPartition,
			"fullPath":     fp,
			"generation":   st.gen,
			"selfLink":     selfLink("ltm/monitor/"+typ, fp),
			"interval":     5,
			"timeout":      16,
			"defaultsFrom": "",
			"builtin":      true,
		}}
	}
	for typ, name := range builtinPersistence {
		fp := "/" + commonPartition + "/" + name
		p := copyObj(builtinPersistenceProps[typ])
		p["kind"] = "tm:ltm:persistence:" + typ + ":" + typ + "state"
		p["name"], p["partition"], p["fullPath"] = name, commonPartition, fp
		p["generation"], p["selfLink"] = st.gen, selfLink("ltm/persistence/"+typ, fp)
		p["defaultsFrom"], p["appService"], p["builtin"] = "none", "none", true
		st.persistence[typ] = map[string]obj{fp: p}
	}
	return st
}

func (st *store) next() int64 {
	st.gen++
	return st.gen
}

func (st *store) newFolder(name, description string) obj {
	o := obj{
		"kind":                  "tm:sys:folder:folderstate",
		"name":                  name,
		"subPath":               "/",
		"fullPath":              "/" + name,
		"generation":            st.next(),
		"selfLink":              selfLinkBase + "sys/folder/~" + name + selfLinkVersion,
		"deviceGroup":           "none",
		"hidden":                "false",
		"inheritedDevicegroup":  "true",
		"inheritedTrafficGroup": "true",
		"noRefCheck":            "false",
		"trafficGroup":          "/Common/traffic-group-1",
	}
	if description != "" {
		o["description"] = description
	}
	return o
}

// clone deep-copies the store, so a transaction can be applied to a copy and
// dropped if any of its commands fails.
func (st *store) clone() *store {
	c := &store{
		gen:      st.gen,
		folders:  map[string]obj{},
		pools:    map[string]*pool{},
		virtuals: map[string]*virtual{},
		nodes:    map[string]obj{},
		monitors: map[string]map[string]obj{},

		persistence: map[string]map[string]obj{},
		policies:    map[string]*policy{},
		sslProfiles: map[string]obj{},
		certs:       map[string]*sslFile{},
		keys:        map[string]*sslFile{},
		uploads:     st.uploads,
	}
	for k, p := range st.policies {
		c.policies[k] = p.clone()
	}
	for k, p := range st.sslProfiles {
		c.sslProfiles[k] = copyObj(p)
	}
	for k, f := range st.certs {
		c.certs[k] = &sslFile{props: copyObj(f.props), content: f.content}
	}
	for k, f := range st.keys {
		c.keys[k] = &sslFile{props: copyObj(f.props), content: f.content}
	}
	for k, v := range st.folders {
		c.folders[k] = copyObj(v)
	}
	for k, p := range st.pools {
		c.pools[k] = &pool{props: copyObj(p.props), members: copyObjs(p.members)}
	}
	for k, v := range st.virtuals {
		c.virtuals[k] = v.clone()
	}
	for k, v := range st.nodes {
		c.nodes[k] = copyObj(v)
	}
	for _, pair := range []struct{ from, to map[string]map[string]obj }{{st.monitors, c.monitors}, {st.persistence, c.persistence}} {
		for typ, ms := range pair.from {
			pair.to[typ] = map[string]obj{}
			for k, v := range ms {
				pair.to[typ][k] = copyObj(v)
			}
		}
	}
	return c
}

// self and anyCopy are the props and view of listCollection for plain
// objects.
func self(o obj) obj { return o }

func anyCopy(o obj) any { return copyObj(o) }

func copyObj(o obj) obj {
	if o == nil {
		return nil
	}
	return deepCopy(o).(obj)
}

func copyObjs(os []obj) []obj {
	if os == nil {
		return nil
	}
	out := make([]obj, len(os))
	for i, o := range os {
		out[i] = copyObj(o)
	}
	return out
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	case []obj:
		return copyObjs(t)
	default:
		return v
	}
}

// ref names an object: /partition/name.
type ref struct {
	partition string
	name      string
}

func (r ref) fullPath() string { return "/" + r.partition + "/" + r.name }

// parseURLName decodes a name as it appears in a URL: "~P~name" (go-bigip maps
// "/" to "~") or a bare "name", which BIG-IP resolves in /Common.
func parseURLName(seg string) (ref, bool) {
	if !strings.HasPrefix(seg, "~") {
		return ref{commonPartition, seg}, seg != ""
	}
	part, name, found := strings.Cut(seg[1:], "~")
	if !found || part == "" || name == "" {
		return ref{}, false
	}
	return ref{part, strings.ReplaceAll(name, "~", "/")}, true
}

// parsePath decodes a name as it appears in a body: "/P/name" or a bare name,
// which resolves in def.
func parsePath(s, def string) (ref, bool) {
	if !strings.HasPrefix(s, "/") {
		return ref{def, s}, s != ""
	}
	part, name, found := strings.Cut(s[1:], "/")
	if !found || part == "" || name == "" {
		return ref{}, false
	}
	return ref{part, name}, true
}

// bodyRef finds the name of a new object from its body's name, partition and
// fullPath properties; the partition defaults to def.
func bodyRef(body obj, def string) (ref, response, bool) {
	name := str(body, "name")
	part := strings.Trim(str(body, "partition"), "/")
	if name == "" {
		if fp := str(body, "fullPath"); fp != "" {
			name = fp
		}
	}
	if name == "" {
		return ref{}, badRequest("01070734:3: Configuration error: the name property is required"), false
	}
	if part == "" {
		part = def
	}
	r, good := parsePath(name, part)
	if !good || !validName(r.name) {
		return ref{}, badRequest("01070022:3: The requested object name (%s) is invalid.", name), false
	}
	if p := strings.Trim(str(body, "partition"), "/"); p != "" && p != r.partition {
		return ref{}, badRequest("01070734:3: Configuration error: name %s is not in partition %s", name, p), false
	}
	return r, response{}, true
}

// validName accepts the characters BIG-IP allows in object names.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("._-:%/", c):
		default:
			return false
		}
	}
	return true
}

func selfLink(collection, fullPath string) string {
	return selfLinkBase + collection + "/" + strings.ReplaceAll(fullPath, "/", "~") + selfLinkVersion
}

func str(o obj, key string) string {
	s, _ := o[key].(string)
	return s
}

// decodeBody parses a JSON object body.
func decodeBody(b []byte) (obj, bool) {
	var o obj
	if len(strings.TrimSpace(string(b))) == 0 {
		return obj{}, true
	}
	if err := json.Unmarshal(b, &o); err != nil || o == nil {
		return nil, false
	}
	return o, true
}

// readOnly are properties BIG-IP computes; a client that sends back what it
// read must not change them.
var readOnly = []string{"kind", "selfLink", "generation", "fullPath", "membersReference", "profilesReference", "policiesReference"}

// merge copies the writable properties of body into o.
func merge(o, body obj, skip ...string) {
	for k, v := range body {
		if slices.Contains(readOnly, k) || slices.Contains(skip, k) || k == "name" || k == "partition" {
			continue
		}
		o[k] = v
	}
}

// checkRename rejects a modification that tries to rename an object.
func checkRename(body obj, r ref) (response, bool) {
	if n := str(body, "name"); n != "" && n != r.name && n != r.fullPath() {
		return badRequest("01070734:3: Configuration error: the name of %s cannot be modified", r.fullPath()), false
	}
	if p := strings.Trim(str(body, "partition"), "/"); p != "" && p != r.partition {
		return badRequest("01070734:3: Configuration error: the partition of %s cannot be modified", r.fullPath()), false
	}
	return response{}, true
}

// endpoint is an address and port: a pool member or a virtual's destination.
type endpoint struct {
	host string // IP address, with %rd when given, or a node name
	addr netip.Addr
	rd   string
	port int
}

// parseEndpoint parses "ip:port", "ip%rd:port" and, for IPv6, "ip.port", as
// BIG-IP spells members and destinations. A host that is not an address is
// accepted only when named is true (pool members may name a node).
func parseEndpoint(s string, named bool) (endpoint, bool) {
	var host, port string
	if strings.Count(s, ":") > 1 {
		i := strings.LastIndexByte(s, '.')
		if i < 0 {
			return endpoint{}, false
		}
		host, port = s[:i], s[i+1:]
	} else {
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return endpoint{}, false
		}
		host, port = s[:i], s[i+1:]
	}
	var e endpoint
	if port == "any" || port == "*" {
		port = "0"
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || host == "" {
		return endpoint{}, false
	}
	e.port, e.host = p, host
	ip, rd, hasRD := strings.Cut(host, "%")
	if hasRD {
		if _, err := strconv.ParseUint(rd, 10, 16); err != nil {
			return endpoint{}, false
		}
		e.rd = rd
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		if !named || hasRD || !validName(host) {
			return endpoint{}, false
		}
		return e, true
	}
	if addr.Zone() != "" {
		return endpoint{}, false
	}
	e.addr = addr
	return e, true
}

// SplitEndpoint splits a pool member's name or a virtual's destination as
// State shows them ("/P/ip:port", "ip%rd:port", for IPv6 "ip.port") into
// the IP address, without route domain, and the port.
func SplitEndpoint(s string) (addr string, port int, ok bool) {
	e, ok := parseEndpoint(s[strings.LastIndexByte(s, '/')+1:], false)
	if !ok {
		return "", 0, false
	}
	return e.addr.String(), e.port, true
}

// address is the IP part of the endpoint, with its route domain.
func (e endpoint) address() string {
	if e.rd != "" {
		return e.addr.String() + "%" + e.rd
	}
	return e.addr.String()
}

// String spells the endpoint as BIG-IP does.
func (e endpoint) String() string {
	sep := ":"
	if e.addr.Is6() {
		sep = "."
	}
	return e.host + sep + strconv.Itoa(e.port)
}

func (e endpoint) sameListener(o endpoint) bool {
	return e.addr == o.addr && e.rd == o.rd && e.port == o.port
}

func hostMask(a netip.Addr) string {
	if a.Is6() {
		return "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}
	return "255.255.255.255"
}

func folderMissing(partition string) response {
	return refNotFound("folder", "/"+partition)
}

// createTarget decodes a create request's body and runs the checks every
// create runs: valid JSON, a name, an existing partition, and no object of
// kind already at that path (taken).
func (st *store) createTarget(req request, kind string, taken func(fullPath string) bool) (obj, ref, response, bool) {
	body, good := decodeBody(req.body)
	if !good {
		return nil, ref{}, invalidJSON(), false
	}
	r, resp, good := bodyRef(body, commonPartition)
	if !good {
		return nil, ref{}, resp, false
	}
	if st.folders[r.partition] == nil {
		return nil, ref{}, folderMissing(r.partition), false
	}
	if taken(r.fullPath()) {
		return nil, ref{}, alreadyExists(kind, r.fullPath(), r.partition), false
	}
	return body, r, response{}, true
}

// intOf reads a number of a decoded body or of a property the simulator
// set; 0 when it is neither.
func intOf(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	return 0
}
