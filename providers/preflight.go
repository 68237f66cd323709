package providers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"
)

// Check is one result of a preflight: what was checked and what was found.
type Check struct {
	// Name is what was checked: tls, login, version, tenant, cloud,
	// serviceEngineGroup, vipNetwork, partition, rights.
	Name string `json:"name"`
	// Result is ok, warning (npl works, but not as it should: TLS not
	// verified) or problem (npl-lbsync would fail).
	Result string `json:"result"`
	// Detail says what was found, or exactly what is wrong.
	Detail string `json:"detail"`
}

// The results of a Check.
const (
	CheckOK      = "ok"
	CheckWarning = "warning"
	CheckProblem = "problem"
)

// Preflighter is a provider configuration that can check, before
// npl-lbsync is installed and without writing anything, that its load
// balancer can serve npl: the connection and its TLS verification, the
// login, the API version, that the places objects go exist, and that the
// account may create and delete the objects npl makes.
type Preflighter interface {
	// Preflight runs the checks in order; a check that makes the next ones
	// meaningless (TLS, login) ends the list with its problem.
	Preflight(ctx context.Context) []Check
}

// PreflighterOf returns the Preflighter of cfg, behind the registry's
// wrapper when it has one, or nil.
func PreflighterOf(cfg Config) Preflighter {
	for cfg != nil {
		if p, ok := cfg.(Preflighter); ok {
			return p
		}
		u, ok := cfg.(interface{ Unwrap() Config })
		if !ok {
			return nil
		}
		cfg = u.Unwrap()
	}
	return nil
}

// Failed reports whether any check found a problem.
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Result == CheckProblem {
			return true
		}
	}
	return false
}

// CheckTLS is the tls check of a preflight: it connects to host
// ("host:port") within timeout and completes a TLS handshake with
// tlsConfig, so the certificate is verified as the provider's client
// will verify it; the detail says against what (insecure: not at all,
// else caFile, or the system's CAs when caFile is empty).
func CheckTLS(ctx context.Context, host string, timeout time.Duration, tlsConfig *tls.Config, insecure bool, caFile string) Check {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: tlsConfig}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return Check{Name: "tls", Result: CheckProblem, Detail: fmt.Sprintf("connect to %s: %v", host, err)}
	}
	conn.Close()
	switch {
	case insecure:
		return Check{Name: "tls", Result: CheckWarning, Detail: host + ": the certificate is not verified: insecureSkipVerify is set"}
	case caFile == "":
		return Check{Name: "tls", Result: CheckOK, Detail: host + ": certificate verified against the system's CAs"}
	default:
		return Check{Name: "tls", Result: CheckOK, Detail: host + ": certificate verified against " + caFile}
	}
}
