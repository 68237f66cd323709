package avisim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/netip"
	"strconv"
)

// The checks below are what the controller refuses beyond its schema
// (avischema checks types, enums, ranges and required fields first).

// validatePool checks the servers: a valid address whose type matches, no
// server twice. A server's port 0 is the pool's default port.
func validatePool(obj object) *apiError {
	servers, _ := obj["servers"].([]any)
	seen := map[string]bool{}
	for i, raw := range servers {
		srv, _ := raw.(map[string]any)
		ip, _ := srv["ip"].(map[string]any)
		addrStr, _ := ip["addr"].(string)
		addr, err := netip.ParseAddr(addrStr)
		if err != nil {
			return errorf(http.StatusBadRequest, "servers[%d].ip.addr: %q is not an IP address", i, addrStr)
		}
		want := "V4"
		if addr.Is6() && !addr.Is4In6() {
			want = "V6"
		}
		if typ, _ := ip["type"].(string); typ != want {
			return errorf(http.StatusBadRequest, "servers[%d].ip.type: %q does not match address %s", i, typ, addrStr)
		}
		port, _ := toInt(srv["port"])
		key := addr.String() + ":" + strconv.FormatInt(port, 10)
		if seen[key] {
			return errorf(http.StatusBadRequest, "Duplicate server %s in pool %v", key, obj["name"])
		}
		seen[key] = true
	}
	return nil
}

// validateVirtualService checks that a virtual service that takes traffic
// of its own has a VsVip: the child of an SNI parent (VS_TYPE_VH_CHILD)
// needs neither a VsVip nor services, its parent's serve it.
func validateVirtualService(obj object) *apiError {
	if str(obj["type"]) == "VS_TYPE_VH_CHILD" {
		// vh_parent_vs_uuid until 21.1, vh_parent_vs_ref from 22.1.
		if str(obj["vh_parent_vs_uuid"]) == "" && str(obj["vh_parent_vs_ref"]) == "" {
			return errorf(http.StatusBadRequest, "vh_parent_vs_uuid: a child virtual service needs its parent")
		}
		return nil
	}
	if str(obj["vsvip_ref"]) == "" {
		return errorf(http.StatusBadRequest, "vsvip_ref: a virtual service of type %s needs a VsVip", str(obj["type"]))
	}
	return nil
}

// validateL4PolicySet checks the rules: one index each, a pool or pool
// group for the action that selects one.
func validateL4PolicySet(obj object) *apiError {
	policy, _ := obj["l4_connection_policy"].(map[string]any)
	rules, _ := policy["rules"].([]any)
	indexes := map[int64]bool{}
	for i, raw := range rules {
		rule, _ := raw.(map[string]any)
		idx, _ := toInt(rule["index"])
		if indexes[idx] {
			return errorf(http.StatusBadRequest, "rules[%d].index %d is used twice", i, idx)
		}
		indexes[idx] = true
		action, _ := rule["action"].(map[string]any)
		if sel, ok := action["select_pool"].(map[string]any); ok {
			switch typ := str(sel["action_type"]); {
			case typ == "L4_RULE_ACTION_SELECT_POOL" && str(sel["pool_ref"]) == "":
				return errorf(http.StatusBadRequest, "rules[%d]: L4_RULE_ACTION_SELECT_POOL needs a pool_ref", i)
			case typ == "L4_RULE_ACTION_SELECT_POOLGROUP" && str(sel["pool_group_ref"]) == "":
				return errorf(http.StatusBadRequest, "rules[%d]: L4_RULE_ACTION_SELECT_POOLGROUP needs a pool_group_ref", i)
			}
		}
	}
	return nil
}

// vipAllocator tracks which VsVip holds which address.
type vipAllocator struct {
	owner   map[netip.Addr]string
	byVsVip map[string][]netip.Addr
}

func newVIPAllocator() *vipAllocator {
	return &vipAllocator{owner: map[netip.Addr]string{}, byVsVip: map[string][]netip.Addr{}}
}

func (a *vipAllocator) assign(uuid string, addrs []netip.Addr) {
	a.release(uuid)
	for _, ip := range addrs {
		a.owner[ip] = uuid
	}
	a.byVsVip[uuid] = addrs
}

func (a *vipAllocator) release(uuid string) {
	for _, ip := range a.byVsVip[uuid] {
		if a.owner[ip] == uuid {
			delete(a.owner, ip)
		}
	}
	delete(a.byVsVip, uuid)
}

// free reports whether ip may be given to the VsVip uuid.
func (a *vipAllocator) free(ip netip.Addr, uuid string) bool {
	o, taken := a.owner[ip]
	return !taken || o == uuid
}

// vipAddrs returns the addresses a stored VsVip holds.
func vipAddrs(obj object) []netip.Addr {
	var out []netip.Addr
	vips, _ := obj["vip"].([]any)
	for _, raw := range vips {
		vip, _ := raw.(map[string]any)
		ipa, _ := vip["ip_address"].(map[string]any)
		if s, _ := ipa["addr"].(string); s != "" {
			if ip, err := netip.ParseAddr(s); err == nil {
				out = append(out, ip)
			}
		}
	}
	return out
}

