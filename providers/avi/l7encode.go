package avi

import (
	"strings"

	"github.com/vmware/alb-sdk/go/models"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Building the controller's objects of an L7 load balancer from its specs.

// uriConstant is a URI parameter of one constant string, nil for "".
func uriConstant(v string) *models.URIParam {
	if v == "" {
		return nil
	}
	return &models.URIParam{Type: ptr("URI_PARAM_TYPE_TOKENIZED"),
		Tokens: []*models.URIParamToken{{Type: ptr("URI_TOKEN_TYPE_STRING"), StrValue: ptr(v)}}}
}

func (p *Provider) certModel(s certSpec, c lbmodel.TLSCert) *models.SSLKeyAndCertificate {
	return &models.SSLKeyAndCertificate{
		Name:        ptr(s.Name),
		Type:        ptr("SSL_CERTIFICATE_TYPE_VIRTUALSERVICE"),
		Certificate: &models.SSLCertificate{Certificate: ptr(string(c.CertPEM))},
		Key:         ptr(string(c.KeyPEM)),
		CreatedBy:   ptr(p.owner),
		Markers:     markerLabels(s.Markers),
	}
}

func (p *Provider) httpPolicyModel(s httpPolicySpec, poolURLs, groupURLs map[string]*string) *models.HTTPPolicySet {
	o := &models.HTTPPolicySet{
		Name:              ptr(s.Name),
		CreatedBy:         ptr(p.owner),
		Markers:           markerLabels(s.Markers),
		CloudConfigCksum:  ptr(checksum(s)),
		HTTPRequestPolicy: &models.HTTPRequestPolicy{},
	}
	for i, r := range s.Rules {
		o.HTTPRequestPolicy.Rules = append(o.HTTPRequestPolicy.Rules, requestRule(i, r, poolURLs, groupURLs))
	}
	return o
}

// requestRule is the request rule of index i+1 that r describes.
func requestRule(i int, r httpRuleSpec, poolURLs, groupURLs map[string]*string) *models.HTTPRequestRule {
	match := &models.MatchTarget{Path: &models.PathMatch{
		MatchCriteria: ptr("EQUALS"), MatchCase: ptr("SENSITIVE"), MatchStr: []string{r.Path},
	}}
	if r.Prefix {
		match.Path.MatchCriteria = ptr("BEGINS_WITH")
	}
	switch {
	case strings.HasPrefix(r.Host, "*."):
		match.HostHdr = &models.HostHdrMatch{MatchCriteria: ptr("HDR_ENDS_WITH"), MatchCase: ptr("INSENSITIVE"),
			Value: []string{r.Host[1:]}}
	case r.Host != "":
		match.HostHdr = &models.HostHdrMatch{MatchCriteria: ptr("HDR_EQUALS"), MatchCase: ptr("INSENSITIVE"),
			Value: []string{r.Host}}
	}
	if len(r.Ports) > 0 {
		match.VsPort = &models.PortMatch{MatchCriteria: ptr("IS_IN")}
		for _, p := range r.Ports {
			match.VsPort.Ports = append(match.VsPort.Ports, int64(p))
		}
	}
	if r.Method != "" {
		match.Method = &models.MethodMatch{MatchCriteria: ptr("IS_IN"), Methods: []string{r.Method}}
	}
	for _, h := range r.Headers {
		match.Hdrs = append(match.Hdrs, &models.HdrMatch{Hdr: ptr(h.Name), MatchCriteria: ptr("HDR_EQUALS"),
			MatchCase: ptr("SENSITIVE"), Value: []string{h.Value}})
	}
	out := &models.HTTPRequestRule{
		Name:   ptr(r.Name),
		Index:  ptr(int32(i + 1)),
		Enable: ptr(true),
		Match:  match,
	}
	switch {
	case r.PoolGroup != "":
		out.SwitchingAction = &models.HttpswitchingAction{
			Action: ptr("HTTP_SWITCHING_SELECT_POOLGROUP"), PoolGroupRef: objectRef(groupURLs[r.PoolGroup])}
	case r.Local != "":
		out.SwitchingAction = &models.HttpswitchingAction{Action: ptr("HTTP_SWITCHING_SELECT_LOCAL"), StatusCode: ptr(r.Local)}
	case r.Redirect != nil:
		d := r.Redirect
		out.RedirectAction = &models.HTTPRedirectAction{Protocol: ptr(d.Protocol), Port: ptr(d.Port),
			Host: uriConstant(d.Host), Path: uriConstant(d.Path), StatusCode: ptr(d.Status), KeepQuery: ptr(true)}
	default:
		out.SwitchingAction = &models.HttpswitchingAction{
			Action: ptr("HTTP_SWITCHING_SELECT_POOL"), PoolRef: objectRef(poolURLs[r.Pool])}
	}
	for _, a := range r.HdrActions {
		ha := &models.HTTPHdrAction{Action: ptr(a.Action), Hdr: &models.HTTPHdrData{Name: ptr(a.Name)}}
		if a.Action != hdrRemove {
			ha.Hdr.Value = &models.HTTPHdrValue{Val: ptr(a.Value)}
		}
		out.HdrAction = append(out.HdrAction, ha)
	}
	if w := r.Rewrite; w != nil {
		out.RewriteURLAction = &models.HTTPRewriteURLAction{HostHdr: uriConstant(w.Host), Path: uriConstant(w.Path),
			Query: &models.URIParamQuery{KeepQuery: ptr(true)}}
	}
	return out
}
