package bigip

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
)

// The rules of the LTM policies: how a model rule becomes policy rules
// (one per path test, rule-<i>.<j>, i its rank in SortRules' order) and
// how List reads them back (docs/bigip.md has the table).

// ruleNote is what a policy rule's description keeps of its model rule
// that its conditions and actions do not tell: the Order that ranked it,
// its Ports (empty for every listener, which the policies it is in cannot
// tell from all of them), and its Redirect (whose location spells unset
// parts as the listener's). Empty for the rules of an Ingress.
type ruleNote struct {
	Order    int32             `json:"order,omitempty"`
	Ports    []int32           `json:"ports,omitempty"`
	Redirect *lbmodel.Redirect `json:"redirect,omitempty"`
}

func (n ruleNote) String() string {
	if n.Order == 0 && len(n.Ports) == 0 && n.Redirect == nil {
		return ""
	}
	b, _ := json.Marshal(n) // numbers and strings always encode
	return string(b)
}

// listenerRef is the listener a policy serves: its protocol and port, or
// the zero listenerRef for the one policy of an Ingress, which serves
// every listener.
type listenerRef struct {
	protocol lbmodel.Protocol
	port     int32
}

// policyRules makes the rules of the policy of listener l: the rules,
// sorted by SortRules, that serve its port.
func policyRules(rules []lbmodel.Rule, l listenerRef, partition string) []ruleBody {
	out := []ruleBody{}
	for i, r := range rules {
		if l.port != 0 && len(r.Ports) > 0 && !slices.Contains(r.Ports, l.port) {
			continue
		}
		note := ruleNote{Order: r.Order, Ports: r.Ports, Redirect: r.Redirect}.String()
		actions := ruleActions(r, l, partition)
		for j, m := range r.PathMatches() {
			out = append(out, ruleBody{Name: fmt.Sprintf("rule-%d.%d", i, j), Ordinal: len(out), Description: note,
				Conditions: ruleConditions(r, m), Actions: actions})
		}
	}
	return out
}

func ruleConditions(r lbmodel.Rule, m lbmodel.PathMatch) []conditionState {
	var out []conditionState
	add := func(c conditionState) {
		c.Name, c.Request = strconv.Itoa(len(out)), true
		out = append(out, c)
	}
	switch {
	case strings.HasPrefix(r.Host, "*."):
		add(conditionState{HTTPHost: true, Host: true, EndsWith: true, CaseInsensitive: true, Values: []string{r.Host[1:]}})
	case r.Host != "":
		add(conditionState{HTTPHost: true, Host: true, Equals: true, CaseInsensitive: true, Values: []string{r.Host}})
	}
	add(conditionState{HTTPURI: true, Path: true, Equals: !m.Prefix, StartsWith: m.Prefix, CaseSensitive: true, Values: []string{m.Path}})
	if r.Method != "" {
		add(conditionState{HTTPMethod: true, Equals: true, CaseSensitive: true, Values: []string{r.Method}})
	}
	for _, h := range r.Headers {
		add(conditionState{HTTPHeader: true, TmName: h.Name, Equals: true, CaseSensitive: true, Values: []string{h.Value}})
	}
	for _, q := range r.Query {
		add(conditionState{HTTPURI: true, QueryParameter: true, TmName: q.Name, Equals: true, CaseSensitive: true, Values: []string{q.Value}})
	}
	return out
}

func ruleActions(r lbmodel.Rule, l listenerRef, partition string) []actionState {
	var out []actionState
	add := func(a actionState) {
		a.Name = strconv.Itoa(len(out))
		if !a.Response {
			a.Request = true
		}
		out = append(out, a)
	}
	headers := func(f *lbmodel.HeaderFilter, response bool) {
		if f == nil {
			return
		}
		for _, h := range f.Set {
			add(actionState{HTTPHeader: true, Replace: true, TmName: h.Name, Value: &h.Value, Response: response})
		}
		for _, h := range f.Add {
			add(actionState{HTTPHeader: true, Insert: true, TmName: h.Name, Value: &h.Value, Response: response})
		}
		for _, n := range f.Remove {
			add(actionState{HTTPHeader: true, Remove: true, TmName: n, Response: response})
		}
	}
	if r.Redirect != nil {
		add(actionState{HTTPReply: true, Redirect: true, Location: redirectLocation(r.Redirect, l)})
		return out
	}
	headers(r.RequestHeaders, false)
	if w := r.Rewrite; w != nil {
		if w.Hostname != "" {
			add(actionState{HTTPHost: true, Replace: true, Value: &w.Hostname})
		}
		if w.Path != nil {
			add(actionState{HTTPURI: true, Replace: true, Path: w.Path.Value})
		}
	}
	add(actionState{Forward: true, Select: true, Pool: fullPath(partition, r.Pool)})
	headers(r.ResponseHeaders, true)
	return out
}

// redirectLocation is the location of a redirect (status 302, no path
// modifier) on listener l, as Gateway API derives it: the scheme, else the
// listener's; the host name, else the request's (without its port); the
// port, else the scheme's well-known port when the scheme is set, else
// the listener's, left out when it is the scheme's well-known port; then
// the request's path and query.
func redirectLocation(d *lbmodel.Redirect, l listenerRef) string {
	scheme := d.Scheme
	if scheme == "" {
		scheme = "http"
		if l.protocol == lbmodel.HTTPS {
			scheme = "https"
		}
	}
	wellKnown := int32(80)
	if scheme == "https" {
		wellKnown = 443
	}
	host := cmp.Or(d.Hostname, `[getfield [HTTP::host] ":" 1]`)
	port := d.Port
	switch {
	case port != 0:
	case d.Scheme != "":
		port = wellKnown
	default:
		port = l.port
	}
	loc := "tcl:" + scheme + "://" + host
	if port != wellKnown {
		loc += ":" + strconv.Itoa(int(port))
	}
	return loc + "[HTTP::uri]"
}

