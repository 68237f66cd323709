package avisim

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // Avi shows SHA-1 fingerprints; nothing relies on them.
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"strings"
)

// The checks below are what the controller refuses in HTTP policy sets and
// pool groups beyond its schema (avischema checks the enum options, ranges
// and required fields first).

const httpProfileType = "APPLICATION_PROFILE_TYPE_HTTP"

// validateHTTPPolicySet checks the request rules: a unique name and index
// each, match tests with values, a switching action that names what it
// switches to (references are resolved before, so a pool_ref that names
// no pool has already failed), and the actions.
func validateHTTPPolicySet(obj object) *apiError {
	policy, _ := obj["http_request_policy"].(map[string]any)
	rules, _ := policy["rules"].([]any)
	names, indexes := map[string]bool{}, map[int64]bool{}
	for i, raw := range rules {
		rule, _ := raw.(map[string]any)
		name := str(rule["name"])
		idx, _ := toInt(rule["index"])
		switch {
		case names[name]:
			return errorf(http.StatusBadRequest, "http_request_policy.rules[%d]: rule name %s is used twice", i, name)
		case indexes[idx]:
			return errorf(http.StatusBadRequest, "http_request_policy.rules[%d]: index %d is used twice", i, idx)
		}
		names[name], indexes[idx] = true, true
		match, _ := rule["match"].(map[string]any)
		if host, ok := match["host_hdr"].(map[string]any); ok {
			c := str(host["match_criteria"])
			values, _ := host["value"].([]any)
			if len(values) == 0 && c != "HDR_EXISTS" && c != "HDR_DOES_NOT_EXIST" {
				return errorf(http.StatusBadRequest, "rule %s: host_hdr %s needs a value", name, c)
			}
		}
		if path, ok := match["path"].(map[string]any); ok {
			strs, _ := path["match_str"].([]any)
			groups, _ := path["string_group_refs"].([]any)
			if len(strs) == 0 && len(groups) == 0 {
				return errorf(http.StatusBadRequest, "rule %s: path %s needs match_str or string_group_refs", name, str(path["match_criteria"]))
			}
		}
		if err := validateMatch(name, match); err != nil {
			return err
		}
		if sw, ok := rule["switching_action"].(map[string]any); ok {
			switch action := str(sw["action"]); {
			case action == "HTTP_SWITCHING_SELECT_POOL" && str(sw["pool_ref"]) == "":
				return errorf(http.StatusBadRequest, "rule %s: HTTP_SWITCHING_SELECT_POOL needs a pool_ref", name)
			case action == "HTTP_SWITCHING_SELECT_POOLGROUP" && str(sw["pool_group_ref"]) == "":
				return errorf(http.StatusBadRequest, "rule %s: HTTP_SWITCHING_SELECT_POOLGROUP needs a pool_group_ref", name)
			}
		}
		if err := validateActions(name, rule); err != nil {
			return err
		}
	}
	return nil
}

// validateMatch checks that the method and header tests of a request rule
// have values.
func validateMatch(rule string, match map[string]any) *apiError {
	if m, ok := match["method"].(map[string]any); ok {
		if methods, _ := m["methods"].([]any); len(methods) == 0 {
			return errorf(http.StatusBadRequest, "rule %s: method needs at least one method", rule)
		}
	}
	hdrs, _ := match["hdrs"].([]any)
	for i, raw := range hdrs {
		h, _ := raw.(map[string]any)
		c := str(h["match_criteria"])
		values, _ := h["value"].([]any)
		switch {
		case str(h["hdr"]) == "":
			return errorf(http.StatusBadRequest, "rule %s: hdrs[%d].hdr: This field is required.", rule, i)
		case len(values) == 0 && c != "HDR_EXISTS" && c != "HDR_DOES_NOT_EXIST":
			return errorf(http.StatusBadRequest, "rule %s: hdrs[%d] %s needs a value", rule, i, c)
		}
	}
	return nil
}

