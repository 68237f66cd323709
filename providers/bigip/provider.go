// Package bigip is the F5 BIG-IP provider: it makes LTM objects in one
// partition match npl's load balancer model through iControl REST and the
// go-bigip client. Each listener becomes a pool of nodeIP:nodePort members
// (drained members are user-disabled) and a virtual server on the load
// balancer's VIP. Every object carries an ownership tag in its description,
// so the provider changes and deletes only its cluster's objects. An L7 load
// balancer (an Ingress) is pools, an LTM policy whose rules match host and
// path and forward to them, client-ssl profiles with their certificates and
// keys, and one virtual server per listener with the http profile (see
// l7.go).
package bigip

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/providers"
)

type provider struct {
	cfg *Config
	api *client
	inv *inventory

	loadMu         sync.Mutex // serialises reads of the whole partition
	partitionMu    sync.Mutex // serialises the creation of the partition
	partitionReady atomic.Bool
}

var _ providers.Provider = (*provider)(nil)

func newProvider(cfg *Config, api *client) *provider {
	return &provider{cfg: cfg, api: api, inv: newInventory()}
}

// listenerPlan is one listener in BIG-IP terms: a pool and a virtual server
// that share its name.
type listenerPlan struct {
	name       string
	port       int32
	ipProtocol string
	monitor    string
	profile    string
	members    []memberBody
}

// plan turns a desired load balancer, a model that passed
// providers.Normalize (the registry opens the provider behind
// providers.Validated), into BIG-IP objects; it checks what only BIG-IP
// requires (names).
func (p *provider) plan(lb *providers.LoadBalancer) ([]listenerPlan, netip.Addr, error) {
	var requested netip.Addr
	if lb.RequestedVIP != "" {
		a, err := netip.ParseAddr(lb.RequestedVIP)
		if err != nil {
			return nil, netip.Addr{}, fmt.Errorf("requested VIP %q: %w", lb.RequestedVIP, err)
		}
		requested = a
	}
	var plans []listenerPlan
	for _, l := range lb.Listeners {
		if !validName(l.Pool.Name) {
			return nil, netip.Addr{}, fmt.Errorf("listener %s/%d: pool name %q is not a valid BIG-IP name (letters, digits, '.', '_', '-')", l.Protocol, l.Port, l.Pool.Name)
		}
		ipProtocol, monitor, profile := protocolParts(l.Protocol)
		members, err := p.memberBodies(l.Pool.Name, l.Pool.Members)
		if err != nil {
			return nil, netip.Addr{}, err
		}
		plans = append(plans, listenerPlan{name: l.Pool.Name, port: l.Port, ipProtocol: ipProtocol, monitor: monitor,
			profile: profile, members: members})
	}
	return plans, requested, nil
}

// memberBodies spells the members of a pool as BIG-IP does.
func (p *provider) memberBodies(pool string, members []providers.Member) ([]memberBody, error) {
	out := []memberBody{}
	for _, m := range members {
		ip, err := netip.ParseAddr(m.IP)
		if err != nil {
			return nil, fmt.Errorf("pool %s: member IP %q: %w", pool, m.IP, err)
		}
		session := sessionEnabled
		if !m.Enabled {
			session = sessionDisabled
		}
		out = append(out, memberBody{Name: memberName(ip.Unmap(), m.Port), Partition: p.cfg.Partition, Session: session})
	}
	return out, nil
}

