// Package bigip is the F5 BIG-IP provider: it makes LTM objects in one
// partition match npl's load balancer model through iControl REST and the
// go-bigip client. Each listener becomes a pool of nodeIP:nodePort members
// (drained members are user-disabled) and a virtual server on the load
// balancer's VIP. Every object carries an ownership tag in its description,
// so the provider changes and deletes only its cluster's objects. An L7 load
// balancer (an Ingress's or a Gateway's) is pools, LTM policies whose rules
// match requests and forward them to pools, client-ssl profiles with their
// certificates and keys, and one virtual server per listener with the http
// profile (see l7.go and docs/bigip.md); what its objects cannot express
// exactly is refused (served.go).
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

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

type provider struct {
	cfg *Config
	api *client
	inv *inventory

	loadMu         sync.Mutex // serialises reads of the whole partition
	partitionMu    sync.Mutex // serialises the creation of the partition
	partitionReady atomic.Bool

	// holds and sweepDue guard and schedule the deletion of the monitors
	// and persistence profiles nothing uses any more (policyobjects.go).
	holds    providers.Holds
	sweepDue atomic.Bool
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
	lbMode     string // loadBalancingMode: ratioMember when a member has a weight
	members    []memberBody
	// policy is what the pool's traffic policy sets.
	policy poolPolicy
}

// plan turns a desired load balancer, a model that passed
// lbmodel.Normalize (the registry opens the provider behind
// providers.Validated), into BIG-IP objects; it checks what only BIG-IP
// requires (names).
// The monitors and persistence profiles of the pools' policies go into
// objs.
func (p *provider) plan(lb *lbmodel.LoadBalancer, objs *policyObjects) ([]listenerPlan, netip.Addr, error) {
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
		pp := p.poolPolicy(objs, l.Pool, monitor)
		if pp.persist != nil {
			objs.add(*pp.persist)
		}
		plans = append(plans, listenerPlan{name: l.Pool.Name, port: l.Port, ipProtocol: ipProtocol, monitor: pp.monitor,
			profile: profile, lbMode: pp.lbMode(l.Pool.Members), members: members, policy: pp})
	}
	return plans, requested, nil
}

// memberBodies spells the members of a pool as BIG-IP does.
func (p *provider) memberBodies(pool string, members []lbmodel.Member) ([]memberBody, error) {
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
		out = append(out, memberBody{Name: memberName(ip.Unmap(), m.Port), Partition: p.cfg.Partition, Session: session,
			Ratio: max(m.Weight, 1)})
	}
	return out, nil
}

