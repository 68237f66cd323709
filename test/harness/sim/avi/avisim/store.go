package avisim

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeportlocal/npl/test/harness/sim/avi/avischema"
)

// object is one Avi object as JSON. The simulator keeps every field a client
// sends (cloud_config_cksum, markers, ...) and only adds or checks the fields
// the real controller owns.
type object = map[string]any

// kind describes one object type the simulator serves.
type kind struct {
	// display is how the controller names the type in its messages.
	display string
	// cloudScoped types get cloud_ref Default-Cloud when none is given.
	cloudScoped bool
	// shared types live in the admin tenant and are visible from every tenant.
	shared bool
}

var kinds = map[string]kind{
	"pool":                 {display: "Pool", cloudScoped: true},
	"poolgroup":            {display: "PoolGroup", cloudScoped: true},
	"virtualservice":       {display: "VirtualService", cloudScoped: true},
	"vsvip":                {display: "VsVip", cloudScoped: true},
	"l4policyset":          {display: "L4PolicySet"},
	"httppolicyset":        {display: "HTTPPolicySet"},
	"vsdatascriptset":      {display: "VSDataScriptSet"},
	"sslkeyandcertificate": {display: "SSLKeyAndCertificate"},
	"healthmonitor":        {display: "HealthMonitor", shared: true},
	"applicationprofile":   {display: "ApplicationProfile", shared: true},
	"analyticsprofile":     {display: "AnalyticsProfile", shared: true},
	"sslprofile":           {display: "SSLProfile", shared: true},
	"networkprofile":       {display: "NetworkProfile", shared: true},
	"cloud":                {display: "Cloud", shared: true},
	"serviceenginegroup":   {display: "ServiceEngineGroup", cloudScoped: true, shared: true},
	"network":              {display: "Network", cloudScoped: true, shared: true},
	"vrfcontext":           {display: "VrfContext", cloudScoped: true, shared: true},
	"tenant":               {display: "Tenant", shared: true},
	"role":                 {display: "Role", shared: true},
	"user":                 {display: "User", shared: true},
}

const adminTenant = "admin"

// apiError is an answer other than 2xx, written as {"error": msg}.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.msg) }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

// entry is one stored object and where it lives.
type entry struct {
	tenant string
	typ    string
	obj    object
	// id and nm cache the uuid and name of obj, set by index: collection
	// filters read them for every object.
	id string
	nm string
}

func (e *entry) name() string { return e.nm }
func (e *entry) uuid() string { return e.id }

type typeKey struct{ tenant, typ string }

type nameKey struct{ tenant, typ, name string }

// store holds every object of every tenant. References are kept in the
// host-less form /api/<type>/<uuid> and rendered with the request's host, so
// the same state serves clients that reach the simulator by different names.
// It is not safe for concurrent use; Server serialises access.
type store struct {
	byUUID map[string]*entry
	byType map[typeKey]map[string]*entry
	byName map[nameKey]*entry
	vips   *vipAllocator
	// defaultNetwork is the VIP network of a VsVip that names none.
	defaultNetwork string
	lastModified   int64
	// schema checks bodies, version is the controller's API version;
	// violations counts the bodies refused for breaking the schema.
	schema     *avischema.Schema
	version    avischema.Version
	violations int
}

func newStore() *store {
	return &store{
		byUUID: map[string]*entry{},
		byType: map[typeKey]map[string]*entry{},
		byName: map[nameKey]*entry{},
		vips:   newVIPAllocator(),
	}
}

// nextLastModified returns a _last_modified value: microseconds since the
// epoch as a string, strictly increasing so that every write is told apart.
func (s *store) nextLastModified() string {
	now := time.Now().UnixMicro()
	if now <= s.lastModified {
		now = s.lastModified + 1
	}
	s.lastModified = now
	return strconv.FormatInt(now, 10)
}

// newUUID returns a uuid as the controller makes them: the type and a
// random (version 4) UUID, pool-1f6c6a7e-….
func (s *store) newUUID(typ string) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", typ, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// tenantOf returns the tenant an object of typ is stored in when a client of
// tenant writes it: tenants themselves always live in admin.
func tenantOf(tenant, typ string) string {
	if typ == "tenant" {
		return adminTenant
	}
	return tenant
}

// lookupName finds an object by name as seen from tenant: the tenant's own
// objects first, then shared objects of the admin tenant.
func (s *store) lookupName(tenant, typ, name string) *entry {
	if e := s.byName[nameKey{tenantOf(tenant, typ), typ, name}]; e != nil {
		return e
	}
	if kinds[typ].shared {
		return s.byName[nameKey{adminTenant, typ, name}]
	}
	return nil
}