// Ensure makes the pools and virtual servers of lb match it, writing only
// what differs: a membership change is one write, no change is no write.
// Pools are written before the virtuals that use them; the virtuals of
// removed listeners are deleted before their pools.
func (p *provider) Ensure(ctx context.Context, lb *providers.LoadBalancer) (providers.Status, error) {
	if lb.IsL7() {
		return p.ensureL7(ctx, lb)
	}
	plans, requested, err := p.plan(lb)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("lb", lb.Name))
	if err := p.ensurePartition(ctx); err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	if err := p.loadInventory(ctx); err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	tag := ownerTag{Owner: ownerName, Cluster: p.cfg.common.ClusterName, Service: lb.Service, LB: lb.Name}

	names := make([]string, 0, len(plans))
	for _, l := range plans {
		names = append(names, l.name)
	}
	virtuals, pools, err := p.readObjects(ctx, lb.Name, names, names)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	var status providers.Status
	if len(plans) > 0 {
		vip, err := p.chooseVIP(lb.Name, requested, virtuals)
		if err != nil {
			return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
		}
		for _, l := range plans {
			if err := p.syncPool(ctx, tag, l, pools[l.name]); err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
		for _, l := range plans {
			if err := p.syncVirtual(ctx, tag, l, vip, virtuals[l.name]); err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
		status.VIPs = []string{vip.String()}
	}

	desired := map[string]bool{}
	for _, l := range plans {
		desired[l.name] = true
	}
	for _, name := range sortedKeys(virtuals) {
		if !desired[name] {
			if err := p.deleteVirtual(ctx, name); err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
	}
	for _, name := range sortedKeys(pools) {
		if !desired[name] {
			if err := p.deletePool(ctx, name); err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
	}
	return status, nil
}

// fail wraps an error of Ensure, and forgets that the partition exists if
// BIG-IP says it does not, so that the next call creates it again.
func (p *provider) fail(lb string, err error) error {
	if strings.Contains(err.Error(), "The requested folder (/"+p.cfg.Partition+")") {
		p.partitionReady.Store(false)
	}
	return fmt.Errorf("ensure load balancer %s: %w", lb, err)
}

// readObjects reads the existing virtuals and pools of load balancer lb:
// those the inventory lists for it, and those it should have that exist.
// An object of another owner under a name the load balancer needs is an
// error: the provider never takes it over.
func (p *provider) readObjects(ctx context.Context, lb string, virtualNames, poolNames []string) (map[string]*virtualState, map[string]*poolState, error) {
	oldVirtuals, oldPools := p.inv.objectsOf(lb)
	wantVirtuals, wantPools := map[string]bool{}, map[string]bool{}
	desiredVirtuals, desiredPools := map[string]bool{}, map[string]bool{}
	for _, n := range virtualNames {
		desiredVirtuals[n] = true
		if p.inv.hasVirtual(n) {
			wantVirtuals[n] = true
		}
	}
	for _, n := range poolNames {
		desiredPools[n] = true
		if p.inv.hasPool(n) {
			wantPools[n] = true
		}
	}
	for _, n := range oldVirtuals {
		wantVirtuals[n] = true
	}
	for _, n := range oldPools {
		wantPools[n] = true
	}

	virtuals := map[string]*virtualState{}
	for _, name := range sortedKeys(wantVirtuals) {
		v, err := p.getVirtual(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		if v == nil {
			continue
		}
		if err := p.checkOwner("virtual server", name, v.Description, lb, desiredVirtuals[name]); err != nil {
			return nil, nil, err
		}
		if p.owns(v.Description, lb) {
			virtuals[name] = v
		} else {
			// Its owner changed since the inventory was read.
			vip, _, _ := parseEndpoint(v.Destination)
			p.inv.setVirtual(name, p.ownerOf(v.Description), vip)
		}
	}
	pools := map[string]*poolState{}
	for _, name := range sortedKeys(wantPools) {
		pl, err := p.getPool(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		if pl == nil {
			continue
		}
		if err := p.checkOwner("pool", name, pl.Description, lb, desiredPools[name]); err != nil {
			return nil, nil, err
		}
		if p.owns(pl.Description, lb) {
			pools[name] = pl
		} else {
			p.inv.setPool(name, p.ownerOf(pl.Description))
		}
	}
	return virtuals, pools, nil
}

// ownerOf returns the load balancer of this cluster that owns an object, ""
// if the cluster does not own it.
func (p *provider) ownerOf(description string) string {
	tag, owned := parseOwner(description, p.cfg.common.ClusterName)
	if !owned {
		return ""
	}
	return tag.LB
}

func (p *provider) owns(description, lb string) bool {
	tag, owned := parseOwner(description, p.cfg.common.ClusterName)
	return owned && tag.LB == lb
}

// checkOwner refuses an object that load balancer lb needs but does not own.
func (p *provider) checkOwner(kind, name, description, lb string, needed bool) error {
	if !needed || p.owns(description, lb) {
		return nil
	}
	return fmt.Errorf("%s %s exists and is not owned by load balancer %s of cluster %s: not modifying it",
		kind, fullPath(p.cfg.Partition, name), lb, p.cfg.common.ClusterName)
}

// chooseVIP picks the VIP: the requested one, else the one the load
// balancer's virtuals have, else a free one from vipPool. When the virtuals
// disagree (one was moved by hand), the address chosen before wins if one of
// them has it, else the address most of them have, the lowest on a tie.
func (p *provider) chooseVIP(lb string, requested netip.Addr, virtuals map[string]*virtualState) (netip.Addr, error) {
	count := map[netip.Addr]int{}
	for _, v := range virtuals {
		if a, _, err := parseEndpoint(v.Destination); err == nil {
			count[a]++
		}
	}
	var current netip.Addr
	if prev, found := p.inv.reservation(lb); found && count[prev] > 0 {
		current = prev
	} else {
		for a, n := range count {
			if !current.IsValid() || n > count[current] || (n == count[current] && a.Less(current)) {
				current = a
			}
		}
	}
	return p.inv.chooseVIP(lb, requested, current, p.cfg.common.VIPPool)
}

func (p *provider) getPool(ctx context.Context, name string) (*poolState, error) {
	var pl poolState
	err := p.api.do(ctx, http.MethodGet, objectPath("ltm/pool", p.cfg.Partition, name)+"?expandSubcollections=true", nil, &pl)
	if isNotFound(err) {
		p.inv.removePool(name)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pool %s: %w", fullPath(p.cfg.Partition, name), err)
	}
	return &pl, nil
}

func (p *provider) getVirtual(ctx context.Context, name string) (*virtualState, error) {
	var v virtualState
	err := p.api.do(ctx, http.MethodGet, objectPath("ltm/virtual", p.cfg.Partition, name)+"?expandSubcollections=true", nil, &v)
	if isNotFound(err) {
		p.inv.removeVirtual(name)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read virtual server %s: %w", fullPath(p.cfg.Partition, name), err)
	}
	return &v, nil
}

// syncPool creates the pool of listener l, or rewrites what differs in cur:
// the members, all of them in one replace-all PUT, as go-bigip's
// UpdatePoolMembers does, with the monitor and description when they differ.
func (p *provider) syncPool(ctx context.Context, tag ownerTag, l listenerPlan, cur *poolState) error {
	log := klog.FromContext(ctx)
	fp := fullPath(p.cfg.Partition, l.name)
	desc := tag.String()
	if cur == nil {
		err := p.api.do(ctx, http.MethodPost, "ltm/pool", poolCreate{
			Name: l.name, Partition: p.cfg.Partition, Description: desc, Monitor: l.monitor, Members: l.members,
		}, nil)
		if err == nil {
			p.inv.setPool(l.name, tag.LB)
			log.V(2).Info("Created pool", "pool", fp, "members", len(l.members))
			return nil
		}
		if !isConflict(err) {
			return fmt.Errorf("create pool %s: %w", fp, err)
		}
		// It was created since the inventory was read: compare with it.
		if cur, err = p.getPool(ctx, l.name); err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("create pool %s: BIG-IP says it exists but cannot read it", fp)
		}
		if err := p.checkOwner("pool", l.name, cur.Description, tag.LB, true); err != nil {
			return err
		}
	}
	p.inv.setPool(l.name, tag.LB)
	body := map[string]any{}
	if strings.TrimSpace(cur.Monitor) != l.monitor {
		body["monitor"] = l.monitor
	}
	if cur.Description != desc {
		body["description"] = desc
	}
	if !sameMembers(cur.MembersReference.Items, l.members) {
		body["members"] = l.members
	}
	if len(body) == 0 {
		return nil
	}
	if err := p.api.do(ctx, http.MethodPut, objectPath("ltm/pool", p.cfg.Partition, l.name), body, nil); err != nil {
		return fmt.Errorf("update pool %s: %w", fp, err)
	}
	log.V(2).Info("Updated pool", "pool", fp, "members", len(l.members), "fields", slices.Sorted(maps.Keys(body)))
	return nil
}

// sameMembers compares members as sets of (partition, name, enabled).
func sameMembers(have []memberState, want []memberBody) bool {
	if len(have) != len(want) {
		return false
	}
	enabled := make(map[string]bool, len(want))
	for _, m := range want {
		enabled[m.Partition+"/"+m.Name] = m.Session == sessionEnabled
	}
	for _, m := range have {
		e, found := enabled[m.Partition+"/"+m.Name]
		if !found || e != (m.Session != sessionDisabled) {
			return false
		}
	}
	return true
}

// syncVirtual creates the virtual server of listener l, or patches the
// fields of cur that differ.
func (p *provider) syncVirtual(ctx context.Context, tag ownerTag, l listenerPlan, vip netip.Addr, cur *virtualState) error {
	log := klog.FromContext(ctx)
	fp := fullPath(p.cfg.Partition, l.name)
	desc := tag.String()
	dest := fullPath(p.cfg.Partition, memberName(vip, l.port))
	pool := fullPath(p.cfg.Partition, l.name)
	profile := "/" + commonPartitionName + "/" + l.profile
	if cur == nil {
		err := p.api.do(ctx, http.MethodPost, "ltm/virtual", virtualCreate{
			Name: l.name, Partition: p.cfg.Partition, Description: desc, Destination: dest, IPProtocol: l.ipProtocol,
			Pool: pool, SourceAddressTranslation: addressTranslation{Type: automap},
			Profiles: []profileRef{{Name: l.profile, Partition: commonPartitionName, Context: "all"}},
		}, nil)
		if err == nil {
			p.inv.setVirtual(l.name, tag.LB, vip)
			log.V(2).Info("Created virtual server", "virtual", fp, "destination", dest)
			return nil
		}
		if !isConflict(err) {
			return fmt.Errorf("create virtual server %s: %w", fp, err)
		}
		if cur, err = p.getVirtual(ctx, l.name); err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("create virtual server %s: BIG-IP says it exists but cannot read it", fp)
		}
		if err := p.checkOwner("virtual server", l.name, cur.Description, tag.LB, true); err != nil {
			return err
		}
	}
	body := map[string]any{}
	if cur.Destination != dest {
		body["destination"] = dest
	}
	if cur.IPProtocol != l.ipProtocol {
		body["ipProtocol"] = l.ipProtocol
	}
	if cur.Pool != pool {
		body["pool"] = pool
	}
	if cur.SourceAddressTranslation.Type != automap {
		body["sourceAddressTranslation"] = addressTranslation{Type: automap}
	}
	if cur.Description != desc {
		body["description"] = desc
	}
	if !sameProfiles(cur.ProfilesReference.Items, profile) {
		body["profiles"] = []profileRef{{Name: l.profile, Partition: commonPartitionName, Context: "all"}}
	}
	if len(body) > 0 {
		if err := p.api.do(ctx, http.MethodPatch, objectPath("ltm/virtual", p.cfg.Partition, l.name), body, nil); err != nil {
			return fmt.Errorf("update virtual server %s: %w", fp, err)
		}
		log.V(2).Info("Updated virtual server", "virtual", fp, "fields", slices.Sorted(maps.Keys(body)))
	}
	p.inv.setVirtual(l.name, tag.LB, vip)
	return nil
}

const commonPartitionName = "Common"

func sameProfiles(have []profileRef, want string) bool {
	if len(have) != 1 {
		return false
	}
	fp := have[0].FullPath
	if fp == "" {
		fp = fullPath(have[0].Partition, have[0].Name)
	}
	return fp == want
}

func (p *provider) deleteVirtual(ctx context.Context, name string) error {
	err := p.api.do(ctx, http.MethodDelete, objectPath("ltm/virtual", p.cfg.Partition, name), nil, nil)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete virtual server %s: %w", fullPath(p.cfg.Partition, name), err)
	}
	p.inv.removeVirtual(name)
	klog.FromContext(ctx).V(2).Info("Deleted virtual server", "virtual", fullPath(p.cfg.Partition, name))
	return nil
}

func (p *provider) deletePool(ctx context.Context, name string) error {
	err := p.api.do(ctx, http.MethodDelete, objectPath("ltm/pool", p.cfg.Partition, name), nil, nil)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete pool %s: %w", fullPath(p.cfg.Partition, name), err)
	}
	p.inv.removePool(name)
	klog.FromContext(ctx).V(2).Info("Deleted pool", "pool", fullPath(p.cfg.Partition, name))
	return nil
}

// Delete removes the virtual servers, then the pools, of load balancer name.
// Objects already gone count as deleted.
func (p *provider) Delete(ctx context.Context, name string, kind providers.Kind) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("lb", name))
	exists, err := p.partitionExists(ctx)
	if err != nil {
		return fmt.Errorf("delete load balancer %s: %w", name, err)
	}
	if !exists {
		return nil
	}
	if err := p.loadInventory(ctx); err != nil {
		return fmt.Errorf("delete load balancer %s: %w", name, err)
	}
	if kind == providers.L7 {
		if err := p.deleteL7(ctx, name); err != nil {
			return fmt.Errorf("delete load balancer %s: %w", name, err)
		}
		p.inv.forget(name)
		return nil
	}
	virtuals, pools := p.inv.objectsOf(name)
	for _, v := range virtuals {
		if err := p.deleteVirtual(ctx, v); err != nil {
			return fmt.Errorf("delete load balancer %s: %w", name, err)
		}
	}
	for _, pl := range pools {
		if err := p.deletePool(ctx, pl); err != nil {
			return fmt.Errorf("delete load balancer %s: %w", name, err)
		}
	}
	p.inv.forget(name)
	return nil
}

