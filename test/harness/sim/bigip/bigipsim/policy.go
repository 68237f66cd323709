package bigipsim

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// policy is an LTM policy, published (/P/name) or a draft
// (/P/Drafts/name). Since BIG-IP 12.1 a policy is created and changed as a
// draft and published; a published policy cannot be changed in place.
type policy struct {
	props obj
	rules []policyRule
}

type policyRule struct {
	props      obj
	conditions []obj
	actions    []obj
}

const draftsFolder = "Drafts/"

func (p *policy) clone() *policy {
	c := &policy{props: copyObj(p.props)}
	for _, r := range p.rules {
		c.rules = append(c.rules, policyRule{props: copyObj(r.props), conditions: copyObjs(r.conditions), actions: copyObjs(r.actions)})
	}
	return c
}

func isDraft(fullPath string) bool {
	_, rest, _ := strings.Cut(strings.TrimPrefix(fullPath, "/"), "/")
	return strings.HasPrefix(rest, draftsFolder)
}

// The operands, selectors and operators of the conditions the simulator
// understands, and its actions.
var (
	conditionOperands = map[string][]string{"httpHost": {"host", "all"}, "httpUri": {"path", "all", "queryString", "queryParameter"},
		"httpMethod": nil, "httpHeader": nil}
	conditionSelectors = []string{"host", "all", "path", "queryString", "queryParameter"}
	conditionOperators = []string{"equals", "startsWith", "endsWith", "contains"}
	policyStrategies   = []string{"first-match", "best-match", "all-match"}
)

// servePolicy serves /ltm/policy[/<name>]: POST creates a draft or, with
// {"command":"publish","name":"/P/Drafts/x"}, publishes one; PATCH with
// ?options=create-draft on a published policy makes its draft.
func (st *store) servePolicy(req request, rest []string) response {
	if len(rest) == 0 {
		switch req.method {
		case http.MethodGet:
			part, resp, good := req.partitionFilter()
			if !good {
				return resp
			}
			var items []any
			for _, fp := range sortedKeys(st.policies) {
				if part == "" || str(st.policies[fp].props, "partition") == part {
					items = append(items, policyView(st.policies[fp], req.expand()))
				}
			}
			return ok(collection("tm:ltm:policy:policycollectionstate", "ltm/policy", items))
		case http.MethodPost:
			body, good := decodeBody(req.body)
			if !good {
				return invalidJSON()
			}
			if str(body, "command") == "publish" {
				return st.publish(str(body, "name"))
			}
			return st.createPolicy(body)
		}
		return methodNotAllowed(req.method, req.path)
	}
	if len(rest) > 1 {
		return notRegistered(req.path)
	}
	r, good := parseURLName(rest[0])
	p := st.policies[r.fullPath()]
	if !good || p == nil {
		return notFound("Policy", r.fullPath())
	}
	switch req.method {
	case http.MethodGet:
		return ok(policyView(p, req.expand()))
	case http.MethodPut, http.MethodPatch:
		if req.query.Get("options") == "create-draft" {
			if isDraft(r.fullPath()) {
				return badRequest("01071726:3: Policy %s is a draft already", r.fullPath())
			}
			draft := ref{r.partition, draftsFolder + r.name}
			if st.policies[draft.fullPath()] != nil {
				return alreadyExists("Policy", draft.fullPath(), r.partition)
			}
			d := p.clone()
			setPolicyPath(d.props, draft)
			d.props["status"] = "draft"
			d.props["generation"] = st.next()
			st.policies[draft.fullPath()] = d
			return ok(policyView(d, false))
		}
		if !isDraft(r.fullPath()) {
			return publishedDirectly(r)
		}
		body, good := decodeBody(req.body)
		if !good {
			return invalidJSON()
		}
		if n := str(body, "name"); n != "" && n != r.name && n != strings.TrimPrefix(r.name, draftsFolder) && n != r.fullPath() {
			return badRequest("01070734:3: Configuration error: the name of %s cannot be modified", r.fullPath())
		}
		next := p.clone()
		if resp, good := st.applyPolicy(next, r, body); !good {
			return resp
		}
		st.policies[r.fullPath()] = next
		return ok(policyView(next, false))
	case http.MethodDelete:
		for _, vfp := range sortedKeys(st.virtuals) {
			if slices.ContainsFunc(st.virtuals[vfp].policies, func(o obj) bool { return str(o, "fullPath") == r.fullPath() }) {
				return badRequest("01071726:3: Policy %s is in use by virtual server %s.", r.fullPath(), vfp)
			}
		}
		delete(st.policies, r.fullPath())
		st.next()
		return ok(nil)
	}
	return methodNotAllowed(req.method, req.path)
}

