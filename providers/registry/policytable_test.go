package registry

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/avi"
	"github.com/nodeportlocal/npl/providers/bigip"
	"github.com/nodeportlocal/npl/providers/haproxy"
	"github.com/nodeportlocal/npl/providers/mock"
)

var update = flag.Bool("update", false, "rewrite the README's policy table")

// policyCapabilities are what each provider expresses of a pool's policy
// (providers.PolicyCapable), for the README's table. A provider that
// implements PolicyCapabilities is listed here with it, and the table
// regenerated (-update); one that does not expresses nothing.
var policyCapabilities = map[string]lbmodel.PolicyCapabilities{
	mock.Name:    (&mock.Mock{}).PolicyCapabilities(),
	haproxy.Name: api.PolicyCapabilities(),
	avi.Name:     avi.PolicyCapabilities(),
	bigip.Name:   bigip.PolicyCapabilities(),
}

// tableProviders are the table's columns.
var tableProviders = []string{mock.Name, haproxy.Name, avi.Name, bigip.Name}

// policyRows are the table's rows: a policy setting one field, and the
// kinds of pool it applies to.
var policyRows = []struct {
	field string
	p     lbmodel.Policy
	kinds []lbmodel.Protocol // HTTP: the pools of HTTP rules
}{
	{"persistence `SourceIP` (Service `sessionAffinity: ClientIP`)", lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP}}, all},
	{"persistence `Cookie`", lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "c"}}, httpOnly},
	{"persistence `Header`", lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistHeader, Name: "h"}}, httpOnly},
	{"persistence `idleTimeoutSeconds`", lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "c", IdleTimeoutSeconds: 1}}, httpOnly},
	{"`healthCheck` `TCP`", lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP}}, checked},
	{"`healthCheck` `HTTP`", lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/"}}, checked},
	{"`healthCheck.host`", lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/", Host: "h"}}, checked},
	{"`algorithm` `LeastConnections`", lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.LeastConnections}}, all},
	{"`algorithm` `ConsistentHash` on `SourceIP`", lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP}}, all},
	{"`algorithm` `ConsistentHash` on a `Header`", lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashHeader, HashName: "h"}}, httpOnly},
	{"`algorithm` `ConsistentHash` on a `Cookie`", lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashCookie, HashName: "c"}}, httpOnly},
	{"`slowStartSeconds`", lbmodel.Policy{SlowStartSeconds: 1}, all},
	{"`maxConnectionsPerMember`", lbmodel.Policy{MaxConnectionsPerMember: 1}, all},
	{"`drainSeconds` (npl-lbsync keeps the member itself)", lbmodel.Policy{DrainSeconds: new(int32)}, all},
	{"HTTPRoute `timeouts`", lbmodel.Policy{Timeouts: &lbmodel.Timeouts{RequestMillis: 1}}, httpOnly},
	{"HTTPRoute `retry`", lbmodel.Policy{Retry: &lbmodel.Retry{Attempts: 1}}, httpOnly},
	{"`BackendTLSPolicy`", lbmodel.Policy{BackendTLS: &lbmodel.BackendTLS{Hostname: "h", SystemCAs: true}}, httpOnly},
	{"`BackendTLSPolicy` subject alternative names of type `URI`", lbmodel.Policy{BackendTLS: &lbmodel.BackendTLS{Hostname: "h", SystemCAs: true,
		SubjectAltNames: []lbmodel.SubjectAltName{{Type: lbmodel.SANURI, Value: "spiffe://x"}}}}, httpOnly},
	{"`BackendTLSPolicy` subject alternative name other than its `hostname`", lbmodel.Policy{BackendTLS: &lbmodel.BackendTLS{Hostname: "h", SystemCAs: true,
		SubjectAltNames: []lbmodel.SubjectAltName{{Type: lbmodel.SANHostname, Value: "other"}}}}, httpOnly},
}

var (
	all      = []lbmodel.Protocol{lbmodel.TCP, lbmodel.UDP, lbmodel.HTTP}
	checked  = []lbmodel.Protocol{lbmodel.TCP, lbmodel.HTTP} // a UDP pool has no health check
	httpOnly = []lbmodel.Protocol{lbmodel.HTTP}
)

// served returns the kinds of pool, among kinds, on which caps keeps p
// whole (lbmodel.PolicyCapabilities.StripPolicies, the rule
// providers.Validated applies).
func served(caps lbmodel.PolicyCapabilities, p lbmodel.Policy, kinds []lbmodel.Protocol) []lbmodel.Protocol {
	var out []lbmodel.Protocol
	for _, k := range kinds {
		pool := lbmodel.Pool{Name: "p", Policy: &p}
		lb := &lbmodel.LoadBalancer{Kind: lbmodel.L7, Listeners: []lbmodel.Listener{{Protocol: lbmodel.HTTP}}, Pools: []lbmodel.Pool{pool}}
		if k != lbmodel.HTTP {
			lb = &lbmodel.LoadBalancer{Listeners: []lbmodel.Listener{{Protocol: k, Pool: pool}}}
		}
		if _, gaps := caps.StripPolicies(lb); len(gaps) == 0 {
			out = append(out, k)
		}
	}
	return out
}

// policyTable is the README's table of what each provider serves of a
// pool's policy.
func policyTable() string {
	var b strings.Builder
	b.WriteString("| field | pools it applies to |")
	for _, name := range tableProviders {
		fmt.Fprintf(&b, " `%s` |", name)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(tableProviders)) + "\n")
	for _, r := range policyRows {
		fmt.Fprintf(&b, "| %s | %s |", r.field, kindList(r.kinds))
		for _, name := range tableProviders {
			got := served(policyCapabilities[name], r.p, r.kinds)
			switch {
			case len(got) == len(r.kinds):
				b.WriteString(" served |")
			case len(got) > 0:
				fmt.Fprintf(&b, " %s; else `SyncedWithWarnings` |", kindList(got))
			default:
				b.WriteString(" `SyncedWithWarnings` |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func kindList(kinds []lbmodel.Protocol) string {
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = string(k)
	}
	return strings.Join(parts, ", ")
}

// The README's table says what each provider serves of a pool's policy,
// as their PolicyCapabilities say; -update rewrites it.
func TestREADME_policyTable(t *testing.T) {
	const path, begin, end = "../../README.md", "<!-- BEGIN policy table -->\n", "<!-- END policy table -->"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	before, rest, ok1 := strings.Cut(doc, begin)
	table, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("%s: no %q ... %q", path, begin, end)
	}
	want := policyTable()
	if *update {
		if err := os.WriteFile(path, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if table != want {
		t.Errorf("the README's policy table is not the providers' (go test ./providers/registry -run TestREADME_policyTable -update):\n%s", want)
	}
	for _, name := range Names() {
		if !strings.Contains(want, "`"+name+"`") {
			t.Errorf("provider %s has no column", name)
		}
	}
}
