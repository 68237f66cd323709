package gateway

import (
	"fmt"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// The traffic policy of a rule's pool, from the rule's own fields:
// HTTPRoute timeouts, retry and sessionPersistence, GRPCRoute
// sessionPersistence. retry and sessionPersistence are of Gateway API's
// experimental channel: the standard CRDs drop them, so they reach
// npl-lbsync only where the experimental CRDs are installed.

// Defaults of what the routes leave unset.
const (
	// defaultRetryAttempts is the retries of a retry without attempts.
	defaultRetryAttempts = 1
	// maxRetryAttempts is the most retries the model takes; more are
	// capped, with a warning.
	maxRetryAttempts = 10
	// defaultCookieName and defaultHeaderName name the cookie, or the
	// header, of a session without sessionName.
	defaultCookieName = "npl-session"
	defaultHeaderName = "x-npl-session"
)

// rulePolicy returns the policy of the pool of rule index of rt (nil when
// it has none), with warnings for what it changed to serve it.
func rulePolicy(rt *routeView, index int) (*lbmodel.Policy, []string, error) {
	var p lbmodel.Policy
	var warnings []string
	var sp *gatewayv1.SessionPersistence
	switch rt.kind {
	case KindHTTPRoute:
		rule := &rt.http.Spec.Rules[index]
		sp = rule.SessionPersistence
		if t := rule.Timeouts; t != nil {
			var err error
			p.Timeouts = &lbmodel.Timeouts{}
			if p.Timeouts.RequestMillis, err = millis(t.Request); err != nil {
				return nil, nil, fmt.Errorf("timeouts.request: %w", err)
			}
			if p.Timeouts.BackendRequestMillis, err = millis(t.BackendRequest); err != nil {
				return nil, nil, fmt.Errorf("timeouts.backendRequest: %w", err)
			}
		}
		if r := rule.Retry; r != nil {
			p.Retry = &lbmodel.Retry{Attempts: defaultRetryAttempts}
			if r.Attempts != nil {
				p.Retry.Attempts = int32(min(*r.Attempts, maxRetryAttempts))
				if *r.Attempts > maxRetryAttempts {
					warnings = append(warnings, fmt.Sprintf("retry.attempts %d: at most %d retries are made", *r.Attempts, maxRetryAttempts))
				}
			}
			for _, c := range r.Codes {
				p.Retry.Codes = append(p.Retry.Codes, int32(c))
			}
			var err error
			if p.Retry.BackoffMillis, err = millis(r.Backoff); err != nil {
				return nil, nil, fmt.Errorf("retry.backoff: %w", err)
			}
		}
	case KindGRPCRoute:
		sp = rt.grpc.Spec.Rules[index].SessionPersistence
	}
	if sp != nil {
		s, err := persistence(sp)
		if err != nil {
			return nil, nil, fmt.Errorf("sessionPersistence: %w", err)
		}
		p.Persistence = s
	}
	if p == (lbmodel.Policy{}) {
		return nil, warnings, nil
	}
	return &p, warnings, nil
}

// persistence is the model's persistence of a rule's sessionPersistence:
// a cookie the load balancer inserts (Cookie, the default) or the value of
// a header the client sends (Header), for absoluteTimeout; a Permanent
// cookie carries its lifetime. (v1.6.3's type has no idleTimeout.)
func persistence(sp *gatewayv1.SessionPersistence) (*lbmodel.Persistence, error) {
	s := &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: defaultCookieName}
	if sp.Type != nil && *sp.Type == gatewayv1.HeaderBasedSessionPersistence {
		s.Type, s.Name = lbmodel.PersistHeader, defaultHeaderName
	}
	if sp.SessionName != nil && *sp.SessionName != "" {
		s.Name = *sp.SessionName
	}
	var err error
	if s.TimeoutSeconds, err = seconds(sp.AbsoluteTimeout); err != nil {
		return nil, fmt.Errorf("absoluteTimeout: %w", err)
	}
	if c := sp.CookieConfig; c != nil && c.LifetimeType != nil && *c.LifetimeType == gatewayv1.PermanentCookieLifetimeType {
		s.Permanent = true
	}
	return s, nil
}

// duration parses a Gateway API duration (GEP-2257: a subset of Go's, as
// 1h, 500ms, 1m30s); nil is 0.
func duration(d *gatewayv1.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	v, err := time.ParseDuration(string(*d))
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a duration", *d)
	}
	return v, nil
}

// millis is d in milliseconds, at most the model's int32.
func millis(d *gatewayv1.Duration) (int32, error) {
	v, err := duration(d)
	if err != nil {
		return 0, err
	}
	if v > time.Duration(1<<31-1)*time.Millisecond {
		return 0, fmt.Errorf("%q is too long", *d)
	}
	return int32(v.Milliseconds()), nil
}

// seconds is d in whole seconds, rounded up: a session is never shorter
// than asked.
func seconds(d *gatewayv1.Duration) (int32, error) {
	v, err := duration(d)
	if err != nil {
		return 0, err
	}
	if v > time.Duration(1<<31-1)*time.Second {
		return 0, fmt.Errorf("%q is too long", *d)
	}
	return int32((v + time.Second - 1) / time.Second), nil
}