// publishedDirectly is BIG-IP's answer to a create or change of a
// published policy (REFERENCE §18).
func publishedDirectly(r ref) response {
	return badRequest("01071abb:3: Cannot create/modify published policy '%s' directly, try specifying a draft folder like '/%s/Drafts/%s'.",
		r.fullPath(), r.partition, r.name)
}

func setPolicyPath(props obj, r ref) {
	name := strings.TrimPrefix(r.name, draftsFolder)
	props["name"], props["partition"], props["fullPath"] = name, r.partition, r.fullPath()
	props["selfLink"] = selfLink("ltm/policy", r.fullPath())
	if name != r.name {
		props["subPath"] = strings.TrimSuffix(draftsFolder, "/")
	} else {
		delete(props, "subPath")
	}
}

func (st *store) createPolicy(body obj) response {
	if sub := strings.Trim(str(body, "subPath"), "/"); sub != "" {
		if sub+"/" != draftsFolder {
			return badRequest("01070734:3: Configuration error: this simulator keeps policies in /<partition>/Drafts only, not %s", sub)
		}
		if n := str(body, "name"); n != "" && !strings.HasPrefix(n, "/") && !strings.HasPrefix(n, draftsFolder) {
			body["name"] = draftsFolder + n
		}
	}
	delete(body, "subPath")
	r, resp, good := bodyRef(body, commonPartition)
	if !good {
		return resp
	}
	legacy := body["legacy"] == true
	if !isDraft(r.fullPath()) && !legacy {
		return publishedDirectly(r)
	}
	if st.folders[r.partition] == nil {
		return folderMissing(r.partition)
	}
	if st.policies[r.fullPath()] != nil {
		return alreadyExists("Policy", r.fullPath(), r.partition)
	}
	if pub := (ref{r.partition, strings.TrimPrefix(r.name, draftsFolder)}); isDraft(r.fullPath()) && st.policies[pub.fullPath()] != nil {
		// BIG-IP's answer (REFERENCE §18): a draft of an existing policy is
		// made from it, with options=create-draft.
		return badRequest("01070734:3: Configuration error: Published policy \"%s\" exists, use create-draft to create a draft copy .", pub.fullPath())
	}
	p := &policy{props: obj{"kind": "tm:ltm:policy:policystate", "strategy": "/Common/first-match", "requires": []any{},
		"controls": []any{}, "status": "draft"}}
	setPolicyPath(p.props, r)
	if legacy {
		p.props["status"] = "legacy"
	}
	delete(body, "legacy")
	if resp, good := st.applyPolicy(p, r, body); !good {
		return resp
	}
	st.policies[r.fullPath()] = p
	return ok(policyView(p, false))
}