// validateActions checks the header, rewrite and redirect actions of a
// request rule; a redirect stacks with no other action.
func validateActions(rule string, r map[string]any) *apiError {
	actions, _ := r["hdr_action"].([]any)
	for i, raw := range actions {
		a, _ := raw.(map[string]any)
		hdr, _ := a["hdr"].(map[string]any)
		value, _ := hdr["value"].(map[string]any)
		switch action := str(a["action"]); {
		case str(hdr["name"]) == "":
			return errorf(http.StatusBadRequest, "rule %s: hdr_action[%d].hdr.name: This field is required.", rule, i)
		case action != "HTTP_REMOVE_HDR" && value == nil:
			return errorf(http.StatusBadRequest, "rule %s: hdr_action[%d] %s needs hdr.value", rule, i, action)
		}
	}
	if w, ok := r["rewrite_url_action"].(map[string]any); ok {
		for _, f := range []string{"host_hdr", "path"} {
			if err := validateURIParam(rule, "rewrite_url_action."+f, w[f]); err != nil {
				return err
			}
		}
	}
	d, ok := r["redirect_action"].(map[string]any)
	if !ok {
		return nil
	}
	if r["switching_action"] != nil || r["hdr_action"] != nil || r["rewrite_url_action"] != nil {
		return errorf(http.StatusBadRequest, "rule %s: a redirect action cannot be combined with other actions", rule)
	}
	for _, f := range []string{"host", "path"} {
		if err := validateURIParam(rule, "redirect_action."+f, d[f]); err != nil {
			return err
		}
	}
	return nil
}

// validateURIParam checks that a URIParam has tokens, a string token its
// string.
func validateURIParam(rule, field string, v any) *apiError {
	if v == nil {
		return nil
	}
	p, _ := v.(map[string]any)
	tokens, _ := p["tokens"].([]any)
	if len(tokens) == 0 {
		return errorf(http.StatusBadRequest, "rule %s: %s needs at least one token", rule, field)
	}
	for i, raw := range tokens {
		tk, _ := raw.(map[string]any)
		if str(tk["type"]) == "URI_TOKEN_TYPE_STRING" && tk["str_value"] == nil {
			return errorf(http.StatusBadRequest, "rule %s: %s.tokens[%d] needs str_value", rule, field, i)
		}
	}
	return nil
}

// validatePoolGroup checks that each pool is a member at most once.
func validatePoolGroup(obj object) *apiError {
	members, _ := obj["members"].([]any)
	seen := map[string]bool{}
	for i, raw := range members {
		m, _ := raw.(map[string]any)
		ref := str(m["pool_ref"])
		if seen[ref] {
			return errorf(http.StatusBadRequest, "members[%d]: pool %s is a member twice", i, ref)
		}
		seen[ref] = true
	}
	return nil
}

// prepareCertificate checks an SSLKeyAndCertificate as the controller does
// (a PEM certificate and the private key that matches it) and fills in
// what the controller derives from them. An update that sends no key keeps
// the stored one, since the controller never shows it.
func prepareCertificate(obj, old object) *apiError {
	cert, _ := obj["certificate"].(map[string]any)
	certPEM := str(cert["certificate"])
	keyPEM := str(obj["key"])
	if keyPEM == "" && old != nil {
		keyPEM = str(old["key"])
		obj["key"] = keyPEM
	}
	if certPEM == "" {
		return errorf(http.StatusBadRequest, "certificate.certificate: This field is required.")
	}
	if keyPEM == "" {
		return errorf(http.StatusBadRequest, "key: a private key is required for a virtual service certificate")
	}
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return errorf(http.StatusBadRequest, "Error in parsing certificate or key: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return errorf(http.StatusBadRequest, "Error in parsing certificate: %v", err)
	}
	if str(obj["type"]) == "" {
		obj["type"] = "SSL_CERTIFICATE_TYPE_VIRTUALSERVICE"
	}
	sum := sha1.Sum(leaf.Raw) //nolint:gosec // a display fingerprint, as the controller shows.
	cert["fingerprint"] = "SHA1 Fingerprint=" + strings.ToUpper(hex.EncodeToString(sum[:]))
	cert["subject"] = map[string]any{"common_name": leaf.Subject.CommonName}
	cert["subject_alt_names"] = toAnySlice(leaf.DNSNames)
	cert["not_after"] = leaf.NotAfter.UTC().Format("2006-01-02 15:04:05")
	cert["self_signed"] = leaf.Issuer.String() == leaf.Subject.String()
	obj["key_params"] = map[string]any{"algorithm": keyAlgorithm(pair.PrivateKey)}
	obj["status"] = "SSL_CERTIFICATE_FINISHED"
	return nil
}