// lookupUUID finds an object by uuid as seen from tenant.
func (s *store) lookupUUID(tenant, typ, uuid string) *entry {
	e := s.byUUID[uuid]
	if e == nil || e.typ != typ {
		return nil
	}
	if e.tenant == tenantOf(tenant, typ) || (kinds[typ].shared && e.tenant == adminTenant) {
		return e
	}
	return nil
}

func (s *store) index(e *entry) {
	e.id, _ = e.obj["uuid"].(string)
	e.nm, _ = e.obj["name"].(string)
	tk := typeKey{e.tenant, e.typ}
	if s.byType[tk] == nil {
		s.byType[tk] = map[string]*entry{}
	}
	s.byType[tk][e.uuid()] = e
	s.byUUID[e.uuid()] = e
	s.byName[nameKey{e.tenant, e.typ, e.name()}] = e
}

func (s *store) unindex(e *entry) {
	delete(s.byType[typeKey{e.tenant, e.typ}], e.uuid())
	delete(s.byUUID, e.uuid())
	delete(s.byName, nameKey{e.tenant, e.typ, e.name()})
}

// serverOwned are the fields the controller assigns; what a client sends for
// them is ignored.
var serverOwned = []string{"uuid", "url", "tenant_ref", "_last_modified"}

// create stores a new object of typ in tenant, as POST /api/<typ> with API
// version v does (a zero v for the simulator's own seeds).
func (s *store) create(tenant, typ string, obj object, v avischema.Version) (*entry, *apiError) {
	name, _ := obj["name"].(string)
	if name == "" {
		return nil, errorf(http.StatusBadRequest, "name: This field is required.")
	}
	home := tenantOf(tenant, typ)
	if s.byName[nameKey{home, typ, name}] != nil {
		return nil, errorf(http.StatusConflict, "%s object with this Name and Tenant already exists.", kinds[typ].display)
	}
	for _, f := range serverOwned {
		delete(obj, f)
	}
	uuid := s.newUUID(typ)
	if typ == "tenant" && name == adminTenant {
		// The controller's admin tenant has the uuid admin: references to
		// it read …/api/tenant/admin.
		uuid = adminTenant
	}
	if err := s.prepare(tenant, typ, uuid, obj, nil, v); err != nil {
		return nil, err
	}
	obj["uuid"] = uuid
	obj["url"] = "/api/" + typ + "/" + uuid
	if t := s.byName[nameKey{adminTenant, "tenant", home}]; t != nil {
		obj["tenant_ref"] = "/api/tenant/" + t.uuid()
	}
	obj["_last_modified"] = s.nextLastModified()
	e := &entry{tenant: home, typ: typ, obj: obj}
	s.index(e)
	s.commit(e)
	return e, nil
}

// replace stores obj as the new content of the object uuid, as PUT with API
// version v does.
func (s *store) replace(tenant, typ, uuid string, obj object, v avischema.Version) (*entry, *apiError) {
	e := s.lookupUUID(tenant, typ, uuid)
	if e == nil || e.tenant != tenantOf(tenant, typ) {
		return nil, errorf(http.StatusNotFound, "%s object not found!", kinds[typ].display)
	}
	if lm, ok := obj["_last_modified"]; ok && lm != nil && fmt.Sprint(lm) != e.obj["_last_modified"] {
		return nil, errorf(http.StatusPreconditionFailed,
			"Concurrent Update Error: %s %s was modified (_last_modified %v, now %v)", kinds[typ].display, e.name(), lm, e.obj["_last_modified"])
	}
	name, _ := obj["name"].(string)
	if name == "" {
		return nil, errorf(http.StatusBadRequest, "name: This field is required.")
	}
	if other := s.byName[nameKey{e.tenant, typ, name}]; other != nil && other != e {
		return nil, errorf(http.StatusConflict, "%s object with this Name and Tenant already exists.", kinds[typ].display)
	}
	for _, f := range serverOwned {
		delete(obj, f)
	}
	if err := s.prepare(tenant, typ, uuid, obj, e.obj, v); err != nil {
		return nil, err
	}
	for _, f := range []string{"uuid", "url", "tenant_ref"} {
		if v, ok := e.obj[f]; ok {
			obj[f] = v
		}
	}
	obj["_last_modified"] = s.nextLastModified()
	s.unindex(e)
	e.obj = obj
	s.index(e)
	s.commit(e)
	return e, nil
}

