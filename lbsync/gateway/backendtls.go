package gateway

import (
	"cmp"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// BackendTLSPolicy (gateway.networking.k8s.io/v1): TLS from the load
// balancer to a Service's Pods, verified. A policy targets Services of its
// own namespace, or one port of one (sectionName: the port's name). The
// policy of a backend Service port is the oldest that names the port, else
// the oldest that names the Service alone (GEP-713: creation time, then
// namespace/name); the others that name the same are Conflicted. It is the
// BackendTLS of the pools of the HTTPRoute rules that send to the port,
// whose valid backends must agree (checkBackendTLS: else the route is not
// accepted). A backend whose policy is not accepted (no valid CA
// certificate, wellKnownCACertificates other than System, names the
// provider cannot verify) is an invalid backendRef: its share of the
// requests is answered 500, as the spec asks, never sent in clear. The
// backends of GRPCRoutes, and of TLSRoutes on Terminate listeners, get no
// TLS to their Pods (the edge does not speak it there): one with a policy
// is left out of the pool, with a warning.

// Kinds of BackendTLSPolicy and what it refers to.
const (
	KindBackendTLSPolicy = "BackendTLSPolicy"
	KindConfigMap        = "ConfigMap"
)

// CACertKey is the key of a ConfigMap that holds the PEM CA certificates a
// BackendTLSPolicy names.
const CACertKey = "ca.crt"

// maxPolicyAncestors is the most entries a policy's status.ancestors
// holds (the CRD's maxItems).
const maxPolicyAncestors = 16

// tlsPolicy is one BackendTLSPolicy resolved: the backend TLS it asks for,
// or why it is not accepted, and its ResolvedRefs condition.
type tlsPolicy struct {
	p *gatewayv1.BackendTLSPolicy
	// tls is nil when the policy is not accepted.
	tls *lbmodel.BackendTLS
	// refused is the reason of Accepted False, with why.
	refused  gatewayv1.PolicyConditionReason
	why      string
	resolved metav1.Condition
}

// id is "BackendTLSPolicy namespace/name".
func (tp *tlsPolicy) id() string {
	return KindBackendTLSPolicy + " " + tp.p.Namespace + "/" + tp.p.Name
}

// PolicyResult is the status of one BackendTLSPolicy for the Gateway
// built: the conditions of the Gateway's entry in its status.ancestors.
type PolicyResult struct {
	Namespace  string
	Name       string
	Conditions []metav1.Condition
}

// indexBackendTLS sorts the policies by precedence and indexes the
// ConfigMaps.
func (b *build) indexBackendTLS() {
	b.tlsPolicies = byPrecedence(b.in.BackendTLSPolicies)
	b.tlsResolved = map[*gatewayv1.BackendTLSPolicy]*tlsPolicy{}
	b.configMaps = map[string]*corev1.ConfigMap{}
	for _, c := range b.in.ConfigMaps {
		if c != nil {
			b.configMaps[c.Namespace+"/"+c.Name] = c
		}
	}
	b.terminated = map[string]bool{}
}

// byPrecedence returns the policies but nil ones, oldest first, then by
// namespace and name (GEP-713's precedence).
func byPrecedence[P interface {
	comparable
	metav1.Object
}](policies []P) []P {
	var zero P
	out := slices.DeleteFunc(slices.Clone(policies), func(p P) bool { return p == zero })
	slices.SortStableFunc(out, func(x, y P) int {
		tx, ty := x.GetCreationTimestamp(), y.GetCreationTimestamp()
		return cmp.Or(tx.Compare(ty.Time), cmp.Compare(x.GetNamespace(), y.GetNamespace()), cmp.Compare(x.GetName(), y.GetName()))
	})
	return out
}

// isService reports whether a policy's targetRef names the Service name.
func isService(t gatewayv1.LocalPolicyTargetReference, name string) bool {
	return (t.Group == "" || t.Group == "core") && t.Kind == KindService && string(t.Name) == name
}

// serviceTarget returns the section a policy's targetRef names of the
// Service name ("" for the whole Service); ok is false when it names
// another object.
func serviceTarget(t gatewayv1.LocalPolicyTargetReferenceWithSectionName, name string) (section string, ok bool) {
	if !isService(t.LocalPolicyTargetReference, name) {
		return "", false
	}
	if t.SectionName != nil {
		section = string(*t.SectionName)
	}
	return section, true
}

// BackendTLSTargets returns the Services a BackendTLSPolicy targets,
// without duplicates, sorted.
func BackendTLSTargets(p *gatewayv1.BackendTLSPolicy) []ServiceRef {
	var out []ServiceRef
	for _, t := range p.Spec.TargetRefs {
		if _, ok := serviceTarget(t, string(t.Name)); ok {
			out = append(out, ServiceRef{Namespace: p.Namespace, Name: string(t.Name)})
		}
	}
	slices.SortFunc(out, compareRefs)
	return slices.Compact(out)
}

// BackendTLSConfigMaps returns the ConfigMaps ("namespace/name") a
// BackendTLSPolicy names as CA certificates, without duplicates, sorted.
func BackendTLSConfigMaps(p *gatewayv1.BackendTLSPolicy) []string {
	var out []string
	for _, r := range p.Spec.Validation.CACertificateRefs {
		if isConfigMap(r) {
			out = append(out, p.Namespace+"/"+string(r.Name))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func isConfigMap(r gatewayv1.LocalObjectReference) bool {
	return (r.Group == "" || r.Group == "core") && r.Kind == KindConfigMap
}

// backendTLSPolicy returns the policy of a backend Service port, nil when
// none targets it.
func (b *build) backendTLSPolicy(svc *corev1.Service, port corev1.ServicePort) *tlsPolicy {
	var section, whole *gatewayv1.BackendTLSPolicy
	for _, p := range b.tlsPolicies {
		if p.Namespace != svc.Namespace {
			continue
		}
		for _, t := range p.Spec.TargetRefs {
			s, ok := serviceTarget(t, svc.Name)
			switch {
			case !ok:
			case s == "" && whole == nil:
				whole = p
			case s != "" && s == port.Name && section == nil:
				section = p
			}
		}
	}
	if p := cmp.Or(section, whole); p != nil {
		return b.resolveTLS(p)
	}
	return nil
}

// resolveTLS resolves a policy once per build: its CA certificates from
// the ConfigMaps it names (or the system's), its hostname and subject
// alternative names, and whether the provider can verify them
// (Input.PolicyCapabilities).
func (b *build) resolveTLS(p *gatewayv1.BackendTLSPolicy) *tlsPolicy {
	if tp := b.tlsResolved[p]; tp != nil {
		return tp
	}
	tp := &tlsPolicy{p: p}
	b.tlsResolved[p] = tp
	v := p.Spec.Validation
	gen := p.Generation
	var pems, bad []string
	var badReason gatewayv1.PolicyConditionReason
	for i, r := range v.CACertificateRefs {
		var problem string
		reason := gatewayv1.BackendTLSPolicyReasonInvalidCACertificateRef
		if isConfigMap(r) {
			var data string
			data, problem = b.caCertificates(p.Namespace, string(r.Name))
			if problem == "" {
				pems = append(pems, data)
				continue
			}
		} else {
			reason = gatewayv1.BackendTLSPolicyReasonInvalidKind
			problem = fmt.Sprintf("kind %s/%s of %s is not a ConfigMap", r.Group, r.Kind, r.Name)
		}
		bad = append(bad, fmt.Sprintf("caCertificateRefs[%d]: %s", i, problem))
		badReason = cmp.Or(badReason, reason)
	}
	tp.resolved = b.cond(string(gatewayv1.BackendTLSPolicyConditionResolvedRefs), true,
		string(gatewayv1.BackendTLSPolicyReasonResolvedRefs), "References resolved", gen)
	if len(bad) > 0 {
		tp.resolved = b.cond(tp.resolved.Type, false, string(badReason), strings.Join(bad, "; "), gen)
	}

	t := &lbmodel.BackendTLS{Hostname: strings.ToLower(string(v.Hostname)), CACertPEM: strings.Join(pems, "")}
	for _, n := range v.SubjectAltNames {
		switch n.Type {
		case gatewayv1.HostnameSubjectAltNameType:
			t.SubjectAltNames = append(t.SubjectAltNames, lbmodel.SubjectAltName{Type: lbmodel.SANHostname, Value: strings.ToLower(string(n.Hostname))})
		case gatewayv1.URISubjectAltNameType:
			t.SubjectAltNames = append(t.SubjectAltNames, lbmodel.SubjectAltName{Type: lbmodel.SANURI, Value: string(n.URI)})
		}
	}
	wellKnown := ""
	if v.WellKnownCACertificates != nil {
		wellKnown = string(*v.WellKnownCACertificates)
	}
	switch {
	case wellKnown != "" && len(v.CACertificateRefs) > 0:
		tp.refused, tp.why = gatewayv1.PolicyReasonInvalid, "caCertificateRefs and wellKnownCACertificates are both set"
	case wellKnown != "" && wellKnown != string(gatewayv1.WellKnownCACertificatesSystem):
		tp.refused, tp.why = gatewayv1.PolicyReasonInvalid, fmt.Sprintf("wellKnownCACertificates %q is not supported: only System", wellKnown)
	case wellKnown != "":
		t.SystemCAs = true
	case len(v.CACertificateRefs) == 0:
		tp.refused, tp.why = gatewayv1.PolicyReasonInvalid, "neither caCertificateRefs nor wellKnownCACertificates is set"
	case len(pems) == 0:
		tp.refused, tp.why = gatewayv1.BackendTLSPolicyReasonNoValidCACertificate, "no valid CA certificate: "+tp.resolved.Message
	}
	if c := b.in.PolicyCapabilities; tp.refused == "" && c != nil {
		lb := &lbmodel.LoadBalancer{Pools: []lbmodel.Pool{{Policy: &lbmodel.Policy{BackendTLS: t}}}}
		if _, gaps := c.StripPolicies(lb); len(gaps) > 0 {
			fields := make([]string, len(gaps))
			for i, g := range gaps {
				fields[i] = g.Field
			}
			tp.refused = gatewayv1.PolicyReasonInvalid
			tp.why = fmt.Sprintf("the %s provider cannot verify it: %s not supported", c.Provider, strings.Join(fields, ", "))
		}
	}
	if tp.refused == "" {
		tp.tls = t
	}
	return tp
}

// caCertificates returns the valid PEM certificates of key ca.crt of the
// ConfigMap namespace/name, or what is wrong with it.
func (b *build) caCertificates(namespace, name string) (string, string) {
	id := namespace + "/" + name
	if slices.Contains(b.in.ForbiddenConfigMaps, id) {
		return "", fmt.Sprintf("npl-lbsync may not read ConfigMap %s", id)
	}
	c := b.configMaps[id]
	if c == nil {
		return "", fmt.Sprintf("ConfigMap %s not found", id)
	}
	data, ok := c.Data[CACertKey]
	if !ok {
		return "", fmt.Sprintf("ConfigMap %s has no key %s", id, CACertKey)
	}
	certs := validCertificates(data)
	if certs == "" {
		return "", fmt.Sprintf("ConfigMap %s: %s holds no valid PEM certificate", id, CACertKey)
	}
	return certs, ""
}

// validCertificates returns the PEM blocks of data that are X.509
// certificates, re-encoded: the load balancer loads the file whole, and a
// block it cannot parse would fail its whole configuration.
func validCertificates(data string) string {
	var out strings.Builder
	for rest := []byte(data); ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return out.String()
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err == nil {
			out.Write(pem.EncodeToMemory(&pem.Block{Type: blk.Type, Bytes: blk.Bytes}))
		}
	}
}

// backendTLS returns the TLS a backend of a route is served with (nil:
// none), or why the backend cannot be served ("").
func (b *build) backendTLS(rt *routeView, be backend) (*lbmodel.BackendTLS, string) {
	tp := b.backendTLSPolicy(be.svc, be.port)
	if tp == nil {
		return nil, ""
	}
	switch {
	case rt.kind == KindGRPCRoute:
		return nil, fmt.Sprintf("%s asks for TLS to its Pods, which npl-lbsync does not serve for GRPCRoutes", tp.id())
	case rt.kind == KindTLSRoute && b.terminated[rt.id()]:
		return nil, fmt.Sprintf("%s asks for TLS to its Pods, which npl-lbsync does not serve for TLSRoutes on Terminate listeners", tp.id())
	case rt.kind != KindHTTPRoute:
		return nil, "" // TCP, UDP, TLS passthrough: the load balancer starts no TLS
	case tp.tls == nil:
		return nil, fmt.Sprintf("%s is not accepted: %s", tp.id(), tp.why)
	}
	return tp.tls, ""
}

// checkBackendTLS says why rule i of an HTTPRoute cannot be served: its
// valid backends ask for different TLS to their Pods (one pool speaks one
// way to all its members).
func (b *build) checkBackendTLS(rt *routeView, i int) error {
	if rt.kind != KindHTTPRoute {
		return nil
	}
	var first *lbmodel.BackendTLS
	firstID := ""
	for _, be := range b.servedBackends(rt, i) {
		tls, refused := b.backendTLS(rt, be)
		if refused != "" {
			continue // answered 500
		}
		id := be.String()
		if firstID == "" {
			first, firstID = tls, id
			continue
		}
		if !reflect.DeepEqual(first, tls) {
			return fmt.Errorf("backends %s and %s differ in TLS to their Pods (BackendTLSPolicy): the backends of a rule must agree", firstID, id)
		}
	}
	return nil
}

// withBackendTLS returns policy with the rule's backend TLS set.
func withBackendTLS(policy *lbmodel.Policy, tls *lbmodel.BackendTLS) *lbmodel.Policy {
	if tls == nil {
		return policy
	}
	if policy == nil {
		policy = &lbmodel.Policy{}
	}
	policy.BackendTLS = tls
	return policy
}

// backendTLSResults returns the status of each policy that targets a
// Service among backends (those the Gateway's routes send to): Accepted
// True when it is the policy of a port it targets and is valid; False
// Conflicted when an older policy targets each one, TargetNotFound when
// its sectionName names no port of the Service, or the reason it is
// invalid; and its ResolvedRefs.
func (b *build) backendTLSResults(backends []ServiceRef) []PolicyResult {
	var out []PolicyResult
	for i, p := range b.tlsPolicies {
		var won, conflicted, missing []string
		for _, t := range p.Spec.TargetRefs {
			section, ok := serviceTarget(t, string(t.Name))
			ref := ServiceRef{Namespace: p.Namespace, Name: string(t.Name)}
			if !ok || !slices.Contains(backends, ref) {
				continue
			}
			target := "Service " + ref.String()
			if section != "" {
				target += " port " + section
			}
			svc := b.services[ref.String()]
			switch {
			case section != "" && !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == section }):
				missing = append(missing, target)
			case slices.ContainsFunc(b.tlsPolicies[:i], func(o *gatewayv1.BackendTLSPolicy) bool { return targets(o, ref, section) }):
				conflicted = append(conflicted, target)
			default:
				won = append(won, target)
			}
		}
		if len(won)+len(conflicted)+len(missing) == 0 {
			continue
		}
		tp := b.resolveTLS(p)
		typ, gen := string(gatewayv1.PolicyConditionAccepted), p.Generation
		var accepted metav1.Condition
		switch {
		case len(won) > 0 && tp.refused != "":
			accepted = b.cond(typ, false, string(tp.refused), tp.why, gen)
		case len(won) > 0:
			accepted = b.cond(typ, true, string(gatewayv1.PolicyReasonAccepted), "Accepted for "+strings.Join(won, ", "), gen)
		case len(conflicted) > 0:
			accepted = b.cond(typ, false, string(gatewayv1.PolicyReasonConflicted),
				"an older BackendTLSPolicy targets "+strings.Join(conflicted, ", "), gen)
		default:
			accepted = b.cond(typ, false, string(gatewayv1.PolicyReasonTargetNotFound), "no such port: "+strings.Join(missing, ", "), gen)
		}
		out = append(out, PolicyResult{Namespace: p.Namespace, Name: p.Name, Conditions: []metav1.Condition{accepted, tp.resolved}})
	}
	slices.SortFunc(out, comparePolicyResults)
	return out
}

// comparePolicyResults orders results by namespace and name.
func comparePolicyResults(x, y PolicyResult) int {
	return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
}

// targets reports whether a policy targets the section of a Service ("":
// the Service alone).
func targets(p *gatewayv1.BackendTLSPolicy, ref ServiceRef, section string) bool {
	if p.Namespace != ref.Namespace {
		return false
	}
	return slices.ContainsFunc(p.Spec.TargetRefs, func(t gatewayv1.LocalPolicyTargetReferenceWithSectionName) bool {
		s, ok := serviceTarget(t, ref.Name)
		return ok && s == section
	})
}

// PolicyAncestors returns a policy's status.ancestors with npl-lbsync's
// entry for the Gateway namespace/name set to conditions, or removed when
// there are none; the entries of other controllers and Gateways stay as
// they are. Conditions keep their lastTransitionTime when unchanged. A new
// entry is left out when the list is full (maxPolicyAncestors).
func PolicyAncestors(current []gatewayv1.PolicyAncestorStatus, namespace, name string, conditions []metav1.Condition, now metav1.Time) []gatewayv1.PolicyAncestorStatus {
	out := make([]gatewayv1.PolicyAncestorStatus, 0, len(current)+1)
	found := false
	for _, a := range current {
		if a.ControllerName != ControllerName || !refNames(a.AncestorRef, "", namespace, name) {
			out = append(out, a)
			continue
		}
		if found || len(conditions) == 0 {
			continue
		}
		found = true
		a = *a.DeepCopy()
		a.Conditions = MergeConditions(a.Conditions, conditions, now, true)
		out = append(out, a)
	}
	if !found && len(conditions) > 0 && len(out) < maxPolicyAncestors {
		ns := gatewayv1.Namespace(namespace)
		out = append(out, gatewayv1.PolicyAncestorStatus{
			AncestorRef:    parentRefWithDefaults(gatewayv1.ParentReference{Namespace: &ns, Name: gatewayv1.ObjectName(name)}),
			ControllerName: ControllerName,
			Conditions:     MergeConditions(nil, conditions, now, true),
		})
	}
	return out
}

// AncestorGateways returns the Gateways ("namespace/name") of
// npl-lbsync's entries in the status.ancestors of a policy of namespace
// (a BackendTLSPolicy, an XBackendTrafficPolicy).
func AncestorGateways(namespace string, ancestors []gatewayv1.PolicyAncestorStatus) []string {
	var out []string
	for _, a := range ancestors {
		if a.ControllerName != ControllerName {
			continue
		}
		if ns, name, ok := gatewayOf(namespace, a.AncestorRef); ok && !slices.Contains(out, ns+"/"+name) {
			out = append(out, ns+"/"+name)
		}
	}
	return out
}
