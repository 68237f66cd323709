package api

import "github.com/nodeportlocal/npl/lbmodel"

// PolicyCapabilities are what npl-edge expresses of a pool's traffic
// policy, for each kind of pool: HAProxy 2.6 serves the TCP and HTTP pools
// (docs/haproxy.md says what each field becomes); the UDP listeners,
// served by the edge's nftables table, take none of it. The haproxy
// provider declares them, so that npl-lbsync names what is not served, and
// the edge refuses a model that asks for more.
func PolicyCapabilities() lbmodel.PolicyCapabilities {
	tcp := lbmodel.PolicySupport{
		Persistence:     []lbmodel.PersistenceType{lbmodel.PersistSourceIP},
		HealthChecks:    []lbmodel.HealthCheckType{lbmodel.CheckTCP, lbmodel.CheckHTTP},
		HealthCheckHost: true,
		Algorithms:      []lbmodel.AlgorithmType{lbmodel.RoundRobin, lbmodel.LeastConnections, lbmodel.ConsistentHash},
		HashKeys:        []lbmodel.HashKey{lbmodel.HashSourceIP},
		SlowStart:       true,
		MaxConnections:  true,
	}
	http := tcp
	http.Persistence = []lbmodel.PersistenceType{lbmodel.PersistSourceIP, lbmodel.PersistCookie, lbmodel.PersistHeader}
	http.PersistenceIdleTimeout = true
	http.HashKeys = []lbmodel.HashKey{lbmodel.HashSourceIP, lbmodel.HashHeader, lbmodel.HashCookie}
	// HAProxy's retry-on takes these statuses only, and retries at once;
	// it checks a member's certificate against the one name it sends as
	// SNI, the hostname: never a URI, several names or another one.
	http.Timeouts, http.Retry, http.RetryCodes, http.BackendTLS = true, true, []int32{401, 403, 404, 408, 425, 500, 501, 502, 503, 504}, true
	return lbmodel.PolicyCapabilities{Provider: "haproxy", TCP: tcp, HTTP: http}
}