// patch applies {"add"|"replace"|"delete": {...}} to the object uuid.
func (s *store) patch(tenant, typ, uuid string, body object, v avischema.Version) (*entry, *apiError) {
	e := s.lookupUUID(tenant, typ, uuid)
	if e == nil || e.tenant != tenantOf(tenant, typ) {
		return nil, errorf(http.StatusNotFound, "%s object not found!", kinds[typ].display)
	}
	if len(body) != 1 {
		return nil, errorf(http.StatusBadRequest, "PATCH body must hold exactly one of add, replace, delete")
	}
	obj := deepCopy(e.obj).(object)
	delete(obj, "_last_modified")
	for op, raw := range body {
		fields, ok := raw.(map[string]any)
		if !ok {
			return nil, errorf(http.StatusBadRequest, "PATCH %s: expected an object", op)
		}
		// Resolve references first so that a deleted item matches the
		// stored form of the same reference.
		if err := s.resolveRefs(tenant, fields); err != nil {
			return nil, err
		}
		switch op {
		case "add":
			for k, v := range fields {
				if cur, ok := obj[k].([]any); ok {
					if items, ok := v.([]any); ok {
						for _, it := range items {
							if !slices.ContainsFunc(cur, func(c any) bool { return matches(c, it) }) {
								cur = append(cur, it)
							}
						}
						obj[k] = cur
						continue
					}
				}
				obj[k] = v
			}
		case "replace":
			for k, v := range fields {
				obj[k] = v
			}
		case "delete":
			for k, v := range fields {
				cur, isList := obj[k].([]any)
				items, givenList := v.([]any)
				if !isList || !givenList {
					delete(obj, k)
					continue
				}
				obj[k] = slices.DeleteFunc(cur, func(c any) bool {
					return slices.ContainsFunc(items, func(it any) bool { return matches(c, it) })
				})
			}
		default:
			return nil, errorf(http.StatusBadRequest, "unknown PATCH operation %q", op)
		}
	}
	return s.replace(tenant, typ, uuid, obj, v)
}

