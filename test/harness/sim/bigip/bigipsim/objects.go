package bigipsim

import (
	"net/http"
	"strings"
)

// serve routes one call under /mgmt/tm/ to its collection.
func (st *store) serve(req request) response {
	if resp, good := checkProperties(req); !good {
		return resp
	}
	s := req.segs
	switch {
	case len(s) >= 2 && s[0] == "ltm" && s[1] == "pool":
		return st.servePool(req, s[2:])
	case len(s) >= 2 && s[0] == "ltm" && s[1] == "virtual":
		return st.serveVirtual(req, s[2:])
	case len(s) >= 2 && s[0] == "ltm" && s[1] == "node":
		return st.serveNode(req, s[2:])
	case len(s) >= 2 && s[0] == "ltm" && s[1] == "monitor":
		return st.serveMonitor(req, s[2:])
	case len(s) >= 2 && s[0] == "ltm" && s[1] == "policy":
		return st.servePolicy(req, s[2:])
	case len(s) >= 3 && s[0] == "ltm" && s[1] == "profile" && s[2] == "client-ssl":
		return st.serveClientSSL(req, s[3:])
	case len(s) >= 3 && s[0] == "sys" && s[1] == "file" && (s[2] == "ssl-cert" || s[2] == "ssl-key"):
		return st.serveSSLFile(req, s[2], s[3:])
	case len(s) >= 2 && s[0] == "sys" && s[1] == "folder":
		return st.serveFolder(req, s[2:], false)
	case len(s) >= 2 && s[0] == "auth" && s[1] == "partition":
		return st.serveFolder(req, s[2:], true)
	}
	return notRegistered(req.path)
}