// List reads the partition and returns this cluster's load balancers, with
// the members the BIG-IP has. It also refreshes the inventory.
func (p *provider) List(ctx context.Context) ([]providers.LoadBalancer, error) {
	exists, err := p.partitionExists(ctx)
	if err != nil {
		return nil, fmt.Errorf("list load balancers: %w", err)
	}
	if !exists {
		return nil, nil
	}
	virtuals, pools, err := p.readPartition(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("list load balancers: %w", err)
	}
	cluster := p.cfg.common.ClusterName
	byLB := map[string]*providers.LoadBalancer{}
	get := func(tag ownerTag) *providers.LoadBalancer {
		lb := byLB[tag.LB]
		if lb == nil {
			lb = &providers.LoadBalancer{Name: tag.LB, Service: tag.Service, Listeners: []providers.Listener{}}
			byLB[tag.LB] = lb
		}
		markL7(lb, tag)
		return lb
	}
	owned := map[string]*poolState{}
	for i := range pools {
		if tag, ok := parseOwner(pools[i].Description, cluster); ok {
			owned[fullPath(pools[i].Partition, pools[i].Name)] = &pools[i]
			lb := get(tag)
			if tag.L7 {
				lb.Pools = append(lb.Pools, providers.Pool{Name: pools[i].Name, Members: listMembers(pools[i].MembersReference.Items)})
			}
		}
	}
	for _, v := range virtuals {
		tag, ok := parseOwner(v.Description, cluster)
		if !ok {
			continue
		}
		lb := get(tag)
		vip, port, err := parseEndpoint(v.Destination)
		if err != nil {
			klog.FromContext(ctx).Info("Skipping a virtual server with a destination that does not parse", "virtual", v.FullPath, "destination", v.Destination)
			continue
		}
		if !slices.Contains(lb.VIPs, vip.String()) {
			lb.VIPs = append(lb.VIPs, vip.String())
		}
		poolName := v.Pool[strings.LastIndexByte(v.Pool, '/')+1:]
		if tag.L7 {
			proto := providers.HTTP
			if v.Name == providers.ListenerName(tag.LB, providers.HTTPS, port) {
				proto = providers.HTTPS
			}
			lb.Listeners = append(lb.Listeners, providers.Listener{Port: port, Protocol: proto})
			if poolName != "" && poolName != "none" {
				lb.HTTP.DefaultPool = poolName
			}
			continue
		}
		pool := providers.Pool{Name: poolName, Members: []providers.Member{}}
		if pl := owned[v.Pool]; pl != nil {
			pool.Members = listMembers(pl.MembersReference.Items)
		}
		lb.Listeners = append(lb.Listeners, providers.Listener{Port: port, Protocol: providers.Protocol(strings.ToUpper(v.IPProtocol)), Pool: pool})
	}
	if err := p.listL7(ctx, byLB); err != nil {
		return nil, fmt.Errorf("list load balancers: %w", err)
	}
	out := make([]providers.LoadBalancer, 0, len(byLB))
	for _, name := range sortedKeys(byLB) {
		lb := byLB[name]
		providers.SortListeners(lb.Listeners)
		slices.SortFunc(lb.VIPs, func(a, b string) int {
			x, _ := netip.ParseAddr(a)
			y, _ := netip.ParseAddr(b)
			return x.Compare(y)
		})
		out = append(out, *lb)
	}
	return out, nil
}