// publish makes the draft name the published policy, in use at once by the
// virtuals that reference it, and removes the draft.
func (st *store) publish(name string) response {
	dr, good := parsePath(name, commonPartition)
	d := st.policies[dr.fullPath()]
	if !good || d == nil || !isDraft(dr.fullPath()) {
		return notFound("Policy draft", dr.fullPath())
	}
	pub := ref{dr.partition, strings.TrimPrefix(dr.name, draftsFolder)}
	p := d.clone()
	setPolicyPath(p.props, pub)
	p.props["status"] = "published"
	old := st.policies[pub.fullPath()]
	st.policies[pub.fullPath()] = p
	for _, vfp := range sortedKeys(st.virtuals) {
		v := st.virtuals[vfp]
		if slices.ContainsFunc(v.policies, func(o obj) bool { return str(o, "fullPath") == pub.fullPath() }) {
			vr, _ := parsePath(vfp, commonPartition)
			if resp, good := st.checkVirtual(v, vr); !good {
				if old == nil {
					delete(st.policies, pub.fullPath())
				} else {
					st.policies[pub.fullPath()] = old
				}
				return resp
			}
		}
	}
	delete(st.policies, dr.fullPath())
	p.props["generation"] = st.next()
	return ok(policyView(p, false))
}

// applyPolicy validates body and writes it into p: the strategy, and the
// rules (given inline as "rules" with "conditions" and "actions", or as
// go-bigip sends them under rulesReference.items), which replace the old
// ones. Conditions must be httpHost or httpUri tests, actions forward to an
// existing pool or reset; the policy must require http and control
// forwarding when its rules need them.
func (st *store) applyPolicy(p *policy, r ref, body obj) (response, bool) {
	if s, present := body["strategy"]; present {
		name := strings.TrimPrefix(strings.TrimPrefix(str(body, "strategy"), "/Common/"), "Common/")
		if !slices.Contains(policyStrategies, name) {
			return badRequest("01070734:3: Configuration error: unknown strategy %v", s), false
		}
		body["strategy"] = "/Common/" + name
	}
	rawRules, present := body["rules"]
	if ref, isObj := body["rulesReference"].(map[string]any); isObj && !present {
		rawRules, present = ref["items"], true
	}
	if present {
		list, isList := rawRules.([]any)
		if rawRules != nil && !isList {
			return badRequest("01070734:3: Configuration error: rules must be an array"), false
		}
		var rules []policyRule
		names := map[string]bool{}
		for i, raw := range list {
			rb, isObj := raw.(map[string]any)
			name := str(rb, "name")
			if !isObj || name == "" || !validName(name) {
				return badRequest("01070734:3: Configuration error: rules[%d] needs a valid name", i), false
			}
			if names[name] {
				return alreadyExists("Policy rule", r.fullPath()+" "+name, r.partition), false
			}
			names[name] = true
			rule := policyRule{props: obj{"kind": "tm:ltm:policy:rules:rulesstate", "name": name, "fullPath": name,
				"ordinal": rb["ordinal"]}}
			if rule.props["ordinal"] == nil {
				rule.props["ordinal"] = i
			}
			if d := str(rb, "description"); d != "" {
				rule.props["description"] = d
			}
			for _, sub := range []struct {
				key   string
				into  *[]obj
				check func(obj) (response, bool)
			}{
				{"conditions", &rule.conditions, func(c obj) (response, bool) { return checkCondition(r, name, c) }},
				{"actions", &rule.actions, func(a obj) (response, bool) { return st.checkAction(r, name, a) }},
			} {
				items, _ := rb[sub.key].([]any)
				if ref, isObj := rb[sub.key+"Reference"].(map[string]any); isObj && items == nil {
					items, _ = ref["items"].([]any)
				}
				for j, it := range items {
					o, isObj := it.(map[string]any)
					if !isObj {
						return badRequest("01070734:3: Configuration error: rule %s %s[%d] must be an object", name, sub.key, j), false
					}
					o = copyObj(o)
					if str(o, "name") == "" {
						o["name"] = strconv.Itoa(j)
					}
					if resp, good := sub.check(o); !good {
						return resp, false
					}
					*sub.into = append(*sub.into, o)
				}
			}
			rules = append(rules, rule)
		}
		p.rules = rules
	}
	merge(p.props, body, "rules", "rulesReference", "subPath", "status", "legacy", "command")
	requires, _ := p.props["requires"].([]any)
	controls, _ := p.props["controls"].([]any)
	for _, rule := range p.rules {
		if len(rule.conditions) > 0 && !slices.Contains(requires, any("http")) {
			return badRequest("01071734:3: Policy %s rule %s uses http conditions but the policy does not require http",
				r.fullPath(), str(rule.props, "name")), false
		}
		for _, a := range rule.actions {
			if (a["forward"] == true || a["httpReply"] == true) && !slices.Contains(controls, any("forwarding")) {
				return badRequest("01071734:3: Policy %s rule %s forwards but the policy does not control forwarding",
					r.fullPath(), str(rule.props, "name")), false
			}
		}
	}
	p.props["generation"] = st.next()
	return response{}, true
}