// serveNode serves /ltm/node[/<name>].
func (st *store) serveNode(req request, rest []string) response {
	if len(rest) > 1 {
		return notRegistered(req.path)
	}
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			part, resp, good := req.partitionFilter()
			if !good {
				return resp
			}
			var items []any
			for _, fp := range sortedKeys(st.nodes) {
				if part == "" || str(st.nodes[fp], "partition") == part {
					items = append(items, copyObj(st.nodes[fp]))
				}
			}
			return ok(collection("tm:ltm:node:nodecollectionstate", "ltm/node", items))
		case http.MethodPost:
			body, r, resp, good := st.createTarget(req, "Node", func(fp string) bool { return st.nodes[fp] != nil })
			if !good {
				return resp
			}
			address := str(body, "address")
			if e, good := parseEndpoint(address+":0", false); !good || !e.addr.IsValid() {
				return badRequest("01070734:3: Configuration error: node %s needs a valid address, got %q", r.fullPath(), address)
			}
			if resp, good := checkMemberState(body); !good {
				return resp
			}
			st.ensureNode(r, address)
			merge(st.nodes[r.fullPath()], body)
			return ok(copyObj(st.nodes[r.fullPath()]))
		}
		return methodNotAllowed(req.method, req.path)
	}
	r, good := parseURLName(rest[0])
	n := st.nodes[r.fullPath()]
	if !good || n == nil {
		return notFound("Node", r.fullPath())
	}
	switch req.method {
	case http.MethodGet:
		return ok(copyObj(n))
	case http.MethodPut, http.MethodPatch:
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		if resp, good := checkRename(body, r); !good {
			return resp
		}
		if a := str(body, "address"); a != "" && a != str(n, "address") {
			return badRequest("01070734:3: Configuration error: the address of node %s cannot be modified", r.fullPath())
		}
		if resp, good := checkMemberState(body); !good {
			return resp
		}
		merge(n, body, "fqdn")
		n["generation"] = st.next()
		return ok(copyObj(n))
	case http.MethodDelete:
		for _, pfp := range sortedKeys(st.pools) {
			for _, m := range st.pools[pfp].members {
				if e, good := parseEndpoint(str(m, "name"), true); good && str(m, "partition") == r.partition && e.host == r.name {
					return badRequest("01070110:3: Node address '%s' is referenced by a member of pool '%s'.", r.fullPath(), pfp)
				}
			}
		}
		delete(st.nodes, r.fullPath())
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

// serveMonitor serves /ltm/monitor[/<type>[/<name>]].
func (st *store) serveMonitor(req request, rest []string) response {
	if len(rest) == 0 {
		if req.method != http.MethodGet {
			return methodNotAllowed(req.method, req.path)
		}
		var items []any
		for _, typ := range sortedKeys(st.monitors) {
			items = append(items, obj{"reference": obj{"link": selfLinkBase + "ltm/monitor/" + typ + selfLinkVersion}})
		}
		return ok(collection("tm:ltm:monitor:monitorcollectionstate", "ltm/monitor", items))
	}
	typ := rest[0]
	ms := st.monitors[typ]
	if ms == nil || len(rest) > 2 {
		return notRegistered(req.path)
	}
	if len(rest) == 1 {
		switch req.method {
		case http.MethodGet:
			var items []any
			for _, fp := range sortedKeys(ms) {
				items = append(items, publicMonitor(ms[fp]))
			}
			return ok(collection("tm:ltm:monitor:"+typ+":"+typ+"collectionstate", "ltm/monitor/"+typ, items))
		case http.MethodPost:
			body, r, resp, good := st.createTarget(req, "Monitor", func(fp string) bool { return st.monitorExists(fp) })
			if !good {
				return resp
			}
			parent := "/Common/" + builtinMonitors[typ]
			if d := str(body, "defaultsFrom"); d != "" {
				pr, _ := parsePath(d, commonPartition)
				if ms[pr.fullPath()] == nil {
					return refNotFound("Monitor", pr.fullPath())
				}
				parent = pr.fullPath()
			}
			m := copyObj(ms[parent])
			delete(m, "builtin")
			merge(m, body)
			m["name"], m["partition"], m["fullPath"] = r.name, r.partition, r.fullPath()
			m["defaultsFrom"] = parent
			m["selfLink"] = selfLink("ltm/monitor/"+typ, r.fullPath())
			m["generation"] = st.next()
			ms[r.fullPath()] = m
			return ok(publicMonitor(m))
		}
		return methodNotAllowed(req.method, req.path)
	}
	r, good := parseURLName(rest[1])
	m := ms[r.fullPath()]
	if !good || m == nil {
		return notFound("Monitor", r.fullPath())
	}
	switch req.method {
	case http.MethodGet:
		return ok(publicMonitor(m))
	case http.MethodPut, http.MethodPatch:
		if m["builtin"] == true {
			return badRequest("01070734:3: Configuration error: the built-in monitor %s cannot be modified", r.fullPath())
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
		return ok(publicMonitor(m))
	case http.MethodDelete:
		if m["builtin"] == true {
			return badRequest("01070734:3: Configuration error: the built-in monitor %s cannot be deleted", r.fullPath())
		}
		for _, pfp := range sortedKeys(st.pools) {
			if strings.Contains(str(st.pools[pfp].props, "monitor"), r.fullPath()+" ") {
				return badRequest("01070083:3: Monitor %s is in use by pool %s.", r.fullPath(), pfp)
			}
		}
		delete(ms, r.fullPath())
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

func publicMonitor(m obj) obj {
	o := copyObj(m)
	delete(o, "builtin")
	return o
}

// serveFolder serves partitions both as /sys/folder (folders at the root) and
// as /auth/partition; they are one set of objects, as on BIG-IP.
func (st *store) serveFolder(req request, rest []string, auth bool) response {
	view := func(f obj) obj {
		if !auth {
			return copyObj(f)
		}
		o := obj{
			"kind":               "tm:auth:partition:partitionstate",
			"name":               f["name"],
			"fullPath":           f["name"],
			"generation":         f["generation"],
			"selfLink":           selfLinkBase + "auth/partition/" + str(f, "name") + selfLinkVersion,
			"defaultRouteDomain": 0,
		}
		if d, present := f["description"]; present {
			o["description"] = d
		}
		return o
	}
	if len(rest) > 1 {
		return notRegistered(req.path)
	}
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			var items []any
			if !auth {
				items = append(items, obj{"kind": "tm:sys:folder:folderstate", "name": "/", "fullPath": "/", "subPath": "", "generation": 0,
					"selfLink": selfLinkBase + "sys/folder/~" + selfLinkVersion})
			}
			for _, name := range sortedKeys(st.folders) {
				items = append(items, view(st.folders[name]))
			}
			if auth {
				return ok(collection("tm:auth:partition:partitioncollectionstate", "auth/partition", items))
			}
			return ok(collection("tm:sys:folder:foldercollectionstate", "sys/folder", items))
		case http.MethodPost:
			body, good := decodeBody(req.body)
			if !good {
				return invalidJSON()
			}
			name := strings.Trim(str(body, "name"), "/")
			if fp := str(body, "fullPath"); name == "" && fp != "" {
				name = strings.Trim(fp, "/")
			}
			if p := strings.Trim(str(body, "partition"), "/"); !auth && p != "" {
				return badRequest("01070734:3: Configuration error: this simulator supports folders at the root (partitions) only, not in /%s", p)
			}
			if name == "" || strings.Contains(name, "/") || !validName(name) {
				return badRequest("01070022:3: The requested folder name (%s) is invalid.", str(body, "name"))
			}
			if st.folders[name] != nil {
				return errorf(http.StatusConflict, "01070711:3: The requested folder (/%s) already exists.", name)
			}
			st.folders[name] = st.newFolder(name, str(body, "description"))
			return ok(view(st.folders[name]))
		}
		return methodNotAllowed(req.method, req.path)
	}
	name := strings.Trim(strings.ReplaceAll(rest[0], "~", "/"), "/")
	f := st.folders[name]
	if f == nil {
		return notFound("folder", "/"+name)
	}
	switch req.method {
	case http.MethodGet:
		return ok(view(f))
	case http.MethodPut, http.MethodPatch:
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		if d, present := body["description"]; present {
			f["description"] = d
		}
		f["generation"] = st.next()
		return ok(view(f))
	case http.MethodDelete:
		if name == commonPartition {
			return badRequest("01070734:3: Configuration error: the partition Common cannot be deleted")
		}
		if st.partitionInUse(name) {
			return badRequest("01070829:3: Folder /%s cannot be deleted because it contains configuration objects.", name)
		}
		delete(st.folders, name)
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

func (st *store) partitionInUse(name string) bool {
	for _, p := range st.pools {
		if str(p.props, "partition") == name {
			return true
		}
	}
	for _, v := range st.virtuals {
		if str(v.props, "partition") == name {
			return true
		}
	}
	for _, n := range st.nodes {
		if str(n, "partition") == name {
			return true
		}
	}
	for _, ms := range st.monitors {
		for _, m := range ms {
			if str(m, "partition") == name {
				return true
			}
		}
	}
	for _, p := range st.policies {
		if str(p.props, "partition") == name {
			return true
		}
	}
	for _, objs := range []map[string]obj{st.sslProfiles} {
		for _, o := range objs {
			if str(o, "partition") == name {
				return true
			}
		}
	}
	for _, files := range []map[string]*sslFile{st.certs, st.keys} {
		for _, f := range files {
			if str(f.props, "partition") == name {
				return true
			}
		}
	}
	return false
}
