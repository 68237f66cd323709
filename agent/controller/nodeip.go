package controller

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/contract"
)

// ParseNodeIPPreference parses a comma-separated list of Node address types,
// most preferred first (e.g. "InternalIP,ExternalIP").
func ParseNodeIPPreference(s string) ([]corev1.NodeAddressType, error) {
	var out []corev1.NodeAddressType
	for _, part := range strings.Split(s, ",") {
		switch t := corev1.NodeAddressType(strings.TrimSpace(part)); t {
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			out = append(out, t)
		default:
			return nil, fmt.Errorf("node IP preference %q: want InternalIP or ExternalIP", part)
		}
	}
	return out, nil
}

// NodeIPs picks the Node's address per family, following the preference
// order of address types.
func NodeIPs(node *corev1.Node, preference []corev1.NodeAddressType) map[contract.Family]netip.Addr {
	out := map[contract.Family]netip.Addr{}
	for _, t := range preference {
		for _, a := range node.Status.Addresses {
			if a.Type != t {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				continue
			}
			ip = ip.Unmap()
			fam := contract.FamilyIPv4
			if ip.Is6() {
				fam = contract.FamilyIPv6
			}
			if _, ok := out[fam]; !ok {
				out[fam] = ip
			}
		}
	}
	return out
}