// checkCondition accepts a test of one operand (httpHost, httpUri,
// httpMethod, httpHeader) with the selector it needs (host or all of
// httpHost; path, all, queryString or queryParameter of httpUri; none of
// httpMethod and httpHeader), a tmName for a header or a query parameter
// and for nothing else, one operator and values.
func checkCondition(r ref, rule string, c obj) (response, bool) {
	var operand string
	for op := range conditionOperands {
		if c[op] == true {
			if operand != "" {
				return badRequest("01071734:3: Policy %s rule %s: a condition has one operand", r.fullPath(), rule), false
			}
			operand = op
		}
	}
	if operand == "" {
		return badRequest("01071734:3: Policy %s rule %s: this simulator supports httpHost, httpUri, httpMethod and httpHeader conditions", r.fullPath(), rule), false
	}
	selectors, selector := 0, ""
	for _, s := range conditionOperands[operand] {
		if c[s] == true {
			selectors++
			selector = s
		}
	}
	operators := 0
	for _, o := range conditionOperators {
		if c[o] == true {
			operators++
		}
	}
	values, _ := c["values"].([]any)
	named := operand == "httpHeader" || selector == "queryParameter"
	switch {
	case len(conditionOperands[operand]) > 0 && selectors != 1:
		return badRequest("01071734:3: Policy %s rule %s: %s needs one of %v", r.fullPath(), rule, operand, conditionOperands[operand]), false
	case len(conditionOperands[operand]) == 0 && slices.ContainsFunc(conditionSelectors, func(s string) bool { return s != "all" && c[s] == true }):
		// BIG-IP answers all: true on an httpHeader condition
		// (f5-cccl's bigip_policy.json), so it goes back in.
		return badRequest("01071734:3: Policy %s rule %s: %s takes no selector", r.fullPath(), rule, operand), false
	case named && str(c, "tmName") == "":
		return badRequest("01071734:3: Policy %s rule %s: %s needs a name (tmName)", r.fullPath(), rule, operand), false
	case !named && c["tmName"] != nil:
		return badRequest("01071734:3: Policy %s rule %s: %s takes no name (tmName)", r.fullPath(), rule, operand), false
	case operators != 1:
		return badRequest("01071734:3: Policy %s rule %s: a condition needs one of %v", r.fullPath(), rule, conditionOperators), false
	case len(values) == 0:
		return badRequest("01071734:3: Policy %s rule %s: a condition needs values", r.fullPath(), rule), false
	}
	if _, present := c["request"]; !present {
		c["request"] = true
	}
	// Conditions compare case-insensitively unless told otherwise: BIG-IP
	// answers caseInsensitive: true for a condition sent without caseSensitive
	// (go-bigip's ltm_test.go at 62236ad8, 11.5.1: an httpUri startsWith;
	// f5-cccl's bigip_policy.json, 12.1.1: an httpHeader contains).
	switch {
	case c["caseSensitive"] == true && c["caseInsensitive"] == true:
		return badRequest("01071734:3: Policy %s rule %s: a condition is case-sensitive or case-insensitive, not both", r.fullPath(), rule), false
	case c["caseSensitive"] == true:
		delete(c, "caseInsensitive")
	default:
		delete(c, "caseSensitive")
		c["caseInsensitive"] = true
	}
	return response{}, true
}