func keyAlgorithm(key any) string {
	switch key.(type) {
	case *rsa.PrivateKey:
		return "SSL_KEY_ALGORITHM_RSA"
	case *ecdsa.PrivateKey, ed25519.PrivateKey:
		return "SSL_KEY_ALGORITHM_EC"
	}
	return "SSL_KEY_ALGORITHM_UNKNOWN"
}

func toAnySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// hiddenFields are never shown by GET, as the controller keeps private keys
// to itself.
var hiddenFields = map[string][]string{"sslkeyandcertificate": {"key", "key_passphrase"}, "user": {"password"}}

// validateVirtualServiceL7 checks what a virtual service's HTTP features
// need: HTTP policy sets and SSL need an HTTP application profile, SSL
// ports need a certificate (at most one RSA and one EC, the controller's
// limit) and get the System-Standard SSL profile when none is given.
func (s *store) validateVirtualServiceL7(tenant string, obj object) *apiError {
	var appType string
	if e := s.byRef(str(obj["application_profile_ref"])); e != nil {
		appType = str(e.obj["type"])
	}
	policies, _ := obj["http_policies"].([]any)
	indexes := map[int64]bool{}
	for i, raw := range policies {
		p, _ := raw.(map[string]any)
		idx, ok := toInt(p["index"])
		switch {
		case str(p["http_policy_set_ref"]) == "":
			return errorf(http.StatusBadRequest, "http_policies[%d].http_policy_set_ref: This field is required.", i)
		case !ok:
			return errorf(http.StatusBadRequest, "http_policies[%d].index: This field is required.", i)
		case indexes[idx]:
			return errorf(http.StatusBadRequest, "http_policies[%d]: index %d is used twice", i, idx)
		}
		indexes[idx] = true
	}
	if len(policies) > 0 && appType != httpProfileType {
		return errorf(http.StatusBadRequest, "HTTP policy sets need an application profile of type %s", httpProfileType)
	}
	ssl := false
	services, _ := obj["services"].([]any)
	for _, raw := range services {
		svc, _ := raw.(map[string]any)
		ssl = ssl || svc["enable_ssl"] == true
	}
	certs, _ := obj["ssl_key_and_certificate_refs"].([]any)
	if !ssl {
		return nil
	}
	if appType != httpProfileType {
		return errorf(http.StatusBadRequest, "SSL on an L4 virtual service needs an SSL application profile; this simulator supports SSL with %s only", httpProfileType)
	}
	if len(certs) == 0 {
		return errorf(http.StatusBadRequest, "SSL is enabled on a service port but no SSL certificate is configured")
	}
	byAlgorithm := map[string]bool{}
	for _, raw := range certs {
		e := s.byRef(str(raw))
		if e == nil {
			continue
		}
		params, _ := e.obj["key_params"].(map[string]any)
		alg := str(params["algorithm"])
		if byAlgorithm[alg] {
			return errorf(http.StatusBadRequest, "A virtual service can have at most one RSA and one EC certificate")
		}
		byAlgorithm[alg] = true
	}
	if str(obj["ssl_profile_ref"]) == "" {
		if p := s.lookupName(tenant, "sslprofile", "System-Standard"); p != nil {
			obj["ssl_profile_ref"] = "/api/sslprofile/" + p.uuid()
		}
	}
	return nil
}

// byRef returns the object a stored reference (/api/<type>/<uuid>) names.
func (s *store) byRef(ref string) *entry {
	if ref == "" {
		return nil
	}
	return s.byUUID[ref[strings.LastIndexByte(ref, '/')+1:]]
}