// allocateVIPs gives every vip of a VsVip its address: an explicit
// ip_address is kept (if no other VsVip holds it); auto_allocate_ip takes the
// address the VsVip already had in that network, or the lowest free address
// of the network's first configured subnet.
func (s *store) allocateVIPs(tenant, uuid string, obj, old object) *apiError {
	vips, _ := obj["vip"].([]any)
	if len(vips) == 0 {
		return errorf(http.StatusBadRequest, "vip: at least one vip is required")
	}
	previous := map[string]netip.Addr{}
	if old != nil {
		oldVIPs, _ := old["vip"].([]any)
		for _, raw := range oldVIPs {
			vip, _ := raw.(map[string]any)
			ipa, _ := vip["ip_address"].(map[string]any)
			if ip, err := netip.ParseAddr(str(ipa["addr"])); err == nil {
				previous[str(vip["vip_id"])] = ip
			}
		}
		if err := vipChanges(previous, vips); err != nil {
			return err
		}
	}
	taken := map[netip.Addr]bool{}
	for i, raw := range vips {
		vip, ok := raw.(map[string]any)
		if !ok {
			return errorf(http.StatusBadRequest, "vip[%d]: expected an object", i)
		}
		if str(vip["vip_id"]) == "" {
			vip["vip_id"] = strconv.Itoa(i)
		}
		ipa, _ := vip["ip_address"].(map[string]any)
		if given := str(ipa["addr"]); given != "" {
			ip, err := netip.ParseAddr(given)
			if err != nil {
				return errorf(http.StatusBadRequest, "vip[%d].ip_address: %q is not an IP address", i, given)
			}
			if !s.vips.free(ip, uuid) || taken[ip] {
				return errorf(http.StatusConflict, "IP address %s is already in use by another VsVip", ip)
			}
			taken[ip] = true
			vip["ip_address"] = map[string]any{"addr": ip.String(), "type": ipType(ip)}
			continue
		}
		if auto, _ := vip["auto_allocate_ip"].(bool); !auto {
			return errorf(http.StatusBadRequest, "vip[%d]: ip_address or auto_allocate_ip is required", i)
		}
		subnet, err := s.vipSubnet(tenant, vip)
		if err != nil {
			return err
		}
		ip, ok := previous[str(vip["vip_id"])]
		if !ok || !subnet.Contains(ip) || !s.vips.free(ip, uuid) || taken[ip] {
			ip, ok = s.lowestFree(subnet, uuid, taken)
			if !ok {
				return errorf(http.StatusBadRequest, "No available free IPs")
			}
		}
		taken[ip] = true
		vip["ip_address"] = map[string]any{"addr": ip.String(), "type": ipType(ip)}
		vip["avi_allocated_vip"] = true
	}
	return nil
}

// vipChanges refuses what a controller refuses in an update of a VsVip
// (AKO's lib.AviControllerVSVipIDChangeError and
// AviControllerRecreateVIPError, internal/lib/constants.go): a vip whose
// vip_id changed, and a new address for an existing vip.
func vipChanges(previous map[string]netip.Addr, vips []any) *apiError {
	kept := 0
	for _, raw := range vips {
		vip, _ := raw.(map[string]any)
		ip, had := previous[str(vip["vip_id"])]
		if !had {
			continue
		}
		kept++
		ipa, _ := vip["ip_address"].(map[string]any)
		if given, err := netip.ParseAddr(str(ipa["addr"])); err == nil && given != ip {
			return errorf(http.StatusBadRequest, "Changing the IP address of an existing VIP (%s to %s) is not supported. "+
				"If a new preferred IP is needed, please recreate the VIP", ip, given)
		}
	}
	if len(previous) > 0 && kept < len(previous) && len(vips) >= len(previous) {
		return errorf(http.StatusBadRequest, "Changing an existing VIP's vip_id is not supported")
	}
	return nil
}

// vipSubnet returns the subnet to allocate a vip from: the network named by
// ipam_network_subnet.network_ref, else the default VIP network.
func (s *store) vipSubnet(tenant string, vip map[string]any) (netip.Prefix, *apiError) {
	var network *entry
	ipam, _ := vip["ipam_network_subnet"].(map[string]any)
	if ref := str(ipam["network_ref"]); ref != "" {
		network = s.byUUID[ref[len("/api/network/"):]]
	} else {
		network = s.lookupName(tenant, "network", s.defaultNetwork)
	}
	if network == nil {
		return netip.Prefix{}, errorf(http.StatusBadRequest, "Network object not found!")
	}
	subnets, _ := network.obj["configured_subnets"].([]any)
	for _, raw := range subnets {
		sub, _ := raw.(map[string]any)
		prefix, _ := sub["prefix"].(map[string]any)
		ipAddr, _ := prefix["ip_addr"].(map[string]any)
		mask, _ := toInt(prefix["mask"])
		ip, err := netip.ParseAddr(str(ipAddr["addr"]))
		if err != nil {
			continue
		}
		if p, err := ip.Prefix(int(mask)); err == nil {
			return p, nil
		}
	}
	return netip.Prefix{}, errorf(http.StatusBadRequest, "No available free IPs: network %s has no configured subnet", network.name())
}

// lowestFree returns the lowest address of subnet that is neither its
// network nor (IPv4) broadcast address and that no VsVip holds.
func (s *store) lowestFree(subnet netip.Prefix, uuid string, taken map[netip.Addr]bool) (netip.Addr, bool) {
	subnet = subnet.Masked()
	for ip := subnet.Addr().Next(); ip.IsValid() && subnet.Contains(ip); ip = ip.Next() {
		if ip.Is4() && !subnet.Contains(ip.Next()) {
			break // broadcast
		}
		if s.vips.free(ip, uuid) && !taken[ip] {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func ipType(ip netip.Addr) string {
	if ip.Is4() {
		return "V4"
	}
	return "V6"
}

func str(v any) string { s, _ := v.(string); return s }

// toInt reads a JSON number.
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case float64:
		return int64(n), float64(int64(n)) == n
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}
