package builder

import (
	"cmp"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
)

// Members returns the members of one port of in.Service, built exactly as
// Build builds the pool of that port's listener, and a report of what it
// left out. The L7 builder uses it for the Service ports Ingresses send
// requests to. The members are nil when the input gives none (no Service,
// an unknown service type or family, a protocol other than TCP or UDP); the
// reason is in the report. ReadyBackends counts the enabled members.
func Members(in Input, port corev1.ServicePort) ([]lbmodel.Member, Report) {
	var r Report
	if in.Service == nil {
		r.Errors = append(r.Errors, "no Service to build from")
		return nil, r
	}
	mode, family, ok := settings(in, &r)
	if !ok {
		return nil, r
	}
	proto, ok := listenerProtocol(port.Protocol)
	if !ok {
		r.Skipped = append(r.Skipped, Skip{Kind: SkipPort, Name: portName(port),
			Reason: fmt.Sprintf("protocol %s is not supported", port.Protocol)})
		return nil, r
	}
	members := newBackends(in, mode, family, &r).members(mode, port, proto)
	r.ReadyBackends = countEnabled(members)
	return members, r
}

// settings returns the service type and IP family of in, defaults applied,
// or records why they are unusable.
func settings(in Input, r *Report) (mode string, family contract.Family, ok bool) {
	mode, family, err := Settings(in.ServiceType, in.Family)
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return "", "", false
	}
	return mode, family, true
}

// Settings returns a service type and an IP family with their defaults
// applied (ServiceTypeNodePortLocal, contract.FamilyIPv4), or an error
// when either is unknown.
func Settings(serviceType, family string) (string, contract.Family, error) {
	mode := cmp.Or(serviceType, ServiceTypeNodePortLocal)
	switch mode {
	case ServiceTypeNodePortLocal, ServiceTypeNodePort, ServiceTypeClusterIP:
	default:
		return "", "", fmt.Errorf("unknown service type %q", mode)
	}
	fam := contract.Family(cmp.Or(family, string(contract.FamilyIPv4)))
	if fam != contract.FamilyIPv4 && fam != contract.FamilyIPv6 {
		return "", "", fmt.Errorf("unknown IP family %q", family)
	}
	return mode, fam, nil
}

// members returns the sorted members of one Service port in mode.
func (b *backends) members(mode string, sp corev1.ServicePort, proto lbmodel.Protocol) []lbmodel.Member {
	var members []lbmodel.Member
	switch mode {
	case ServiceTypeNodePortLocal:
		members = b.nodePortLocalMembers(sp, proto)
	case ServiceTypeNodePort:
		members = b.nodePortMembers(sp)
	case ServiceTypeClusterIP:
		members = b.clusterIPMembers(sp)
	}
	return lbmodel.SortMembers(members)
}

func countEnabled(members []lbmodel.Member) int {
	n := 0
	for _, m := range members {
		if m.Enabled {
			n++
		}
	}
	return n
}
