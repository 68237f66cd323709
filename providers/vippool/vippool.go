// Package vippool picks virtual IP addresses from the ranges of npl-lbsync's
// vipPool setting, for the providers that do not allocate VIPs themselves
// (the mock and BIG-IP; Avi takes them from its own IPAM). Each provider
// keeps its own record of the addresses in use; this package owns the
// order in which addresses are tried and which ones a VIP may never take.
package vippool

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrEmpty is returned when a VIP is needed and no range is configured.
var ErrEmpty = errors.New("no VIP requested and the VIP pool is empty (vipPool)")

// ErrExhausted is returned when every usable address of the ranges is in
// use.
var ErrExhausted = errors.New("no free VIP left in the VIP pool")

// First returns the first usable address of ranges, in the order given and
// then by address, that inUse does not report. The network and broadcast
// addresses of IPv4 ranges of /30 and wider, and the first address of IPv6
// ranges of /126 and wider, are never usable (see Reserved).
func First(ranges []netip.Prefix, inUse func(netip.Addr) bool) (netip.Addr, error) {
	if len(ranges) == 0 {
		return netip.Addr{}, ErrEmpty
	}
	for _, r := range ranges {
		r = r.Masked()
		for a := r.Addr(); a.IsValid() && r.Contains(a); a = a.Next() {
			if !Reserved(r, a) && !inUse(a) {
				return a, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("%w %v", ErrExhausted, ranges)
}

// Reserved reports whether a is an address of range r that a VIP must not
// take: the network or broadcast address of an IPv4 range, or the
// Subnet-Router anycast address (the first, RFC 4291 2.6.1) of an IPv6
// range, which every router of the subnet answers. IPv4 /31 and /32 ranges
// (RFC 3021) and IPv6 /127 and /128 ranges (RFC 6164) have no such
// addresses.
func Reserved(r netip.Prefix, a netip.Addr) bool {
	r = r.Masked()
	switch {
	case a.Is4() && r.Bits() <= 30:
		return a == r.Addr() || !r.Contains(a.Next())
	case a.Is6() && r.Bits() <= 126:
		return a == r.Addr()
	}
	return false
}
