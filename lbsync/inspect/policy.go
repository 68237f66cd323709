package inspect

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/nodeportlocal/npl/lbmodel"
)

// policyFields are the fields of a pool's policy that a provider holds, by
// their JSON names, to compare and describe. DrainSeconds is not one:
// npl-lbsync drains itself, keeping a disabled member in the pool (the
// members show it), and a provider need not report it.
var policyFields = []struct {
	name string
	of   func(*lbmodel.Policy) any
}{
	{"persistence", func(p *lbmodel.Policy) any { return p.Persistence }},
	{"healthCheck", func(p *lbmodel.Policy) any { return p.HealthCheck }},
	{"algorithm", func(p *lbmodel.Policy) any { return p.Algorithm }},
	{"slowStartSeconds", func(p *lbmodel.Policy) any { return p.SlowStartSeconds }},
	{"maxConnectionsPerMember", func(p *lbmodel.Policy) any { return p.MaxConnectionsPerMember }},
	{"timeouts", func(p *lbmodel.Policy) any { return p.Timeouts }},
	{"retry", func(p *lbmodel.Policy) any { return p.Retry }},
	{"backendTLS", func(p *lbmodel.Policy) any { return p.BackendTLS }},
}

// PolicyDrift names the fields of a pool's policy that differ between what
// npl-lbsync asks for and what the provider has.
func PolicyDrift(expected, actual *lbmodel.Policy) []string {
	var out []string
	for _, f := range policyFields {
		if !reflect.DeepEqual(fieldOf(expected, f.of), fieldOf(actual, f.of)) {
			out = append(out, f.name)
		}
	}
	return out
}

func fieldOf(p *lbmodel.Policy, of func(*lbmodel.Policy) any) any {
	if p == nil {
		p = &lbmodel.Policy{}
	}
	v := of(p)
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil
	}
	return v
}

// DescribePolicy is a pool's policy on one line, as nplctl prints it:
// "<default>" for none.
func DescribePolicy(p *lbmodel.Policy) string {
	if p == nil {
		return "<default>"
	}
	var parts []string
	if s := p.Persistence; s != nil {
		d := "persist=" + string(s.Type)
		if s.Name != "" {
			d += "(" + s.Name + ")"
		}
		if s.TimeoutSeconds != 0 {
			d += fmt.Sprintf("/%ds", s.TimeoutSeconds)
		}
		parts = append(parts, d)
	}
	if c := p.HealthCheck; c != nil {
		d := "check=" + string(c.Type)
		if c.Type == lbmodel.CheckHTTP {
			d += ":" + c.Host + c.Path
		}
		if c.IntervalSeconds != 0 {
			d += fmt.Sprintf("/%ds", c.IntervalSeconds)
		}
		parts = append(parts, d)
	}
	if a := p.Algorithm; a != nil {
		d := "lb=" + string(a.Type)
		if a.HashOn != "" {
			d += "(" + string(a.HashOn)
			if a.HashName != "" {
				d += ":" + a.HashName
			}
			d += ")"
		}
		parts = append(parts, d)
	}
	if p.SlowStartSeconds != 0 {
		parts = append(parts, fmt.Sprintf("slowstart=%ds", p.SlowStartSeconds))
	}
	if p.DrainSeconds != nil {
		parts = append(parts, fmt.Sprintf("drain=%ds", *p.DrainSeconds))
	}
	if p.MaxConnectionsPerMember != 0 {
		parts = append(parts, fmt.Sprintf("maxconn=%d", p.MaxConnectionsPerMember))
	}
	if t := p.Timeouts; t != nil {
		parts = append(parts, fmt.Sprintf("timeout=%dms/%dms", t.RequestMillis, t.BackendRequestMillis))
	}
	if r := p.Retry; r != nil {
		parts = append(parts, fmt.Sprintf("retry=%d", r.Attempts))
	}
	if t := p.BackendTLS; t != nil {
		parts = append(parts, "tls="+t.Hostname)
	}
	if len(parts) == 0 {
		return "<default>"
	}
	return strings.Join(parts, ",")
}