func listMembers(items []memberState) []providers.Member {
	members := make([]providers.Member, 0, len(items))
	for _, m := range items {
		ip, port, err := parseEndpoint(m.Name)
		if err != nil {
			continue
		}
		members = append(members, providers.Member{IP: ip.String(), Port: port, Enabled: m.Session != sessionDisabled})
	}
	return providers.SortMembers(members)
}

// readPartition lists the virtuals and pools of the partition (with their
// members when withMembers) and reloads the inventory from them.
func (p *provider) readPartition(ctx context.Context, withMembers bool) ([]virtualState, []poolState, error) {
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	return p.readPartitionLocked(ctx, withMembers)
}

func (p *provider) readPartitionLocked(ctx context.Context, withMembers bool) ([]virtualState, []poolState, error) {
	filter := "$filter=partition+eq+" + p.cfg.Partition
	var vs collectionOf[virtualState]
	if err := p.api.do(ctx, http.MethodGet, "ltm/virtual?"+filter, nil, &vs); err != nil {
		return nil, nil, fmt.Errorf("list virtual servers of partition %s: %w", p.cfg.Partition, err)
	}
	query := filter
	if withMembers {
		query = "expandSubcollections=true&" + filter
	}
	var ps collectionOf[poolState]
	if err := p.api.do(ctx, http.MethodGet, "ltm/pool?"+query, nil, &ps); err != nil {
		return nil, nil, fmt.Errorf("list pools of partition %s: %w", p.cfg.Partition, err)
	}
	// Keep only this partition in case the BIG-IP ignored the filter.
	vs.Items = slices.DeleteFunc(vs.Items, func(v virtualState) bool { return v.Partition != p.cfg.Partition })
	ps.Items = slices.DeleteFunc(ps.Items, func(pl poolState) bool { return pl.Partition != p.cfg.Partition })
	p.inv.reset(p.cfg.common.ClusterName, vs.Items, ps.Items)
	return vs.Items, ps.Items, nil
}