// Ensure makes the pools and virtual servers of lb match it, writing only
// what differs: a membership change is one write, no change is no write.
// Pools are written before the virtuals that use them; the virtuals of
// removed listeners are deleted before their pools.
func (p *provider) Ensure(ctx context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
	// Nothing is written of a model it cannot express whole.
	if err := served(lb); err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: BIG-IP: %w", lb.Name, err)
	}
	if lb.IsL7() {
		return p.ensureL7(ctx, lb)
	}
	var objs policyObjects
	plans, requested, err := p.plan(lb, &objs)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("lb", lb.Name))
	tag := ownerTag{Owner: ownerName, Cluster: p.cfg.common.ClusterName, Service: lb.Service, LB: lb.Name}

	names := make([]string, 0, len(plans))
	for _, l := range plans {
		names = append(names, l.name)
	}
	virtuals, pools, err := p.readObjects(ctx, lb.Name, names, names)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	t, err := p.takeOver(ctx, lb, virtuals)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
	}
	keep := objs.names()
	p.notePolicyRefs(keep, pools, virtuals)
	defer p.holds.Hold(keep)()
	if err := p.ensureSharedObjects(ctx, &objs); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	status := providers.Status{Warnings: objs.warnings}
	if len(plans) > 0 {
		vip, err := p.chooseVIP(lb.Name, requested, t.currentVirtuals(virtuals))
		if err != nil {
			return providers.Status{}, fmt.Errorf("ensure load balancer %s: %w", lb.Name, err)
		}
		for _, l := range plans {
			if err := p.ensurePool(ctx, tag, l, pools[l.name]); err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
		for _, l := range plans {
			vtag := tag
			vtag.Persist = l.policy.persistPath != ""
			want := virtualBody{
				Description: vtag.String(), Destination: fullPath(p.cfg.Partition, memberName(vip, l.port)), IPProtocol: l.ipProtocol,
				Pool: fullPath(p.cfg.Partition, l.name), SourceAddressTranslation: addressTranslation{Type: automap},
				Profiles: []profileRef{{Name: l.profile, Partition: commonPartitionName, Context: "all"}},
				Persist:  persistOf(l.policy.persistPath, virtuals[l.name]),
			}
			if virtuals[l.name] == nil {
				err = p.createVirtual(ctx, t, tag.LB, l.name, vip, want)
			} else {
				err = p.ensureVirtual(ctx, tag.LB, l.name, vip, want, virtuals[l.name])
			}
			if err != nil {
				return providers.Status{}, p.fail(lb.Name, err)
			}
		}
		status.VIPs = []string{vip.String()}
	}
	if err := t.finish(ctx, p, false); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}

	// Virtuals go before the pools they use.
	if err := deleteUnwanted(ctx, p, &virtualKind, sortedKeys(virtuals), nameSet(names), lb.Name); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	if err := deleteUnwanted(ctx, p, &poolKind, sortedKeys(pools), nameSet(names), lb.Name); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
	}
	if err := p.sweep(ctx, keep); err != nil {
		return providers.Status{}, p.fail(lb.Name, err)
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

// readObjects makes sure the partition exists and the inventory is loaded,
// then reads the existing virtuals and pools of load balancer lb: those the
// inventory lists for it, and those it should have that exist. An object of
// another owner under a name the load balancer needs is an error: the
// provider never takes it over.
func (p *provider) readObjects(ctx context.Context, lb string, virtualNames, poolNames []string) (map[string]*virtualState, map[string]*poolState, error) {
	if err := p.ensurePartition(ctx); err != nil {
		return nil, nil, err
	}
	if err := p.loadInventory(ctx); err != nil {
		return nil, nil, err
	}
	haveVirtuals, havePools := p.inv.objectsOf(lb)
	virtuals, err := readOwned(ctx, p, &virtualKind, lb, haveVirtuals, virtualNames)
	if err != nil {
		return nil, nil, err
	}
	pools, err := readOwned(ctx, p, &poolKind, lb, havePools, poolNames)
	if err != nil {
		return nil, nil, err
	}
	return virtuals, pools, nil
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

// Delete removes the objects of load balancer name (see deleteObjectsOf).
// Objects already gone count as deleted.
func (p *provider) Delete(ctx context.Context, name string, kind lbmodel.Kind) error {
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
	if err := p.deleteObjectsOf(ctx, name, kind == lbmodel.L7); err != nil {
		return fmt.Errorf("delete load balancer %s: %w", name, err)
	}
	p.inv.forget(name)
	// The monitors and persistence profiles only its pools and virtuals
	// used, and any a failed apply left.
	p.sweepDue.Store(true)
	if err := p.sweep(ctx, nil); err != nil {
		return fmt.Errorf("delete load balancer %s: %w", name, err)
	}
	return nil
}

// deleteObjectsOf deletes the objects of load balancer lb: its virtuals,
// for an L7 one its policy and client-ssl profiles with their certificates
// and keys, then its pools.
func (p *provider) deleteObjectsOf(ctx context.Context, lb string, l7 bool) error {
	virtuals, pools := p.inv.objectsOf(lb)
	if err := deleteUnwanted(ctx, p, &virtualKind, virtuals, nil, lb); err != nil {
		return err
	}
	if l7 {
		if err := p.deletePolicies(ctx, lb, nil); err != nil {
			return err
		}
		profiles, err := listObjects(ctx, p, &clientSSLKind, false)
		if err != nil {
			return err
		}
		var owned []string
		for _, pr := range profiles {
			if p.owns(pr.Description, lb) {
				owned = append(owned, pr.Name)
			}
		}
		if err := deleteUnwanted(ctx, p, &clientSSLKind, owned, nil, lb); err != nil {
			return err
		}
	}
	return deleteUnwanted(ctx, p, &poolKind, pools, nil, lb)
}

// List reads the partition and returns this cluster's load balancers, with
// the members the BIG-IP has. It also refreshes the inventory.
func (p *provider) List(ctx context.Context) ([]lbmodel.LoadBalancer, error) {
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
	byLB := map[string]*lbmodel.LoadBalancer{}
	get := func(tag ownerTag) *lbmodel.LoadBalancer {
		lb := byLB[tag.LB]
		if lb == nil {
			lb = &lbmodel.LoadBalancer{Name: tag.LB, Service: tag.Service, Listeners: []lbmodel.Listener{}}
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
				lb.Pools = append(lb.Pools, lbmodel.Pool{Name: pools[i].Name, Members: listMembers(pools[i].MembersReference.Items),
					Policy: appliedPolicy(&pools[i])})
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
			proto := lbmodel.HTTP
			for _, pr := range []lbmodel.Protocol{lbmodel.HTTPS, lbmodel.TCP, lbmodel.UDP} {
				if v.Name == lbmodel.ListenerName(tag.LB, pr, port) {
					proto = pr
				}
			}
			if proto == lbmodel.TCP || proto == lbmodel.UDP {
				pool := lbmodel.Pool{Name: poolName, Members: []lbmodel.Member{}}
				if pl := owned[v.Pool]; pl != nil {
					pool.Members, pool.Policy = listMembers(pl.MembersReference.Items), appliedPolicy(pl)
				}
				lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: port, Protocol: proto, Pool: pool})
				continue
			}
			lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: port, Protocol: proto})
			if poolName != "" && poolName != "none" {
				lb.HTTP.DefaultPool = poolName
			}
			continue
		}
		pool := lbmodel.Pool{Name: poolName, Members: []lbmodel.Member{}}
		if pl := owned[v.Pool]; pl != nil {
			pool.Members, pool.Policy = listMembers(pl.MembersReference.Items), appliedPolicy(pl)
		}
		lb.Listeners = append(lb.Listeners, lbmodel.Listener{Port: port, Protocol: lbmodel.Protocol(strings.ToUpper(v.IPProtocol)), Pool: pool})
	}
	if err := p.listL7(ctx, byLB, get); err != nil {
		return nil, fmt.Errorf("list load balancers: %w", err)
	}
	out := make([]lbmodel.LoadBalancer, 0, len(byLB))
	for _, name := range sortedKeys(byLB) {
		lb := byLB[name]
		lbmodel.SortListeners(lb.Listeners)
		slices.SortFunc(lb.VIPs, func(a, b string) int {
			x, _ := netip.ParseAddr(a)
			y, _ := netip.ParseAddr(b)
			return x.Compare(y)
		})
		out = append(out, *lb)
	}
	return out, nil
}

// readPartition lists the virtuals and pools of the partition (with their
// members when withMembers) and reloads the inventory from them.
func (p *provider) readPartition(ctx context.Context, withMembers bool) ([]virtualState, []poolState, error) {
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	return p.readPartitionLocked(ctx, withMembers)
}

func (p *provider) readPartitionLocked(ctx context.Context, withMembers bool) ([]virtualState, []poolState, error) {
	virtuals, err := listObjects(ctx, p, &virtualKind, false)
	if err != nil {
		return nil, nil, err
	}
	pools, err := listObjects(ctx, p, &poolKind, withMembers)
	if err != nil {
		return nil, nil, err
	}
	p.inv.reset(p.cfg.common.ClusterName, virtuals, pools)
	return virtuals, pools, nil
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

// nameSet holds names.
func nameSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}