// checkAction accepts forwarding to an existing pool, reset, a redirect
// (httpReply redirect with a location), header changes (httpHeader
// replace, insert or remove with a tmName, and a value but for remove), and
// replacements of the URI (httpUri replace of the path, the query string
// or the whole value) and of the host (httpHost replace value). Each
// happens at request (the default) or at response; forwarding, redirects
// and URI and host changes at request only.
func (st *store) checkAction(r ref, rule string, a obj) (response, bool) {
	if a["request"] == true && a["response"] == true {
		return badRequest("01071734:3: Policy %s rule %s: an action happens at request or at response, not both", r.fullPath(), rule), false
	}
	if a["response"] != true {
		a["request"] = true
	}
	atRequest := a["request"] == true
	one := func(keys ...string) (string, int) {
		found, n := "", 0
		for _, k := range keys {
			if a[k] == true {
				found, n = k, n+1
			}
		}
		return found, n
	}
	bad := func(format string, args ...any) (response, bool) {
		return badRequest("01071734:3: Policy %s rule %s: "+format, append([]any{r.fullPath(), rule}, args...)...), false
	}
	switch {
	case a["forward"] == true:
		name := str(a, "pool")
		if name == "" {
			return bad("this simulator forwards to pools only")
		}
		if !atRequest {
			return bad("forward happens at request")
		}
		pr, good := st.resolveRef(name, r.partition, func(fp string) bool { return st.pools[fp] != nil })
		if !good {
			return refNotFound("Pool", pr.fullPath()), false
		}
		a["pool"] = pr.fullPath()
		a["select"] = true
	case a["reset"] == true:
	case a["httpReply"] == true:
		if a["redirect"] != true || str(a, "location") == "" || !atRequest {
			return bad("httpReply needs redirect and a location, at request")
		}
	case a["httpHeader"] == true:
		op, n := one("replace", "insert", "remove")
		switch {
		case n != 1:
			return bad("httpHeader needs one of replace, insert, remove")
		case str(a, "tmName") == "":
			return bad("httpHeader %s needs a header name (tmName)", op)
		case op != "remove" && a["value"] == nil:
			return bad("httpHeader %s needs a value", op)
		case op == "remove" && a["value"] != nil:
			return bad("httpHeader remove takes no value")
		}
	case a["httpUri"] == true:
		parts := 0
		for _, k := range []string{"path", "queryString", "value"} {
			if a[k] != nil {
				if v, isString := a[k].(string); !isString || v == "" {
					return bad("httpUri replace %s needs a string", k)
				}
				parts++
			}
		}
		if a["replace"] != true || parts != 1 || !atRequest {
			return bad("httpUri needs replace and one of path, queryString, value, at request")
		}
	case a["httpHost"] == true:
		if a["replace"] != true || str(a, "value") == "" || !atRequest {
			return bad("httpHost needs replace and a value, at request")
		}
	default:
		return bad("this simulator supports forward, reset, httpReply, httpHeader, httpUri and httpHost actions")
	}
	return response{}, true
}

// pools returns the pools a policy forwards to.
func (p *policy) pools() []string {
	var out []string
	for _, r := range p.rules {
		for _, a := range r.actions {
			if pl := str(a, "pool"); pl != "" {
				out = append(out, pl)
			}
		}
	}
	return out
}

func policyView(p *policy, expand bool) obj {
	o := copyObj(p.props)
	base := strings.TrimSuffix(str(p.props, "selfLink"), selfLinkVersion)
	ref := obj{"link": base + "/rules" + selfLinkVersion, "isSubcollection": true}
	if expand {
		items := make([]any, 0, len(p.rules))
		for _, r := range p.rules {
			ro := copyObj(r.props)
			for _, sub := range []struct {
				key   string
				items []obj
			}{{"conditionsReference", r.conditions}, {"actionsReference", r.actions}} {
				list := make([]any, 0, len(sub.items))
				for _, it := range sub.items {
					list = append(list, copyObj(it))
				}
				ro[sub.key] = obj{"isSubcollection": true, "items": list}
			}
			items = append(items, ro)
		}
		ref["items"] = items
	}
	o["rulesReference"] = ref
	return o
}
