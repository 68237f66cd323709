package bigip

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
)

// served returns an error wrapping lbmodel.ErrUnsupported that names the
// first part of lb, with its rule or listener and field, that BIG-IP's
// objects cannot express exactly (docs/bigip.md lists them); nil when the
// provider serves all of it. Nothing of such a model is written.
func served(lb *lbmodel.LoadBalancer) error {
	for _, l := range lb.Listeners {
		if l.Protocol == lbmodel.TLS {
			return fmt.Errorf("listener TLS/%d: a TLS listener (SNI routing, TLSRoute) is %w", l.Port, lbmodel.ErrUnsupported)
		}
	}
	// Client SSL profiles that verify client certificates are not
	// written: the listener is refused, never served without the check.
	if err := lbmodel.ClientValidationUnsupported(lb); err != nil {
		return err
	}
	for _, pl := range lb.Pools {
		if pl.AppProtocol != "" {
			return fmt.Errorf("pool %s: appProtocol %s is %w", pl.Name, pl.AppProtocol, lbmodel.ErrUnsupported)
		}
	}
	if !lb.IsL7() {
		return nil
	}
	if lb.Gateway == "" {
		// An Ingress's load balancer keeps its layout: what an Ingress
		// model holds, and no more.
		if err := lbmodel.IngressSubset(lb); err != nil {
			return err
		}
	}
	if err := sniDefaults(lb, nil); err != nil {
		return err
	}
	for _, r := range lb.HTTP.Rules {
		if field := unservedField(r); field != "" {
			return lbmodel.UnsupportedRule(r, field)
		}
	}
	// A pool's ratios split requests between its members only.
	return lbmodel.InvalidShareUnsupported(lb)
}

// unservedField names the field of a Gateway's rule that an LTM policy
// cannot express exactly, "" when it can express all of them.
func unservedField(r lbmodel.Rule) string {
	switch {
	case r.PathType == lbmodel.PathRegex:
		return "pathType RegularExpression (LTM policy conditions have no anchored regular expression)"
	case slices.ContainsFunc(r.Headers, func(m lbmodel.ValueMatch) bool { return m.Regex }):
		return "a regular-expression header match"
	case slices.ContainsFunc(r.Query, func(m lbmodel.ValueMatch) bool { return m.Regex }):
		return "a regular-expression query match"
	case r.FixedStatus != 0:
		return fmt.Sprintf("fixedStatus %d (an LTM policy answers no status of its own)", r.FixedStatus)
	case r.Backends != nil:
		return "backends (an LTM policy forwards a rule's requests to one pool)"
	case r.CORS != nil:
		return "cors (an LTM policy answers no preflight request)"
	case r.Redirect != nil && r.Redirect.StatusCode != 302:
		return fmt.Sprintf("redirect statusCode %d (an LTM policy redirect answers 302)", r.Redirect.StatusCode)
	case r.Redirect != nil && r.Redirect.Path != nil:
		return "redirect path " + r.Redirect.Path.Type
	case r.Rewrite != nil && r.Rewrite.Path != nil && r.Rewrite.Path.Type != lbmodel.ReplaceFullPath:
		return "rewrite path " + r.Rewrite.Path.Type
	}
	for _, f := range []struct {
		what   string
		filter *lbmodel.HeaderFilter
	}{{"requestHeaders", r.RequestHeaders}, {"responseHeaders", r.ResponseHeaders}} {
		if f.filter == nil {
			continue
		}
		for _, h := range slices.Concat(f.filter.Set, f.filter.Add) {
			// BIG-IP evaluates an action value that starts with tcl: as
			// Tcl: a header value must never run as code on it.
			if strings.HasPrefix(strings.ToLower(h.Value), "tcl:") {
				return fmt.Sprintf("%s %s: a value that starts with tcl: (BIG-IP would run it as Tcl)", f.what, h.Name)
			}
		}
	}
	return ""
}

// sniDefaults returns, for the HTTPS virtuals of lb (their ports in
// order), the certificates each serves, and calls each, when not nil, with
// every certificate and whether its client-ssl profile is the SNI default:
// the first certificate of a virtual that has several is. BIG-IP's
// sniDefault is the profile's, not the virtual's: a certificate that would
// be the default on one virtual and not on another is refused.
func sniDefaults(lb *lbmodel.LoadBalancer, each func(c lbmodel.TLSCert, sniDefault bool)) error {
	isDefault := map[string]bool{}
	perPort := map[int32][]string{}
	for _, l := range lb.Listeners {
		if l.Protocol != lbmodel.HTTPS {
			continue
		}
		for _, c := range lb.HTTP.TLS {
			if len(c.Ports) == 0 || slices.Contains(c.Ports, l.Port) {
				perPort[l.Port] = append(perPort[l.Port], c.Secret)
			}
		}
	}
	// With one certificate on every virtual, the first is the default
	// (the layout of an Ingress's load balancer).
	if len(lb.HTTP.TLS) > 0 {
		isDefault[lb.HTTP.TLS[0].Secret] = true
	}
	for _, secrets := range perPort {
		if len(secrets) > 1 {
			isDefault[secrets[0]] = true
		}
	}
	for port, secrets := range perPort {
		if len(secrets) < 2 {
			continue
		}
		for _, s := range secrets[1:] {
			if isDefault[s] {
				return fmt.Errorf("TLS Secret %s: the SNI default certificate of one HTTPS listener and not of port %d's is %w",
					s, port, lbmodel.ErrUnsupported)
			}
		}
	}
	if each != nil {
		for _, c := range lb.HTTP.TLS {
			each(c, isDefault[c.Secret])
		}
	}
	return nil
}
