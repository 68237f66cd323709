package bigipsim

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// request is one iControl REST call under /mgmt/tm/.
type request struct {
	method string
	path   string   // the URL path, for messages
	segs   []string // the path segments after /mgmt/tm/
	query  url.Values
	body   []byte
}

func (r request) expand() bool { return r.query.Get("expandSubcollections") == "true" }

// partitionFilter reads "$filter=partition eq P", the one filter BIG-IP
// clients use on collections.
func (r request) partitionFilter() (string, response, bool) {
	f := r.query.Get("$filter")
	if f == "" {
		return "", response{}, true
	}
	fields := strings.Fields(f)
	if len(fields) != 3 || fields[0] != "partition" || fields[1] != "eq" {
		return "", badRequest("Unsupported $filter %q: this simulator supports only \"partition eq NAME\"", f), false
	}
	return strings.Trim(fields[2], "/'\""), response{}, true
}

// listCollection answers the GET of a collection: the objects of objs (by
// full path) in the partition the request filters on, as view shows them.
func listCollection[T any](req request, kind, link string, objs map[string]T, props func(T) obj, view func(T) any) response {
	part, resp, good := req.partitionFilter()
	if !good {
		return resp
	}
	var items []any
	for _, fp := range sortedKeys(objs) {
		if o := objs[fp]; part == "" || str(props(o), "partition") == part {
			items = append(items, view(o))
		}
	}
	return ok(collection(kind, link, items))
}

func collection(kind, link string, items []any) obj {
	if items == nil {
		items = []any{}
	}
	return obj{"kind": kind, "selfLink": selfLinkBase + link + selfLinkVersion, "items": items}
}

