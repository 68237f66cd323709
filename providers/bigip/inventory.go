package bigip

import (
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/nodeportlocal/npl/providers/vippool"
)

// inventory is what the provider remembers of its partition between calls:
// the pools and virtuals that exist (of any owner), the load balancer of the
// ones this cluster owns, and the VIP of every virtual. It lets Ensure create
// new objects without reading them first, find the objects of removed
// listeners, and choose free VIPs. The BIG-IP stays the truth: Ensure reads
// every existing object before it changes it, a create that meets an object
// (409) reads it, and List reloads the whole inventory.
type inventory struct {
	mu       sync.Mutex
	loaded   bool
	pools    map[string]string       // pool name -> owning load balancer, "" if not ours
	virtuals map[string]virtualEntry // virtual name -> owner and VIP
	reserved map[string]netip.Addr   // load balancer -> VIP this process chose for it
	// users counts, per address, the virtuals and reservations that use it,
	// so that choosing a VIP does not scan every virtual.
	users map[netip.Addr]int
	// byLB indexes the names of owned objects by load balancer.
	byLB map[string]*lbObjects
}

type lbObjects struct {
	virtuals map[string]bool
	pools    map[string]bool
}

func (inv *inventory) objectsLocked(lb string) *lbObjects {
	o := inv.byLB[lb]
	if o == nil {
		o = &lbObjects{virtuals: map[string]bool{}, pools: map[string]bool{}}
		inv.byLB[lb] = o
	}
	return o
}

// dropEmpty forgets the index entry of a load balancer with no objects left.
func (inv *inventory) dropEmpty(lb string) {
	if o := inv.byLB[lb]; o != nil && len(o.virtuals) == 0 && len(o.pools) == 0 {
		delete(inv.byLB, lb)
	}
}

type virtualEntry struct {
	lb  string // "" if not ours
	vip netip.Addr
}

func newInventory() *inventory {
	return &inventory{
		pools: map[string]string{}, virtuals: map[string]virtualEntry{}, reserved: map[string]netip.Addr{},
		users: map[netip.Addr]int{}, byLB: map[string]*lbObjects{},
	}
}

func (inv *inventory) isLoaded() bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.loaded
}

// reset replaces what the inventory knows with a fresh read of the
// partition. VIP reservations stay: they cover Ensure calls in flight.
func (inv *inventory) reset(cluster string, virtuals []virtualState, pools []poolState) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.loaded = true
	inv.byLB = map[string]*lbObjects{}
	inv.pools = make(map[string]string, len(pools))
	for _, p := range pools {
		tag, owned := parseOwner(p.Description, cluster)
		if !owned {
			tag.LB = ""
		}
		inv.setPoolLocked(p.Name, tag.LB)
	}
	inv.virtuals = make(map[string]virtualEntry, len(virtuals))
	inv.users = map[netip.Addr]int{}
	for _, a := range inv.reserved {
		inv.users[a]++
	}
	for _, v := range virtuals {
		tag, owned := parseOwner(v.Description, cluster)
		if !owned {
			tag.LB = ""
		}
		vip, _, _ := parseEndpoint(v.Destination)
		inv.setVirtualLocked(v.Name, virtualEntry{lb: tag.LB, vip: vip})
	}
}

// setVirtualLocked records a virtual, keeping users in step.
func (inv *inventory) setVirtualLocked(name string, e virtualEntry) {
	inv.removeVirtualLocked(name)
	inv.virtuals[name] = e
	if e.vip.IsValid() {
		inv.users[e.vip]++
	}
	if e.lb != "" {
		inv.objectsLocked(e.lb).virtuals[name] = true
	}
}

func (inv *inventory) removeVirtualLocked(name string) {
	old, found := inv.virtuals[name]
	if !found {
		return
	}
	delete(inv.virtuals, name)
	if old.vip.IsValid() {
		inv.release(old.vip)
	}
	if o := inv.byLB[old.lb]; o != nil {
		delete(o.virtuals, name)
		inv.dropEmpty(old.lb)
	}
}

func (inv *inventory) setPoolLocked(name, lb string) {
	inv.removePoolLocked(name)
	inv.pools[name] = lb
	if lb != "" {
		inv.objectsLocked(lb).pools[name] = true
	}
}

func (inv *inventory) removePoolLocked(name string) {
	old, found := inv.pools[name]
	if !found {
		return
	}
	delete(inv.pools, name)
	if o := inv.byLB[old]; o != nil {
		delete(o.pools, name)
		inv.dropEmpty(old)
	}
}

func (inv *inventory) release(a netip.Addr) {
	if inv.users[a]--; inv.users[a] <= 0 {
		delete(inv.users, a)
	}
}

// reserveLocked records that lb uses address a.
func (inv *inventory) reserveLocked(lb string, a netip.Addr) {
	if old, found := inv.reserved[lb]; found {
		inv.release(old)
	}
	inv.reserved[lb] = a
	inv.users[a]++
}

// objectsOf returns the names of the virtuals and pools of load balancer lb.
func (inv *inventory) objectsOf(lb string) (virtuals, pools []string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	o := inv.byLB[lb]
	if o == nil {
		return nil, nil
	}
	return slices.Sorted(maps.Keys(o.virtuals)), slices.Sorted(maps.Keys(o.pools))
}

func (inv *inventory) hasPool(name string) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	_, found := inv.pools[name]
	return found
}

func (inv *inventory) hasVirtual(name string) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	_, found := inv.virtuals[name]
	return found
}

func (inv *inventory) setPool(name, lb string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.setPoolLocked(name, lb)
}

func (inv *inventory) removePool(name string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.removePoolLocked(name)
}

func (inv *inventory) setVirtual(name, lb string, vip netip.Addr) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.setVirtualLocked(name, virtualEntry{lb: lb, vip: vip})
}

func (inv *inventory) removeVirtual(name string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.removeVirtualLocked(name)
}

// reservation returns the VIP chosen for lb before, if any.
func (inv *inventory) reservation(lb string) (netip.Addr, bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	a, found := inv.reserved[lb]
	return a, found
}

// forget drops the VIP reservation of a deleted load balancer.
func (inv *inventory) forget(lb string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if old, found := inv.reserved[lb]; found {
		inv.release(old)
		delete(inv.reserved, lb)
	}
}

// chooseVIP returns the VIP of load balancer lb: the requested address, else
// the one its virtuals already use, else the one chosen for it before, else
// the first address of ranges that no virtual of the partition uses and no
// other load balancer holds. The choice is reserved at once, so concurrent
// Ensure calls never pick the same address.
func (inv *inventory) chooseVIP(lb string, requested, current netip.Addr, ranges []netip.Prefix) (netip.Addr, error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	switch {
	case requested.IsValid():
		inv.reserveLocked(lb, requested)
		return requested, nil
	case current.IsValid():
		inv.reserveLocked(lb, current)
		return current, nil
	}
	if a, found := inv.reserved[lb]; found {
		return a, nil
	}
	a, err := vippool.First(ranges, func(a netip.Addr) bool { return inv.users[a] > 0 })
	if err != nil {
		return netip.Addr{}, err
	}
	inv.reserveLocked(lb, a)
	return a, nil
}