// modelRules reads the rules of the policies of a load balancer back into
// model rules: the policy rules rule-<i>.<j> of one i, in any of the
// policies, are the path tests of one model rule. A policy rule the
// provider does not make reads as nothing, so that Ensure rewrites it.
func modelRules(policies [][]ruleBody, partition string) []lbmodel.Rule {
	type group struct {
		first   ruleBody
		matches []lbmodel.PathMatch
		bad     bool
	}
	var order []string
	groups := map[string]*group{}
	for _, rules := range policies {
		// Every policy that holds a rule holds all its path tests: the
		// first one to hold it tells them.
		local := map[string]*group{}
		var localOrder []string
		for _, b := range rules {
			key, _, _ := strings.Cut(strings.TrimPrefix(b.Name, "rule-"), ".")
			g := local[key]
			if g == nil {
				g = &group{first: b}
				local[key] = g
				localOrder = append(localOrder, key)
			}
			m, ok := pathMatchOf(b.Conditions)
			g.bad = g.bad || !ok
			g.matches = append(g.matches, m)
		}
		for _, key := range localOrder {
			if groups[key] == nil {
				groups[key] = local[key]
				order = append(order, key)
			}
		}
	}
	out := []lbmodel.Rule{}
	for _, key := range order {
		g := groups[key]
		path, typ, ok := lbmodel.PathOf(g.matches)
		if g.bad || !ok {
			continue
		}
		r, ok := modelRule(g.first, partition)
		if !ok {
			continue
		}
		r.Path, r.PathType = path, typ
		out = append(out, r)
	}
	lbmodel.SortRules(out)
	return out
}

// pathMatchOf finds the path test among a policy rule's conditions.
func pathMatchOf(conds []conditionState) (lbmodel.PathMatch, bool) {
	for _, c := range conds {
		if c.HTTPURI && c.Path && !c.Not && len(c.Values) == 1 && c.Equals != c.StartsWith {
			return lbmodel.PathMatch{Path: c.Values[0], Prefix: c.StartsWith}, true
		}
	}
	return lbmodel.PathMatch{}, false
}

// modelRule reads everything of a model rule but its path from one of its
// policy rules; ok is false for a rule the provider does not make.
func modelRule(b ruleBody, partition string) (lbmodel.Rule, bool) {
	var r lbmodel.Rule
	var note ruleNote
	if b.Description != "" && json.Unmarshal([]byte(b.Description), &note) != nil {
		return r, false
	}
	r.Order, r.Ports, r.Redirect = note.Order, note.Ports, note.Redirect
	for _, c := range b.Conditions {
		if c.Not || len(c.Values) != 1 {
			return r, false
		}
		v := c.Values[0]
		switch {
		case c.HTTPHost && c.Host && c.Equals && !c.EndsWith:
			r.Host = v
		case c.HTTPHost && c.Host && c.EndsWith && !c.Equals && strings.HasPrefix(v, "."):
			r.Host = "*" + v
		case c.HTTPURI && c.Path:
		case c.HTTPMethod && c.Equals:
			r.Method = v
		case c.HTTPHeader && c.Equals && c.TmName != "":
			r.Headers = append(r.Headers, lbmodel.ValueMatch{Name: c.TmName, Value: v})
		case c.HTTPURI && c.QueryParameter && c.Equals && c.TmName != "":
			r.Query = append(r.Query, lbmodel.ValueMatch{Name: c.TmName, Value: v})
		default:
			return r, false
		}
	}
	filter := func(response bool) *lbmodel.HeaderFilter {
		f := &lbmodel.HeaderFilter{}
		for _, a := range b.Actions {
			if !a.HTTPHeader || a.Response != response {
				continue
			}
			switch {
			case a.Replace && a.Value != nil:
				f.Set = append(f.Set, lbmodel.Header{Name: a.TmName, Value: *a.Value})
			case a.Insert && a.Value != nil:
				f.Add = append(f.Add, lbmodel.Header{Name: a.TmName, Value: *a.Value})
			case a.Remove:
				f.Remove = append(f.Remove, a.TmName)
			}
		}
		if len(f.Set)+len(f.Add)+len(f.Remove) == 0 {
			return nil
		}
		return f
	}
	r.RequestHeaders, r.ResponseHeaders = filter(false), filter(true)
	var rewrite lbmodel.Rewrite
	for _, a := range b.Actions {
		switch {
		case a.Forward:
			r.Pool = strings.TrimPrefix(a.Pool, "/"+partition+"/")
		case a.HTTPReply && a.Redirect:
			if r.Redirect == nil {
				return r, false
			}
		case a.HTTPHost && a.Replace && a.Value != nil:
			rewrite.Hostname = *a.Value
		case a.HTTPURI && a.Replace && a.Path != "":
			rewrite.Path = &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: a.Path}
		case a.HTTPHeader:
		default:
			return r, false
		}
	}
	if rewrite != (lbmodel.Rewrite{}) {
		r.Rewrite = &rewrite
	}
	return r, true
}
