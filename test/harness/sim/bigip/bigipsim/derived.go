package bigipsim

import (
	"net/http"
	"strings"
)

// derivedKind is a collection of objects of several types that each take
// their defaults from a parent of their type (defaultsFrom): monitors
// (/ltm/monitor/tcp, …) and persistence profiles (/ltm/persistence/
// source-addr, …). Each type has a built-in parent in /Common, which
// cannot be changed or deleted; an object in use cannot be deleted.
type derivedKind struct {
	collection string // "ltm/monitor"
	display    string // in errors: "Monitor"
	// objects are the store's objects: type -> full path -> object.
	objects func(st *store) map[string]map[string]obj
	// builtin is the name of each type's built-in parent in /Common.
	builtin map[string]string
	// usedBy names what uses the object fullPath, "" when nothing does.
	usedBy func(st *store, fullPath string) string
	// inUse is BIG-IP's answer to the delete of an object in use.
	inUse func(fullPath, user string) response
}

var (
	monitorsDerived = derivedKind{
		collection: "ltm/monitor", display: "Monitor", builtin: builtinMonitors,
		objects: func(st *store) map[string]map[string]obj { return st.monitors },
		usedBy: func(st *store, fullPath string) string {
			for _, pfp := range sortedKeys(st.pools) {
				if strings.Contains(str(st.pools[pfp].props, "monitor"), fullPath+" ") {
					return pfp
				}
			}
			return ""
		},
		inUse: func(fullPath, pool string) response {
			return badRequest("01070083:3: Monitor %s is in use by pool %s.", fullPath, pool)
		},
	}
	persistenceDerived = derivedKind{
		collection: "ltm/persistence", display: "Persistence Profile", builtin: builtinPersistence,
		objects: func(st *store) map[string]map[string]obj { return st.persistence },
		usedBy: func(st *store, fullPath string) string {
			for _, vfp := range sortedKeys(st.virtuals) {
				for _, p := range st.virtuals[vfp].persist {
					if persistPath(p) == fullPath {
						return vfp
					}
				}
			}
			return ""
		},
		inUse: func(fullPath, virtual string) response {
			return badRequest("01070734:3: Configuration error: persistence profile %s is in use by virtual server %s", fullPath, virtual)
		},
	}
)

// serveDerived serves /<collection>[/<type>[/<name>]].
func (st *store) serveDerived(req request, rest []string, k derivedKind) response {
	all := k.objects(st)
	if len(rest) == 0 {
		if req.method != http.MethodGet {
			return methodNotAllowed(req.method, req.path)
		}
		var items []any
		for _, typ := range sortedKeys(all) {
			items = append(items, obj{"reference": obj{"link": selfLinkBase + k.collection + "/" + typ + selfLinkVersion}})
		}
		kind := strings.ReplaceAll(k.collection, "/", ":")
		return ok(collection("tm:"+kind+":"+k.collection[strings.LastIndexByte(k.collection, '/')+1:]+"collectionstate", k.collection, items))
	}
	typ := rest[0]
	ms := all[typ]
	if ms == nil || len(rest) > 2 {
		return notRegistered(req.path)
	}
	kind := "tm:" + strings.ReplaceAll(k.collection, "/", ":") + ":" + typ + ":" + typ
	if len(rest) == 1 {
		switch req.method {
		case http.MethodGet:
			return listCollection(req, kind+"collectionstate", k.collection+"/"+typ, ms, self,
				func(m obj) any { return publicDerived(m) })
		case http.MethodPost:
			body, r, resp, good := st.createTarget(req, k.display, func(fp string) bool { return st.derivedExists(k, fp) })
			if !good {
				return resp
			}
			parent := "/" + commonPartition + "/" + k.builtin[typ]
			if d := str(body, "defaultsFrom"); d != "" {
				pr, _ := parsePath(d, commonPartition)
				if ms[pr.fullPath()] == nil {
					return refNotFound(k.display, pr.fullPath())
				}
				parent = pr.fullPath()
			}
			m := copyObj(ms[parent])
			delete(m, "builtin")
			merge(m, body)
			m["name"], m["partition"], m["fullPath"] = r.name, r.partition, r.fullPath()
			m["defaultsFrom"] = parent
			m["selfLink"] = selfLink(k.collection+"/"+typ, r.fullPath())
			m["generation"] = st.next()
			ms[r.fullPath()] = m
			return ok(publicDerived(m))
		}
		return methodNotAllowed(req.method, req.path)
	}
	r, good := parseURLName(rest[1])
	m := ms[r.fullPath()]
	if !good || m == nil {
		return notFound(k.display, r.fullPath())
	}
	switch req.method {
	case http.MethodGet:
		return ok(publicDerived(m))
	case http.MethodPut, http.MethodPatch:
		if m["builtin"] == true {
			return badRequest("01070734:3: Configuration error: the built-in %s %s cannot be modified", strings.ToLower(k.display), r.fullPath())
		}
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		if resp, good := checkRename(body, r); !good {
			return resp
		}
		merge(m, body)
		m["generation"] = st.next()
		return ok(publicDerived(m))
	case http.MethodDelete:
		if m["builtin"] == true {
			return badRequest("01070734:3: Configuration error: the built-in %s %s cannot be deleted", strings.ToLower(k.display), r.fullPath())
		}
		if user := k.usedBy(st, r.fullPath()); user != "" {
			return k.inUse(r.fullPath(), user)
		}
		delete(ms, r.fullPath())
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

// derivedExists reports whether an object of any type of k has the path.
func (st *store) derivedExists(k derivedKind, fullPath string) bool {
	for _, ms := range k.objects(st) {
		if ms[fullPath] != nil {
			return true
		}
	}
	return false
}

// derivedType returns the type of the object fullPath of k, "" when none.
func (st *store) derivedType(k derivedKind, fullPath string) string {
	for typ, ms := range k.objects(st) {
		if ms[fullPath] != nil {
			return typ
		}
	}
	return ""
}

func publicDerived(m obj) obj {
	o := copyObj(m)
	delete(o, "builtin")
	return o
}
