package bigipsim

import (
	"net/http"
	"slices"
	"strings"
)

// serveVirtual serves /ltm/virtual[/<name>[/profiles|/policies[/<name>]]].
func (st *store) serveVirtual(req request, rest []string) response {
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			return listCollection(req, "tm:ltm:virtual:virtualcollectionstate", "ltm/virtual", st.virtuals,
				func(v *virtual) obj { return v.props }, func(v *virtual) any { return virtualView(v, req.expand()) })
		case http.MethodPost:
			return st.createVirtual(req)
		}
		return methodNotAllowed(req.method, req.path)
	}
	r, good := parseURLName(rest[0])
	if !good {
		return notFound("Virtual Server", rest[0])
	}
	v := st.virtuals[r.fullPath()]
	if v == nil {
		return notFound("Virtual Server", r.fullPath())
	}
	if len(rest) > 1 {
		if len(rest) > 3 || (rest[1] != "profiles" && rest[1] != "policies") {
			return notRegistered(req.path)
		}
		return st.serveVirtualSub(req, v, rest[1], rest[2:])
	}
	switch req.method {
	case http.MethodGet:
		return ok(virtualView(v, req.expand()))
	case http.MethodPut, http.MethodPatch:
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		if resp, good := checkRename(body, r); !good {
			return resp
		}
		next := v.clone()
		if resp, good := st.applyVirtual(next, r, body); !good {
			return resp
		}
		*v = *next
		return ok(virtualView(v, false))
	case http.MethodDelete:
		delete(st.virtuals, r.fullPath())
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

func (v *virtual) clone() *virtual {
	return &virtual{props: copyObj(v.props), profiles: copyObjs(v.profiles), policies: copyObjs(v.policies),
		persist: copyObjs(v.persist), dest: v.dest}
}

func virtualView(v *virtual, expand bool) obj {
	o := copyObj(v.props)
	if len(v.persist) > 0 {
		items := make([]any, 0, len(v.persist))
		for _, p := range v.persist {
			items = append(items, copyObj(p))
		}
		o["persist"] = items
	}
	base := strings.TrimSuffix(str(v.props, "selfLink"), selfLinkVersion)
	for _, sub := range []struct {
		key, path string
		items     []obj
	}{{"profilesReference", "/profiles", v.profiles}, {"policiesReference", "/policies", v.policies}} {
		ref := obj{"link": base + sub.path + selfLinkVersion, "isSubcollection": true}
		if expand {
			items := make([]any, 0, len(sub.items))
			for _, it := range sub.items {
				items = append(items, copyObj(it))
			}
			ref["items"] = items
		}
		o[sub.key] = ref
	}
	return o
}

func (st *store) createVirtual(req request) response {
	body, r, resp, good := st.createTarget(req, "Virtual Server", func(fp string) bool { return st.virtuals[fp] != nil })
	if !good {
		return resp
	}
	if str(body, "destination") == "" {
		return badRequest("01070734:3: Configuration error: virtual server %s requires a destination", r.fullPath())
	}
	v := &virtual{props: obj{
		"kind":                     "tm:ltm:virtual:virtualstate",
		"name":                     r.name,
		"partition":                r.partition,
		"fullPath":                 r.fullPath(),
		"selfLink":                 selfLink("ltm/virtual", r.fullPath()),
		"enabled":                  true,
		"ipProtocol":               "tcp",
		"source":                   "0.0.0.0/0",
		"sourceAddressTranslation": obj{"type": "none"},
		"translateAddress":         "enabled",
		"translatePort":            "enabled",
	}}
	if _, present := body["profiles"]; !present {
		// BIG-IP gives a virtual the L4 profile of its protocol.
		proto, _ := body["ipProtocol"].(string)
		if proto == "" {
			proto = "tcp"
		}
		if _, builtin := builtinProfiles[proto]; builtin {
			body["profiles"] = []any{"/Common/" + proto}
		}
	}
	if resp, good := st.applyVirtual(v, r, body); !good {
		return resp
	}
	st.virtuals[r.fullPath()] = v
	return ok(virtualView(v, false))
}

// applyVirtual validates body and writes it into v: the destination must
// parse and not clash with another virtual, the pool must exist, the profiles
// must exist and suit the protocol.
func (st *store) applyVirtual(v *virtual, r ref, body obj) (response, bool) {
	if raw, present := body["destination"]; present {
		dest, _ := raw.(string)
		dr, good := parsePath(dest, r.partition)
		e, parsed := parseEndpoint(dr.name, false)
		if !good || !parsed {
			return badRequest("01070018:3: The requested destination (%v) of virtual server %s is invalid: want /partition/address:port.", raw, r.fullPath()), false
		}
		if st.folders[dr.partition] == nil {
			return folderMissing(dr.partition), false
		}
		body["destination"] = "/" + dr.partition + "/" + e.String()
		if _, present := body["mask"]; !present {
			body["mask"] = hostMask(e.addr)
		}
		if e.addr.Is6() {
			if _, present := body["source"]; !present {
				body["source"] = "::/0"
			}
		}
	}
	if raw, present := body["pool"]; present {
		name, _ := raw.(string)
		if name == "" || name == "none" {
			delete(body, "pool")
			delete(v.props, "pool")
		} else {
			pr, good := st.resolveRef(name, r.partition, func(fp string) bool { return st.pools[fp] != nil })
			if !good {
				return refNotFound("Pool", pr.fullPath()), false
			}
			body["pool"] = pr.fullPath()
		}
	}
	if raw, present := body["ipProtocol"]; present {
		switch raw {
		case "tcp", "udp", "sctp", "any":
		default:
			return badRequest("01070734:3: Configuration error: invalid ipProtocol %v", raw), false
		}
	}
	if raw, present := body["sourceAddressTranslation"]; present {
		sat, isObj := raw.(map[string]any)
		if !isObj {
			return badRequest("01070734:3: Configuration error: sourceAddressTranslation must be an object"), false
		}
		switch str(sat, "type") {
		case "":
			// go-bigip always sends the object, empty when unset: keep what is there.
			if cur, present := v.props["sourceAddressTranslation"]; present {
				body["sourceAddressTranslation"] = cur
			} else {
				body["sourceAddressTranslation"] = obj{"type": "none"}
			}
		case "automap", "none", "lsn":
		case "snat":
			if str(sat, "pool") == "" {
				return badRequest("01070734:3: Configuration error: sourceAddressTranslation type snat requires a pool"), false
			}
		default:
			return badRequest("01070734:3: Configuration error: invalid sourceAddressTranslation type %v", sat["type"]), false
		}
	}
	if raw, present := body["profiles"]; present {
		profiles, resp, good := st.parseProfiles(raw, str(v.props, "selfLink"))
		if !good {
			return resp, false
		}
		v.profiles = profiles
	}
	if raw, present := body["policies"]; present && raw != nil {
		list, isList := raw.([]any)
		if !isList {
			return badRequest("01070734:3: Configuration error: policies must be an array"), false
		}
		v.policies = nil
		for _, it := range list {
			p, resp, good := st.policyItem(it, str(v.props, "selfLink"))
			if !good {
				return resp, false
			}
			v.policies = append(v.policies, p)
		}
	}
	if raw, present := body["persist"]; present {
		persist, resp, good := st.parsePersist(raw)
		if !good {
			return resp, false
		}
		v.persist = persist
	}
	merge(v.props, body, "profiles", "policies", "persist")
	if resp, good := st.checkVirtual(v, r); !good {
		return resp, false
	}
	v.props["generation"] = st.next()
	return response{}, true
}

// checkVirtual checks what involves several properties: profiles against the
// protocol and each other, policies against profiles, and the destination
// against other virtuals.
func (st *store) checkVirtual(v *virtual, r ref) (response, bool) {
	proto := str(v.props, "ipProtocol")
	var hasTCP, hasHTTP bool
	var ssl []obj
	for _, p := range v.profiles {
		fp := str(p, "fullPath")
		need := builtinProfiles[str(p, "name")]
		if prof := st.sslProfiles[fp]; prof != nil {
			need = "tcp"
			ssl = append(ssl, prof)
		} else if fp == "/Common/clientssl" {
			ssl = append(ssl, obj{"fullPath": fp, "sniDefault": "false", "serverName": "none"})
		}
		if need != "" && proto != need {
			return badRequest("01070734:3: Configuration error: profile %s requires ipProtocol %s, virtual server %s has %s",
				fp, need, r.fullPath(), proto), false
		}
		hasTCP = hasTCP || tcpTransports[str(p, "name")] && str(p, "partition") == commonPartition
		hasHTTP = hasHTTP || fp == "/Common/http" || fp == "/Common/fasthttp"
	}
	if (hasHTTP || len(ssl) > 0) && !hasTCP {
		return badRequest("01070734:3: Configuration error: virtual server %s has an http or client-ssl profile and needs a tcp profile",
			r.fullPath()), false
	}
	if len(ssl) > 1 {
		defaults, names := 0, map[string]bool{}
		for _, p := range ssl {
			if str(p, "sniDefault") == "true" {
				defaults++
			}
			if n := str(p, "serverName"); n != "" && n != "none" {
				if names[n] {
					return badRequest("01070097:3: Virtual server %s: two client-ssl profiles have server name %s", r.fullPath(), n), false
				}
				names[n] = true
			}
		}
		if defaults != 1 {
			return badRequest("01070097:3: Virtual server %s has %d client-ssl profiles: exactly one must be the SNI default, %d are",
				r.fullPath(), len(ssl), defaults), false
		}
	}
	for _, p := range v.persist {
		if st.derivedType(persistenceDerived, persistPath(p)) == "cookie" && !hasHTTP {
			return badRequest("01070309:3: Cookie persistence requires an HTTP or FastHTTP profile to be associated with the virtual server."), false
		}
	}
	for _, pol := range v.policies {
		p := st.policies[str(pol, "fullPath")]
		if p == nil {
			return refNotFound("Policy", str(pol, "fullPath")), false
		}
		requires, _ := p.props["requires"].([]any)
		if slices.Contains(requires, any("http")) && !hasHTTP {
			return badRequest("01071734:3: Policy %s requires an http profile on virtual server %s", str(pol, "fullPath"), r.fullPath()), false
		}
	}
	dr, _ := parsePath(str(v.props, "destination"), r.partition)
	v.dest, _ = parseEndpoint(dr.name, false)
	for fp, o := range st.virtuals {
		if fp != r.fullPath() && o.dest.sameListener(v.dest) && str(o.props, "ipProtocol") == proto {
			return badRequest("01070333:3: Virtual Server %s illegally shares both address and vlan with Virtual Server %s.", r.fullPath(), fp), false
		}
	}
	return response{}, true
}

// tcpTransports are the built-in profiles that give a virtual TCP.
var tcpTransports = map[string]bool{
	"tcp": true, "tcp-lan-optimized": true, "tcp-wan-optimized": true, "tcp-mobile-optimized": true, "f5-tcp-progressive": true,
}

// resolveRef finds a referenced object: a full path, or a bare name looked up
// in the referring object's partition, then in /Common.
func (st *store) resolveRef(name, partition string, exists func(string) bool) (ref, bool) {
	r, good := parsePath(name, partition)
	if !good {
		return ref{partition, name}, false
	}
	if exists(r.fullPath()) {
		return r, true
	}
	if !strings.HasPrefix(name, "/") {
		c := ref{commonPartition, name}
		if exists(c.fullPath()) {
			return c, true
		}
	}
	return r, false
}

func (st *store) parseProfiles(raw any, vsLink string) ([]obj, response, bool) {
	if raw == nil {
		return nil, response{}, true
	}
	list, isList := raw.([]any)
	if !isList {
		return nil, badRequest("01070734:3: Configuration error: profiles must be an array"), false
	}
	var out []obj
	for _, it := range list {
		p, resp, good := st.profileItem(it, vsLink)
		if !good {
			return nil, resp, false
		}
		if slices.ContainsFunc(out, func(o obj) bool { return str(o, "fullPath") == str(p, "fullPath") }) {
			continue
		}
		out = append(out, p)
	}
	return out, response{}, true
}

// profileItem reads a profile given as "/Common/tcp", "tcp" or
// {"name":"tcp","partition":"Common","context":"all"}: a built-in profile of
// /Common or a client-ssl profile of the configuration.
func (st *store) profileItem(it any, vsLink string) (obj, response, bool) {
	body, r, resp, good := itemRef(it, "profile")
	if !good {
		return nil, resp, false
	}
	if st.sslProfiles[r.fullPath()] == nil {
		if _, builtin := builtinProfiles[r.name]; r.partition != commonPartition || !builtin {
			return nil, refNotFound("profile", r.fullPath()), false
		}
	}
	ctx := str(body, "context")
	switch ctx {
	case "":
		ctx = "all"
	case "all", "clientside", "serverside":
	default:
		return nil, badRequest("01070734:3: Configuration error: invalid profile context %s", ctx), false
	}
	return obj{
		"kind":      "tm:ltm:virtual:profiles:profilesstate",
		"name":      r.name,
		"partition": r.partition,
		"fullPath":  r.fullPath(),
		"context":   ctx,
		"selfLink":  strings.TrimSuffix(vsLink, selfLinkVersion) + "/profiles/" + strings.ReplaceAll(r.fullPath(), "/", "~") + selfLinkVersion,
	}, response{}, true
}

// parsePersist reads a virtual's persist property: persistence profiles
// given as names or {"name","partition"}, read back as BIG-IP lists them
// (the one default marked tmDefault). An empty list removes them.
func (st *store) parsePersist(raw any) ([]obj, response, bool) {
	if raw == nil {
		return nil, response{}, true
	}
	list, isList := raw.([]any)
	if !isList {
		return nil, badRequest("01070734:3: Configuration error: persist must be an array"), false
	}
	var out []obj
	for i, it := range list {
		_, r, resp, good := itemRef(it, "persistence profile")
		if !good {
			return nil, resp, false
		}
		typ := st.derivedType(persistenceDerived, r.fullPath())
		if typ == "" {
			return nil, refNotFound("Persistence Profile", r.fullPath()), false
		}
		tmDefault := "no"
		if i == 0 {
			tmDefault = "yes"
		}
		out = append(out, obj{"name": r.name, "partition": r.partition, "tmDefault": tmDefault,
			"nameReference": obj{"link": selfLink("ltm/persistence/"+typ, r.fullPath())}})
	}
	return out, response{}, true
}

// itemRef reads an item of a virtual's profiles, policies or persist: a
// name, or an object with a name and a partition.
func itemRef(it any, what string) (obj, ref, response, bool) {
	body, isObj := it.(map[string]any)
	if !isObj {
		s, isString := it.(string)
		if !isString {
			return nil, ref{}, badRequest("01070734:3: Configuration error: a %s must be a name or an object", what), false
		}
		body = obj{"name": s}
	}
	r, resp, good := bodyRef(body, commonPartition)
	return body, r, resp, good
}

// persistPath is the full path of an item of a virtual's persist.
func persistPath(p obj) string { return "/" + str(p, "partition") + "/" + str(p, "name") }

// policyItem reads a policy reference: a published LTM policy.
func (st *store) policyItem(it any, vsLink string) (obj, response, bool) {
	_, r, resp, good := itemRef(it, "policy")
	if !good {
		return nil, resp, false
	}
	if st.policies[r.fullPath()] == nil || isDraft(r.fullPath()) {
		return nil, refNotFound("Policy", r.fullPath()), false
	}
	return obj{
		"kind":      "tm:ltm:virtual:policies:policiesstate",
		"name":      r.name,
		"partition": r.partition,
		"fullPath":  r.fullPath(),
		"selfLink":  strings.TrimSuffix(vsLink, selfLinkVersion) + "/policies/" + strings.ReplaceAll(r.fullPath(), "/", "~") + selfLinkVersion,
	}, response{}, true
}

// serveVirtualSub serves a virtual's profiles or policies subcollection.
func (st *store) serveVirtualSub(req request, v *virtual, sub string, rest []string) response {
	items := &v.profiles
	parse, typ := st.profileItem, "profile"
	if sub == "policies" {
		items, parse, typ = &v.policies, st.policyItem, "policy"
	}
	vr := ref{str(v.props, "partition"), str(v.props, "name")}
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			out := make([]any, 0, len(*items))
			for _, it := range *items {
				out = append(out, copyObj(it))
			}
			link := "ltm/virtual/" + strings.ReplaceAll(vr.fullPath(), "/", "~") + "/" + sub
			return ok(collection("tm:ltm:virtual:"+sub+":"+sub+"collectionstate", link, out))
		case http.MethodPost:
			body, good := decodeBody(req.body)
			if !good {
				return invalidJSON()
			}
			it, resp, good := parse(body, str(v.props, "selfLink"))
			if !good {
				return resp
			}
			if slices.ContainsFunc(*items, func(o obj) bool { return str(o, "fullPath") == str(it, "fullPath") }) {
				return alreadyExists(typ, vr.fullPath()+" "+str(it, "fullPath"), vr.partition)
			}
			old := *items
			*items = append(slices.Clone(old), it)
			if resp, good := st.checkVirtual(v, vr); !good {
				*items = old
				return resp
			}
			v.props["generation"] = st.next()
			return ok(copyObj(it))
		}
		return methodNotAllowed(req.method, req.path)
	}
	r, good := parseURLName(rest[0])
	i := slices.IndexFunc(*items, func(o obj) bool { return good && str(o, "fullPath") == r.fullPath() })
	if i < 0 {
		return notFound(typ, vr.fullPath()+" "+rest[0])
	}
	switch req.method {
	case http.MethodGet:
		return ok(copyObj((*items)[i]))
	case http.MethodDelete:
		*items = slices.Delete(slices.Clone(*items), i, i+1)
		v.props["generation"] = st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}
