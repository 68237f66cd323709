package avi

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/vmware/alb-sdk/go/models"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Reading an L7 load balancer's objects back as specs, to compare with the
// plan: what the provider never makes reads as Foreign, so it is rewritten.

// certSpecOf reads a certificate back: the controller shows the certificate,
// never the key, which the certificate binds.
func certSpecOf(o *models.SSLKeyAndCertificate) certSpec {
	s := certSpec{Name: deref(o.Name), Markers: markersOf(o.Markers)}
	if o.Certificate != nil {
		s.Fingerprint = lbmodel.CertFingerprint([]byte(deref(o.Certificate.Certificate)))
	}
	return s
}

// httpRulesOf reads the request rules of a policy set in index order. A
// match or action the provider does not make reads as a rule no model
// gives (Foreign), so that it is rewritten.
func httpRulesOf(o *models.HTTPPolicySet) []httpRuleSpec {
	if o.HTTPRequestPolicy == nil {
		return []httpRuleSpec{}
	}
	rules := slices.Clone(o.HTTPRequestPolicy.Rules)
	rules = slices.DeleteFunc(rules, func(r *models.HTTPRequestRule) bool { return r == nil })
	slices.SortStableFunc(rules, func(a, b *models.HTTPRequestRule) int {
		return cmp.Compare(derefInt(a.Index), derefInt(b.Index))
	})
	out := make([]httpRuleSpec, 0, len(rules))
	for _, r := range rules {
		rs := httpRuleSpec{Name: deref(r.Name)}
		var foreign []string
		if r.Enable != nil && !*r.Enable {
			rs.Name += " (disabled)"
			foreign = append(foreign, "disabled")
		}
		if m := r.Match; m != nil {
			readMatch(&rs, m, &foreign)
		}
		if sw := r.SwitchingAction; sw != nil {
			switch deref(sw.Action) {
			case "HTTP_SWITCHING_SELECT_POOL":
				rs.Pool = refName(sw.PoolRef)
			case "HTTP_SWITCHING_SELECT_POOLGROUP":
				rs.PoolGroup = refName(sw.PoolGroupRef)
			case "HTTP_SWITCHING_SELECT_LOCAL":
				rs.Local = deref(sw.StatusCode)
				if sw.File != nil {
					foreign = append(foreign, "file")
				}
			default:
				foreign = append(foreign, "switching "+deref(sw.Action))
			}
		}
		for _, a := range r.HdrAction {
			if a == nil || a.Hdr == nil || a.Cookie != nil || (a.Hdr.Value != nil && a.Hdr.Value.Var != nil) {
				foreign = append(foreign, "hdr_action")
				continue
			}
			ha := hdrActionSpec{Action: deref(a.Action), Name: deref(a.Hdr.Name)}
			if a.Hdr.Value != nil {
				ha.Value = deref(a.Hdr.Value.Val)
			}
			rs.HdrActions = append(rs.HdrActions, ha)
		}
		if w := r.RewriteURLAction; w != nil {
			rs.Rewrite = &rewriteSpec{Host: constantParam(w.HostHdr, &foreign), Path: constantParam(w.Path, &foreign)}
			if w.Query == nil || w.Query.KeepQuery == nil || !*w.Query.KeepQuery || w.Query.AddString != nil {
				foreign = append(foreign, "rewrite query")
			}
		}
		if d := r.RedirectAction; d != nil {
			rs.Redirect = &redirectSpec{Protocol: deref(d.Protocol), Host: constantParam(d.Host, &foreign),
				Path: constantParam(d.Path, &foreign), Status: deref(d.StatusCode)}
			if d.Port != nil {
				rs.Redirect.Port = *d.Port
			}
			if d.KeepQuery == nil || !*d.KeepQuery {
				foreign = append(foreign, "redirect drops the query")
			}
		}
		rs.Foreign = strings.Join(foreign, ", ")
		out = append(out, rs)
	}
	return out
}

// readMatch reads the host, path, port, method and header tests of a rule.
func readMatch(rs *httpRuleSpec, m *models.MatchTarget, foreign *[]string) {
	if h := m.HostHdr; h != nil {
		switch v := h.Value; {
		case deref(h.MatchCriteria) == "HDR_EQUALS" && len(v) == 1:
			rs.Host = v[0]
		case deref(h.MatchCriteria) == "HDR_ENDS_WITH" && len(v) == 1 && strings.HasPrefix(v[0], "."):
			rs.Host = "*" + v[0]
		default:
			rs.Host = fmt.Sprintf("%s %v", deref(h.MatchCriteria), v)
		}
	}
	if pm := m.Path; pm != nil {
		switch c := deref(pm.MatchCriteria); {
		case len(pm.MatchStr) != 1 || len(pm.StringGroupRefs) > 0 || (c != "EQUALS" && c != "BEGINS_WITH"):
			rs.Path = fmt.Sprintf("%s %v", c, pm.MatchStr)
		default:
			rs.Path, rs.Prefix = pm.MatchStr[0], c == "BEGINS_WITH"
		}
	}
	if vp := m.VsPort; vp != nil {
		if deref(vp.MatchCriteria) != "IS_IN" {
			*foreign = append(*foreign, "vs_port "+deref(vp.MatchCriteria))
		}
		for _, p := range vp.Ports {
			rs.Ports = append(rs.Ports, int32(p))
		}
	}
	if mm := m.Method; mm != nil {
		if deref(mm.MatchCriteria) != "IS_IN" || len(mm.Methods) != 1 {
			*foreign = append(*foreign, fmt.Sprintf("method %s %v", deref(mm.MatchCriteria), mm.Methods))
		} else {
			rs.Method = mm.Methods[0]
		}
	}
	for _, h := range m.Hdrs {
		if h == nil || deref(h.MatchCriteria) != "HDR_EQUALS" || deref(h.MatchCase) != "SENSITIVE" || len(h.Value) != 1 {
			*foreign = append(*foreign, "a header test")
			continue
		}
		rs.Headers = append(rs.Headers, lbmodel.ValueMatch{Name: deref(h.Hdr), Value: h.Value[0]})
	}
	if m.Query != nil || m.Cookie != nil || m.ClientIP != nil || m.Protocol != nil || m.Version != nil || m.IPReputationType != nil {
		*foreign = append(*foreign, "a test of query, cookie, client, protocol or version")
	}
}

// constantParam reads a URI parameter made of one constant string; any
// other reads as foreign.
func constantParam(p *models.URIParam, foreign *[]string) string {
	if p == nil {
		return ""
	}
	if deref(p.Type) != "URI_PARAM_TYPE_TOKENIZED" || len(p.Tokens) != 1 || p.Tokens[0] == nil ||
		deref(p.Tokens[0].Type) != "URI_TOKEN_TYPE_STRING" {
		*foreign = append(*foreign, "a URI parameter")
		return ""
	}
	return deref(p.Tokens[0].StrValue)
}

func httpPolicySpecOf(o *models.HTTPPolicySet) httpPolicySpec {
	return httpPolicySpec{Name: deref(o.Name), Rules: httpRulesOf(o), Markers: markersOf(o.Markers)}
}

func derefInt(i *int32) int32 {
	if i == nil {
		return 0
	}
	return *i
}