// loadInventory reads the partition once, on the first call that needs it.
func (p *provider) loadInventory(ctx context.Context) error {
	if p.inv.isLoaded() {
		return nil
	}
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	if p.inv.isLoaded() {
		return nil
	}
	_, _, err := p.readPartitionLocked(ctx, false)
	return err
}

// partitionExists reports whether the partition exists; once it does, the
// answer is remembered.
func (p *provider) partitionExists(ctx context.Context) (bool, error) {
	if p.partitionReady.Load() {
		return true, nil
	}
	err := p.api.do(ctx, http.MethodGet, "auth/partition/"+p.cfg.Partition, nil, nil)
	switch {
	case err == nil:
		p.partitionReady.Store(true)
		return true, nil
	case isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("read partition %s: %w", p.cfg.Partition, err)
}

// ensurePartition creates the partition when it is missing and the
// configuration allows it.
func (p *provider) ensurePartition(ctx context.Context) error {
	if p.partitionReady.Load() {
		return nil
	}
	p.partitionMu.Lock()
	defer p.partitionMu.Unlock()
	exists, err := p.partitionExists(ctx)
	if err != nil || exists {
		return err
	}
	if !p.cfg.CreatePartition {
		return fmt.Errorf("partition %s does not exist and createPartition is false", p.cfg.Partition)
	}
	body := map[string]any{
		"name":               p.cfg.Partition,
		"defaultRouteDomain": 0,
		"description":        fmt.Sprintf(`{"owner":%q,"cluster":%q}`, ownerName, p.cfg.common.ClusterName),
	}
	err = p.api.do(ctx, http.MethodPost, "auth/partition", body, nil)
	switch {
	case err == nil:
		klog.FromContext(ctx).Info("Created BIG-IP partition", "partition", p.cfg.Partition)
	case !isConflict(err):
		return fmt.Errorf("create partition %s: %w", p.cfg.Partition, err)
	}
	p.partitionReady.Store(true)
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