// matches reports whether a stored list item is the one a PATCH names: equal,
// or, for objects, equal in every field the PATCH gives (so a server is named
// by its ip and port alone).
func matches(stored, given any) bool {
	sm, ok1 := stored.(map[string]any)
	gm, ok2 := given.(map[string]any)
	if !ok1 || !ok2 {
		return jsonEqual(stored, given)
	}
	for k, v := range gm {
		if !matches(sm[k], v) {
			return false
		}
	}
	return true
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// remove deletes the object uuid unless another object still refers to it.
func (s *store) remove(tenant, typ, uuid string) *apiError {
	e := s.lookupUUID(tenant, typ, uuid)
	if e == nil || e.tenant != tenantOf(tenant, typ) {
		return errorf(http.StatusNotFound, "%s object not found!", kinds[typ].display)
	}
	if refs := s.referrers(e); len(refs) > 0 {
		quoted := make([]string, len(refs))
		for i, r := range refs {
			quoted[i] = "'" + r + "'"
		}
		return errorf(http.StatusBadRequest, "Cannot delete, object is referred by: [%s]", strings.Join(quoted, ", "))
	}
	s.unindex(e)
	s.vips.release(uuid)
	return nil
}

// referrers names the objects that refer to e, as "<Type> <name>".
func (s *store) referrers(e *entry) []string {
	target := "/api/" + e.typ + "/" + e.uuid()
	var out []string
	for _, other := range s.byUUID {
		if other == e {
			continue
		}
		found := false
		walkRefs(other.obj, func(ref string) (string, error) {
			if ref == target {
				found = true
			}
			return ref, nil
		})
		if found {
			out = append(out, kinds[other.typ].display+" "+other.name())
		}
	}
	slices.Sort(out)
	return out
}

// commit records the side effects of a stored object (allocated VIPs).
func (s *store) commit(e *entry) {
	if e.typ == "vsvip" {
		s.vips.assign(e.uuid(), vipAddrs(e.obj))
	}
}

// prepare checks obj against the schema of API version v, resolves its
// references, fills in defaults and checks what the controller checks
// beyond the schema, before storing it. old is the stored version on
// update.
func (s *store) prepare(tenant, typ, uuid string, obj, old object, v avischema.Version) *apiError {
	if err := s.checkSchema(typ, obj, v); err != nil {
		return err
	}
	if err := s.resolveRefs(tenant, obj); err != nil {
		return err
	}
	if err := s.checkRefTypes(typ, obj); err != nil {
		return err
	}
	if kinds[typ].cloudScoped && obj["cloud_ref"] == nil {
		if c := s.lookupName(tenant, "cloud", "Default-Cloud"); c != nil {
			obj["cloud_ref"] = "/api/cloud/" + c.uuid()
		}
	}
	if err := s.fillDefaults(tenant, typ, obj, v); err != nil {
		return err
	}
	switch typ {
	case "pool":
		return validatePool(obj)
	case "virtualservice":
		if err := validateVirtualService(obj); err != nil {
			return err
		}
		if err := s.validateVirtualServiceL7(tenant, obj); err != nil {
			return err
		}
		return s.sharedVsVipPorts(uuid, obj)
	case "l4policyset":
		return validateL4PolicySet(obj)
	case "httppolicyset":
		return validateHTTPPolicySet(obj)
	case "poolgroup":
		return validatePoolGroup(obj)
	case "sslkeyandcertificate":
		return prepareCertificate(obj, old)
	case "vsvip":
		return s.allocateVIPs(tenant, uuid, obj, old)
	}
	return nil
}

// resolveRefs rewrites every *_ref and *_refs value of obj to the stored form
// /api/<type>/<uuid>. References may be given by name (/api/pool?name=x or
// /api/pool/?name=x), by path (/api/pool/<uuid>) or as a full URL, with or
// without a #name suffix.
func (s *store) resolveRefs(tenant string, obj any) *apiError {
	var first *apiError
	walkRefs(obj, func(ref string) (string, error) {
		out, err := s.resolveRef(tenant, ref)
		if err != nil && first == nil {
			first = err
		}
		return out, nil
	})
	return first
}

func (s *store) resolveRef(tenant, ref string) (string, *apiError) {
	raw := ref
	if i := strings.IndexByte(raw, '#'); i >= 0 {
		raw = raw[:i]
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			return "", errorf(http.StatusBadRequest, "Invalid reference %q", ref)
		}
		raw = rest[j:]
	}
	pathPart, query, _ := strings.Cut(raw, "?")
	p := cleanPath("/" + pathPart)
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(segs) < 2 || segs[0] != "api" {
		return "", errorf(http.StatusBadRequest, "Invalid reference %q", ref)
	}
	typ := segs[1]
	k, ok := kinds[typ]
	if !ok {
		return "", errorf(http.StatusBadRequest, "Invalid reference %q: unknown object type %s", ref, typ)
	}
	var e *entry
	switch {
	case len(segs) == 3:
		e = s.lookupUUID(tenant, typ, segs[2])
	case len(segs) == 2 && query != "":
		q, err := url.ParseQuery(query)
		if err != nil || q.Get("name") == "" {
			return "", errorf(http.StatusBadRequest, "Invalid reference %q", ref)
		}
		e = s.lookupName(tenant, typ, q.Get("name"))
	default:
		return "", errorf(http.StatusBadRequest, "Invalid reference %q", ref)
	}
	if e == nil {
		return "", errorf(http.StatusBadRequest, "%s object not found!", k.display)
	}
	return "/api/" + typ + "/" + e.uuid(), nil
}

// walkRefs calls fn for every reference in v (values of keys ending in _ref,
// and items of keys ending in _refs) and stores what fn returns.
func walkRefs(v any, fn func(string) (string, error)) {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			switch {
			case strings.HasSuffix(k, "_ref"):
				if s, ok := val.(string); ok {
					if out, err := fn(s); err == nil {
						t[k] = out
					}
					continue
				}
			case strings.HasSuffix(k, "_refs"):
				if items, ok := val.([]any); ok {
					for i, it := range items {
						if s, ok := it.(string); ok {
							if out, err := fn(s); err == nil {
								items[i] = out
							}
						}
					}
					continue
				}
			}
			walkRefs(val, fn)
		}
	case []any:
		for _, it := range t {
			walkRefs(it, fn)
		}
	}
}

// render returns a copy of e's object as the controller shows it to host:
// references and url as https://host/api/<type>/<uuid>, with #name appended
// to references when includeName is set.
func (s *store) render(e *entry, host string, includeName bool) object {
	out := deepCopy(e.obj).(object)
	for _, f := range hiddenFields[e.typ] {
		delete(out, f)
	}
	prefix := "https://" + host
	walkRefs(out, func(ref string) (string, error) {
		full := prefix + ref
		if includeName {
			if target := s.byUUID[ref[strings.LastIndexByte(ref, '/')+1:]]; target != nil {
				full += "#" + target.name()
			}
		}
		return full, nil
	})
	if u, ok := out["url"].(string); ok {
		out["url"] = prefix + u
	}
	return out
}

