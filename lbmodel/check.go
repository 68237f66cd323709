package lbmodel

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrUnsupported is the error of a model that uses a part of the L7 model
// a provider cannot express (yet).
var ErrUnsupported = errors.New("not supported by this provider")

// UnsupportedRule is the error of a provider that cannot express field of
// rule r: it names the rule by host, path and path type, and wraps
// ErrUnsupported.
func UnsupportedRule(r Rule, field string) error {
	return fmt.Errorf("rule %s%s (%s): %s is %w", r.Host, r.Path, r.PathType, field, ErrUnsupported)
}

// InvalidShareUnsupported returns the error (UnsupportedRule) of the first
// rule of lb whose pool answers a share of its requests 500
// (Pool.InvalidWeight), for a provider that cannot split a pool's requests
// between its members and an answer of its own; nil when no rule's pool
// has such a share.
func InvalidShareUnsupported(lb *LoadBalancer) error {
	if lb.HTTP == nil {
		return nil
	}
	shares := map[string]int32{}
	for _, p := range lb.Pools {
		if p.InvalidWeight != 0 {
			shares[p.Name] = p.InvalidWeight
		}
	}
	for _, r := range lb.HTTP.Rules {
		if w := shares[r.Pool]; w != 0 {
			return UnsupportedRule(r, fmt.Sprintf("pool %s's invalid weight %d (the share of invalid backendRefs answered 500)", r.Pool, w))
		}
	}
	return nil
}

// IngressSubset returns an ErrUnsupported error naming the first field of
// lb, and its rule, beyond what Ingress models use: the Gateway fields of
// rules (other than Order, which only ranks them), rule and certificate
// ports other than every listener, member weights, and the wildcard hosts
// of a Gateway's load balancer (one or more labels, where an Ingress's
// stand for one), listeners other than HTTP and HTTPS beside HTTP routes
// (a Gateway's TCP, UDP and TLS listeners), and a pool's AppProtocol. A
// provider that
// serves Ingress models only refuses the others with it rather than serve
// a model partly.
func IngressSubset(lb *LoadBalancer) error {
	var all, https []int32
	for _, l := range lb.Listeners {
		all = append(all, l.Port)
		if l.Protocol == HTTPS {
			https = append(https, l.Port)
		}
	}
	slices.Sort(all)
	slices.Sort(https)
	if lb.IsL7() {
		for _, l := range lb.Listeners {
			if l.Protocol != HTTP && l.Protocol != HTTPS {
				return fmt.Errorf("listener %s/%d: a %s listener beside HTTP routes is %w", l.Protocol, l.Port, l.Protocol, ErrUnsupported)
			}
		}
	}
	for _, p := range lb.Pools {
		if p.AppProtocol != "" {
			return fmt.Errorf("pool %s: appProtocol %s is %w", p.Name, p.AppProtocol, ErrUnsupported)
		}
		for _, m := range p.Members {
			if m.Weight != 0 {
				return fmt.Errorf("pool %s: member %s:%d: weight %d: member weights are %w", p.Name, m.IP, m.Port, m.Weight, ErrUnsupported)
			}
		}
	}
	if lb.HTTP == nil {
		return nil
	}
	for _, c := range lb.HTTP.TLS {
		if len(c.Ports) > 0 && !slices.Equal(c.Ports, https) {
			return fmt.Errorf("TLS Secret %s: ports %v: a certificate for some HTTPS listeners only is %w", c.Secret, c.Ports, ErrUnsupported)
		}
	}
	for _, r := range lb.HTTP.Rules {
		field := ""
		switch {
		case r.PathType == PathRegex:
			field = "pathType RegularExpression"
		case lb.Gateway != "" && strings.HasPrefix(r.Host, "*."):
			field = "a Gateway's wildcard host (one or more labels)"
		case len(r.Ports) > 0 && !slices.Equal(r.Ports, all):
			field = fmt.Sprintf("ports %v (some listeners only)", r.Ports)
		case r.Method != "":
			field = "method"
		case len(r.Headers) > 0:
			field = "headers"
		case len(r.Query) > 0:
			field = "query"
		case r.RequestHeaders != nil:
			field = "requestHeaders"
		case r.ResponseHeaders != nil:
			field = "responseHeaders"
		case r.Redirect != nil:
			field = "redirect"
		case r.Rewrite != nil:
			field = "rewrite"
		case r.FixedStatus != 0:
			field = "fixedStatus"
		case r.Backends != nil:
			field = "backends"
		case r.CORS != nil:
			field = "cors"
		default:
			continue
		}
		return UnsupportedRule(r, field)
	}
	return nil
}

// ListenerModel is the Gateway's load balancer that holds only listener l
// (its pool, of a TCP or UDP listener, without members; its client
// validation) and no rule: what
// the Gateway builder hands a ModelChecker about one listener.
func ListenerModel(l Listener) *LoadBalancer {
	return &LoadBalancer{Name: "listener-check", Kind: L7, Gateway: "listener/check", HTTP: &HTTPRoutes{},
		Listeners: []Listener{{Port: l.Port, Protocol: l.Protocol, Pool: Pool{Name: l.Pool.Name}, ClientValidation: l.ClientValidation}}}
}

// ClientValidationUnsupported returns the ErrUnsupported error of the
// first listener of lb that verifies client certificates
// (Listener.ClientValidation), for a provider that cannot: serving the
// listener without the check would let in the clients it is there to
// keep out. Nil when no listener has one.
func ClientValidationUnsupported(lb *LoadBalancer) error {
	for _, l := range lb.Listeners {
		if l.ClientValidation != nil {
			return fmt.Errorf("listener %s/%d: clientValidation (client certificates, Gateway spec.tls.frontend) is %w",
				l.Protocol, l.Port, ErrUnsupported)
		}
	}
	return nil
}

// RuleModel is the Gateway's load balancer that holds only rule r, its
// pools (those of its Pool and Backends; nil ones left out) and an HTTP
// listener on each of the rule's ports (on 80 when it names none): what
// CheckRule hands Normalize and the Gateway builder a ModelChecker about
// one rule, so that the check that runs on a whole model (Normalize, the
// provider's Ensure) decides both.
func RuleModel(r Rule, pools ...*Pool) *LoadBalancer {
	lb := &LoadBalancer{Name: "rule-check", Kind: L7, Gateway: "rule/check", HTTP: &HTTPRoutes{Rules: []Rule{r}}}
	ports := r.Ports
	if len(ports) == 0 {
		ports = []int32{80}
	}
	for _, p := range ports {
		lb.Listeners = append(lb.Listeners, Listener{Port: p, Protocol: HTTP})
	}
	for _, p := range pools {
		if p != nil {
			lb.Pools = append(lb.Pools, *p)
		}
	}
	return lb
}