// servePool serves /ltm/pool[/<name>[/members[/<member>]]].
func (st *store) servePool(req request, rest []string) response {
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			return st.listPools(req)
		case http.MethodPost:
			return st.createPool(req)
		}
		return methodNotAllowed(req.method, req.path)
	}
	r, good := parseURLName(rest[0])
	if !good {
		return notFound("Pool", rest[0])
	}
	if len(rest) > 1 {
		if rest[1] != "members" || len(rest) > 3 {
			return notRegistered(req.path)
		}
		return st.serveMembers(req, r, rest[2:])
	}
	p := st.pools[r.fullPath()]
	if p == nil {
		return notFound("Pool", r.fullPath())
	}
	switch req.method {
	case http.MethodGet:
		return ok(st.poolView(p, req.expand()))
	case http.MethodPut, http.MethodPatch:
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		if resp, good := checkRename(body, r); !good {
			return resp
		}
		return st.modifyPool(p, r, body)
	case http.MethodDelete:
		for _, fp := range sortedKeys(st.virtuals) {
			if str(st.virtuals[fp].props, "pool") == r.fullPath() {
				return badRequest("01070265:3: The Pool (%s) cannot be deleted because it is in use by a Virtual Server (%s).", r.fullPath(), fp)
			}
		}
		for _, fp := range sortedKeys(st.policies) {
			if slices.Contains(st.policies[fp].pools(), r.fullPath()) {
				return badRequest("01070265:3: The Pool (%s) cannot be deleted because it is in use by a policy (%s).", r.fullPath(), fp)
			}
		}
		delete(st.pools, r.fullPath())
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

func (st *store) listPools(req request) response {
	return listCollection(req, "tm:ltm:pool:poolcollectionstate", "ltm/pool", st.pools, func(p *pool) obj { return p.props },
		func(p *pool) any { return st.poolView(p, req.expand()) })
}

func (st *store) poolView(p *pool, expand bool) obj {
	v := copyObj(p.props)
	ref := obj{
		"link":            strings.TrimSuffix(str(p.props, "selfLink"), selfLinkVersion) + "/members" + selfLinkVersion,
		"isSubcollection": true,
	}
	if expand {
		items := make([]any, 0, len(p.members))
		for _, m := range p.members {
			items = append(items, copyObj(m))
		}
		ref["items"] = items
	}
	v["membersReference"] = ref
	return v
}

func (st *store) createPool(req request) response {
	body, r, resp, good := st.createTarget(req, "Pool", func(fp string) bool { return st.pools[fp] != nil })
	if !good {
		return resp
	}
	p := &pool{props: obj{
		"kind":              "tm:ltm:pool:poolstate",
		"name":              r.name,
		"partition":         r.partition,
		"fullPath":          r.fullPath(),
		"selfLink":          selfLink("ltm/pool", r.fullPath()),
		"allowNat":          "yes",
		"allowSnat":         "yes",
		"loadBalancingMode": "round-robin",
		"minActiveMembers":  0,
		"minUpMembers":      0,
		"queueDepthLimit":   0,
		"reselectTries":     0,
		"serviceDownAction": "none",
		"slowRampTime":      10,
	}}
	if resp, good := st.applyPool(p, r, body); !good {
		return resp
	}
	st.pools[r.fullPath()] = p
	st.ensureMemberNodes(p.members...)
	return ok(st.poolView(p, false))
}

func (st *store) modifyPool(p *pool, r ref, body obj) response {
	// Build on a copy so that a bad member leaves the pool as it was.
	next := &pool{props: copyObj(p.props), members: copyObjs(p.members)}
	if resp, good := st.applyPool(next, r, body); !good {
		return resp
	}
	*p = *next
	st.ensureMemberNodes(p.members...)
	return ok(st.poolView(p, false))
}

// applyPool validates body and writes it into p: the monitor, the other
// properties, and, when body has "members", the whole member list.
func (st *store) applyPool(p *pool, r ref, body obj) (response, bool) {
	if m, present := body["monitor"]; present {
		s, isString := m.(string)
		if !isString {
			return badRequest("01070734:3: Configuration error: monitor must be a string"), false
		}
		norm, resp, good := st.normalizeMonitor(s)
		if !good {
			return resp, false
		}
		body["monitor"] = norm
		if norm == "" {
			delete(body, "monitor")
			delete(p.props, "monitor")
		}
	}
	if raw, present := body["members"]; present {
		list, isList := raw.([]any)
		if raw != nil && !isList {
			return badRequest("01070734:3: Configuration error: members must be an array"), false
		}
		var members []obj
		seen := map[string]bool{}
		for _, item := range list {
			mb, isObj := item.(map[string]any)
			if !isObj {
				if s, isString := item.(string); isString {
					mb = obj{"name": s}
				} else {
					return badRequest("01070734:3: Configuration error: a member must be an object"), false
				}
			}
			old := findMember(p.members, mb, r.partition)
			m, resp, good := st.newMember(r, mb, old)
			if !good {
				return resp, false
			}
			fp := str(m, "fullPath")
			if seen[fp] {
				return alreadyExists("Pool Member", memberLabel(r, m), str(m, "partition")), false
			}
			seen[fp] = true
			members = append(members, m)
		}
		p.members = members
	}
	if m, present := body["loadBalancingMode"]; present && !slices.Contains(loadBalancingModes, m) {
		return badRequest("01070734:3: Configuration error: invalid loadBalancingMode %v", m), false
	}
	merge(p.props, body, "members")
	p.props["generation"] = st.next()
	return response{}, true
}

// normalizeMonitor checks that every monitor a pool's monitor rule names
// exists, and spells it as BIG-IP reads it back: full paths and a trailing
// space.
func (st *store) normalizeMonitor(rule string) (string, response, bool) {
	rule = strings.TrimSpace(rule)
	if rule == "" || rule == "none" {
		return "", response{}, true
	}
	tokens := strings.Fields(strings.NewReplacer("{", " { ", "}", " } ").Replace(rule))
	for i, t := range tokens {
		switch {
		case t == "and" || t == "min" || t == "of" || t == "{" || t == "}":
			continue
		case strings.Trim(t, "0123456789") == "":
			continue
		}
		r, good := parsePath(t, commonPartition)
		if !good || !st.derivedExists(monitorsDerived, r.fullPath()) {
			return "", refNotFound("Monitor", t), false
		}
		tokens[i] = r.fullPath()
	}
	return strings.Join(tokens, " ") + " ", response{}, true
}

// findMember returns the existing member that body names, if any.
func findMember(members []obj, body obj, partition string) obj {
	r, _, good := bodyRef(body, partition)
	if !good {
		return nil
	}
	for _, m := range members {
		if str(m, "fullPath") == r.fullPath() {
			return m
		}
	}
	return nil
}

// newMember builds the member body describes in pool r, keeping the
// generation and properties of old, and creates its node if it has none.
func (st *store) newMember(pr ref, body obj, old obj) (obj, response, bool) {
	r, resp, good := bodyRef(body, pr.partition)
	if !good {
		return nil, resp, false
	}
	if st.folders[r.partition] == nil {
		return nil, folderMissing(r.partition), false
	}
	e, good := parseEndpoint(r.name, true)
	if !good {
		return nil, badRequest("01070587:3: The requested pool member (%s) is invalid: members are named address:port.", r.fullPath()), false
	}
	address := str(body, "address")
	if !e.addr.IsValid() {
		nodeRef := ref{r.partition, e.host}
		node := st.nodes[nodeRef.fullPath()]
		if node == nil {
			return nil, refNotFound("Node", nodeRef.fullPath()), false
		}
		address = str(node, "address")
	} else if address == "" {
		address = e.address()
	}
	m := old
	if m == nil {
		m = obj{
			"kind":            "tm:ltm:pool:members:membersstate",
			"connectionLimit": 0,
			"dynamicRatio":    1,
			"ephemeral":       "false",
			"inheritProfile":  "enabled",
			"logging":         "disabled",
			"monitor":         "default",
			"priorityGroup":   0,
			"rateLimit":       "disabled",
			"ratio":           1,
			"session":         "user-enabled",
			"state":           "unchecked",
		}
	} else {
		m = copyObj(old)
	}
	if resp, good := checkMemberState(body); !good {
		return nil, resp, false
	}
	merge(m, body, "address", "fqdn")
	m["name"] = r.name
	m["partition"] = r.partition
	m["fullPath"] = r.fullPath()
	m["address"] = address
	m["selfLink"] = strings.TrimSuffix(selfLink("ltm/pool", pr.fullPath()), selfLinkVersion) + "/members/" + strings.ReplaceAll(r.fullPath(), "/", "~") + selfLinkVersion
	m["generation"] = st.next()
	return m, response{}, true
}

// ensureMemberNodes creates the nodes that members need, as BIG-IP does
// implicitly; it runs once the whole write is known to succeed.
func (st *store) ensureMemberNodes(members ...obj) {
	for _, m := range members {
		if e, good := parseEndpoint(str(m, "name"), true); good && e.addr.IsValid() {
			st.ensureNode(ref{str(m, "partition"), e.host}, str(m, "address"))
		}
	}
}

// loadBalancingModes are the modes BIG-IP has that a pool may name.
var loadBalancingModes = []any{"round-robin", "ratio-member", "ratio-node", "ratio-session", "least-connections-member",
	"least-connections-node", "ratio-least-connections-member", "ratio-least-connections-node", "observed-member",
	"observed-node", "predictive-member", "predictive-node", "fastest-node", "fastest-app-response", "least-sessions",
	"dynamic-ratio-member", "dynamic-ratio-node", "weighted-least-connections-member", "weighted-least-connections-node"}

// maxRatio is the largest ratio of a pool member.
const maxRatio = 65535

func checkMemberState(body obj) (response, bool) {
	if r, present := body["ratio"]; present {
		n, isNumber := r.(float64)
		if !isNumber || n != float64(int64(n)) || n < 1 || n > maxRatio {
			return badRequest("01070734:3: Configuration error: invalid ratio %v: want an integer 1-%d", r, maxRatio), false
		}
	}
	if s, present := body["session"]; present {
		switch s {
		case "user-enabled", "user-disabled", "monitor-enabled":
		default:
			return badRequest("01070734:3: Configuration error: invalid session %v: want user-enabled or user-disabled", s), false
		}
	}
	if s, present := body["state"]; present {
		switch s {
		case "user-up", "user-down", "unchecked", "up", "down":
		default:
			return badRequest("01070734:3: Configuration error: invalid state %v: want user-up or user-down", s), false
		}
	}
	return response{}, true
}

// ensureNode creates the node a member needs, as BIG-IP does implicitly.
func (st *store) ensureNode(r ref, address string) {
	if st.nodes[r.fullPath()] != nil {
		return
	}
	st.nodes[r.fullPath()] = obj{
		"kind":            "tm:ltm:node:nodestate",
		"name":            r.name,
		"partition":       r.partition,
		"fullPath":        r.fullPath(),
		"generation":      st.next(),
		"selfLink":        selfLink("ltm/node", r.fullPath()),
		"address":         address,
		"connectionLimit": 0,
		"dynamicRatio":    1,
		"logging":         "disabled",
		"monitor":         "default",
		"rateLimit":       "disabled",
		"ratio":           1,
		"session":         "user-enabled",
		"state":           "unchecked",
	}
}

// memberLabel is how BIG-IP names a member in messages: "/P/pool /P/ip port".
func memberLabel(pr ref, m obj) string {
	e, good := parseEndpoint(str(m, "name"), true)
	if !good {
		return pr.fullPath() + " " + str(m, "fullPath")
	}
	return fmt.Sprintf("%s /%s/%s %d", pr.fullPath(), str(m, "partition"), e.host, e.port)
}

// serveMembers serves /ltm/pool/<name>/members[/<member>].
func (st *store) serveMembers(req request, pr ref, rest []string) response {
	p := st.pools[pr.fullPath()]
	if p == nil {
		return notFound("Pool", pr.fullPath())
	}
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			items := make([]any, 0, len(p.members))
			for _, m := range p.members {
				items = append(items, copyObj(m))
			}
			link := strings.TrimPrefix(strings.TrimSuffix(str(p.props, "selfLink"), selfLinkVersion), selfLinkBase) + "/members"
			return ok(collection("tm:ltm:pool:members:memberscollectionstate", link, items))
		case http.MethodPost:
			body, good := decodeBody(req.body)
			if !good {
				return invalidJSON()
			}
			if findMember(p.members, body, pr.partition) != nil {
				r, _, _ := bodyRef(body, pr.partition)
				return alreadyExists("Pool Member", pr.fullPath()+" "+r.fullPath(), r.partition)
			}
			m, resp, good := st.newMember(pr, body, nil)
			if !good {
				return resp
			}
			p.members = append(p.members, m)
			p.props["generation"] = st.gen
			st.ensureMemberNodes(m)
			return ok(copyObj(m))
		}
		return methodNotAllowed(req.method, req.path)
	}
	i := st.memberIndex(p, pr, rest[0])
	if i < 0 {
		return notFound("Pool Member", pr.fullPath()+" "+rest[0])
	}
	switch req.method {
	case http.MethodGet:
		return ok(copyObj(p.members[i]))
	case http.MethodPut, http.MethodPatch:
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		m := p.members[i]
		mr := ref{str(m, "partition"), str(m, "name")}
		if resp, good := checkRename(body, mr); !good {
			return resp
		}
		if a := str(body, "address"); a != "" && a != str(m, "address") {
			return badRequest("01070734:3: Configuration error: the address of pool member %s cannot be modified", mr.fullPath())
		}
		if resp, good := checkMemberState(body); !good {
			return resp
		}
		merge(m, body, "address", "fqdn")
		m["generation"] = st.next()
		p.props["generation"] = st.gen
		return ok(copyObj(m))
	case http.MethodDelete:
		p.members = slices.Delete(p.members, i, i+1)
		p.props["generation"] = st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

// memberIndex finds a member from its URL name: "~P~ip:port", or a bare
// "ip:port" (with %rd when it has one), which matches by name in any partition.
func (st *store) memberIndex(p *pool, pr ref, seg string) int {
	if strings.HasPrefix(seg, "~") {
		r, good := parseURLName(seg)
		if !good {
			return -1
		}
		return slices.IndexFunc(p.members, func(m obj) bool { return str(m, "fullPath") == r.fullPath() })
	}
	if i := slices.IndexFunc(p.members, func(m obj) bool {
		return str(m, "partition") == commonPartition && str(m, "name") == seg
	}); i >= 0 {
		return i
	}
	return slices.IndexFunc(p.members, func(m obj) bool { return str(m, "name") == seg })
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