// list answers GET /api/<typ> with filters name, name.contains, created_by,
// cloud_ref.name, and paging by page_size and page (1-based).
func (s *store) list(tenant, typ, host string, q url.Values) (object, *apiError) {
	var matched []*entry
	name, contains, createdBy, cloud := q.Get("name"), q.Get("name.contains"), q.Get("created_by"), q.Get("cloud_ref.name")
	consider := func(e *entry) {
		if name != "" && e.name() != name {
			return
		}
		if contains != "" && !strings.Contains(e.name(), contains) {
			return
		}
		if createdBy != "" && e.obj["created_by"] != createdBy {
			return
		}
		if v := cloud; v != "" {
			ref, _ := e.obj["cloud_ref"].(string)
			c := s.byUUID[ref[strings.LastIndexByte(ref, '/')+1:]]
			if c == nil || c.name() != v {
				return
			}
		}
		matched = append(matched, e)
	}
	if name != "" {
		// The common case, answered from the name index.
		if e := s.lookupName(tenant, typ, name); e != nil {
			consider(e)
		}
	} else {
		for _, e := range s.byType[typeKey{tenantOf(tenant, typ), typ}] {
			consider(e)
		}
		if kinds[typ].shared && tenantOf(tenant, typ) != adminTenant {
			for _, e := range s.byType[typeKey{adminTenant, typ}] {
				consider(e)
			}
		}
	}
	slices.SortFunc(matched, func(a, b *entry) int {
		if c := strings.Compare(a.name(), b.name()); c != 0 {
			return c
		}
		return strings.Compare(a.uuid(), b.uuid())
	})

	pageSize, page := 25, 1
	if v := q.Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, errorf(http.StatusBadRequest, "Invalid page_size %q", v)
		}
		pageSize = n
	}
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, errorf(http.StatusBadRequest, "Invalid page %q", v)
		}
		page = n
	}
	includeName := isTrue(q, "include_name")
	from := min((page-1)*pageSize, len(matched))
	to := min(from+pageSize, len(matched))
	results := make([]any, 0, to-from)
	for _, e := range matched[from:to] {
		results = append(results, s.render(e, host, includeName))
	}
	out := object{"count": len(matched), "results": results}
	if to < len(matched) {
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("page", strconv.Itoa(page+1))
		next.Set("page_size", strconv.Itoa(pageSize))
		out["next"] = "https://" + host + "/api/" + typ + "?" + next.Encode()
	}
	return out, nil
}

// isTrue reports whether a boolean query parameter is set: present with an
// empty value, "true" or "1".
func isTrue(q url.Values, key string) bool {
	vs, ok := q[key]
	if !ok {
		return false
	}
	v := ""
	if len(vs) > 0 {
		v = strings.ToLower(vs[0])
	}
	return v == "" || v == "true" || v == "1"
}

// deepCopy copies decoded JSON.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			out[k] = deepCopy(val)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = deepCopy(val)
		}
		return out
	default:
		return v
	}
}

// cleanPath collapses repeated slashes and drops a trailing slash, so that
// //api/pool/ and /api/pool name the same thing. It never fails: the
// simulator answers every path itself and never redirects.
func cleanPath(p string) string {
	var b strings.Builder
	b.Grow(len(p) + 1)
	b.WriteByte('/')
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte('/')
		}
		b.WriteString(seg)
	}
	return b.String()
}

// sharedVsVipPorts refuses a virtual service that serves a port another
// virtual service on the same VsVip serves over the same transport (TCP or
// UDP, from the service's or the virtual service's network profile), as
// the controller does.
func (s *store) sharedVsVipPorts(uuid string, obj object) *apiError {
	type port struct {
		n   int64
		udp bool
	}
	isUDP := func(ref string) bool {
		e := s.byRef(ref)
		if e == nil {
			return false
		}
		profile, _ := e.obj["profile"].(map[string]any)
		return strings.HasPrefix(str(profile["type"]), "PROTOCOL_TYPE_UDP")
	}
	ports := func(o object) map[port]bool {
		out := map[port]bool{}
		services, _ := o["services"].([]any)
		for _, raw := range services {
			svc, _ := raw.(map[string]any)
			ref := str(svc["override_network_profile_ref"])
			if ref == "" {
				ref = str(o["network_profile_ref"])
			}
			if n, ok := toInt(svc["port"]); ok {
				out[port{n, isUDP(ref)}] = true
			}
		}
		return out
	}
	mine := ports(obj)
	for _, e := range s.byUUID {
		if e.typ != "virtualservice" || e.uuid() == uuid || str(e.obj["vsvip_ref"]) != str(obj["vsvip_ref"]) {
			continue
		}
		for p := range ports(e.obj) {
			if mine[p] {
				return errorf(http.StatusBadRequest, "Port %d is already used by VirtualService %s on the same VsVip", p.n, e.name())
			}
		}
	}
	return nil
}
