package avi

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmware/alb-sdk/go/models"
	"github.com/vmware/alb-sdk/go/session"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/internal/secretfile"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// maxSessions bounds the SDK sessions, and so the requests in flight, that
// concurrent operations use (AKO uses eight as well).
const maxSessions = 8

// Provider makes Avi objects match load balancers. It is safe for concurrent
// use; operations on the same load balancer must not run concurrently.
type Provider struct {
	cfg     *Config
	owner   string // created_by of every object: npl-<cluster>
	base    *http.Transport
	version string

	idle chan *aviSession
	mu   sync.Mutex
	open int

	// holds and sweepDue guard and schedule the deletion of the monitors
	// and persistence profiles no pool uses any more (policyobjects.go).
	holds    providers.Holds
	sweepDue atomic.Bool
}

var _ providers.Provider = (*Provider)(nil)

// Open logs in to the controller and learns its API version unless the
// configuration sets one.
func (c *Config) Open(ctx context.Context) (providers.Provider, error) {
	return c.open(ctx)
}

func (c *Config) open(ctx context.Context) (*Provider, error) {
	prepareSDKLogging()
	log := klog.FromContext(ctx)
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pool, err := secretfile.LoadCAPool(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("avi: caFile: %w", err)
		}
		tlsConfig.RootCAs = pool
	}
	if c.InsecureSkipVerify {
		log.Info("Not verifying the Avi controller's certificate (insecureSkipVerify)", "controller", c.Controller)
		tlsConfig.InsecureSkipVerify = true
	}
	p := &Provider{
		cfg:   c,
		owner: "npl-" + c.ClusterName,
		base: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     tlsConfig,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConnsPerHost: maxSessions,
			IdleConnTimeout:     90 * time.Second,
		},
		idle: make(chan *aviSession, maxSessions),
	}
	s, err := p.newSession(ctx, c.Version)
	if err != nil {
		p.base.CloseIdleConnections()
		return nil, fmt.Errorf("avi: %w", err)
	}
	p.version = c.Version
	if p.version == "" {
		v, err := controllerVersion(ctx, s)
		if err != nil {
			p.base.CloseIdleConnections()
			return nil, fmt.Errorf("avi: read the controller version: %w", err)
		}
		p.version = v
		_ = session.SetVersion(v)(s.client.AviSession)
	}
	if err := checkVersion(p.version); err != nil {
		_ = s.client.AviSession.Logout()
		p.base.CloseIdleConnections()
		return nil, fmt.Errorf("avi: %w", err)
	}
	p.open = 1
	p.idle <- s
	log.Info("Connected to the Avi controller", "controller", c.Controller, "version", p.version, "tenant", c.Tenant)
	return p, nil
}

// minVersion is the oldest API version the provider speaks: every object
// carries markers, a field introduced in 20.1.5 (swagger of the pinned
// alb-sdk); a controller refuses fields newer than the X-Avi-Version of a
// request.
const minVersion = "20.1.5"

// checkVersion refuses an API version older than minVersion.
func checkVersion(v string) error {
	have, ok := parseVersion(v)
	if !ok {
		return fmt.Errorf("API version %q is not major.minor.patch", v)
	}
	want, _ := parseVersion(minVersion)
	if slices.Compare(have[:], want[:]) < 0 {
		return fmt.Errorf("API version %s is older than %s, the first with the markers npl puts on every object", v, minVersion)
	}
	return nil
}

// parseVersion reads "22.1.3" (more parts, as in 18.2.10.1, are ignored).
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	parts := strings.Split(v, ".")
	if len(parts) < 3 {
		return out, false
	}
	for i := range out {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

func controllerVersion(ctx context.Context, s *aviSession) (version string, err error) {
	defer s.auth.bind(ctx)()
	err = s.call(func(sess *session.AviSession) (err error) {
		// GetControllerVersion panics on an answer without a version.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("unexpected /api/initial-data answer: %v", r)
			}
		}()
		version, err = sess.GetControllerVersion()
		return err
	})
	return version, err
}

// acquire takes an idle session, logs a new one in while there are fewer
// than maxSessions, or waits for one.
func (p *Provider) acquire(ctx context.Context) (*aviSession, error) {
	select {
	case s := <-p.idle:
		return s, nil
	default:
	}
	p.mu.Lock()
	if p.open < maxSessions {
		p.open++
		p.mu.Unlock()
		s, err := p.newSession(ctx, p.version)
		if err != nil {
			p.mu.Lock()
			p.open--
			p.mu.Unlock()
			return nil, err
		}
		return s, nil
	}
	p.mu.Unlock()
	select {
	case s := <-p.idle:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *Provider) release(s *aviSession) { p.idle <- s }

// session takes a session for one operation (acquire) and binds ctx to its
// requests; done unbinds it and gives it back.
func (p *Provider) session(ctx context.Context) (s *aviSession, done func(), err error) {
	if s, err = p.acquire(ctx); err != nil {
		return nil, nil, err
	}
	unbind := s.auth.bind(ctx)
	return s, func() { unbind(); p.release(s) }, nil
}

// Close logs the idle sessions out and closes idle connections.
func (p *Provider) Close() error {
	for {
		select {
		case s := <-p.idle:
			_ = s.client.AviSession.Logout()
			p.mu.Lock()
			p.open--
			p.mu.Unlock()
		default:
			p.base.CloseIdleConnections()
			return nil
		}
	}
}

// objKind tells the generic write path how to handle one object type.
type objKind[T any] struct {
	typ string
	// meta points at the uuid and _last_modified fields.
	meta func(*T) (uuid, lastModified **string)
	// owner is who an object says it belongs to: created_by, or for a
	// VsVip (which has no created_by) the cluster marker. Empty when unmarked.
	owner func(*T) string
	// byMarker says owner is the cluster name rather than created_by.
	byMarker bool
}

var (
	poolKind = objKind[models.Pool]{
		typ:   "pool",
		meta:  func(o *models.Pool) (**string, **string) { return &o.UUID, &o.LastModified },
		owner: func(o *models.Pool) string { return deref(o.CreatedBy) },
	}
	vsvipKind = objKind[models.VsVip]{
		typ:      "vsvip",
		meta:     func(o *models.VsVip) (**string, **string) { return &o.UUID, &o.LastModified },
		owner:    func(o *models.VsVip) string { return markersOf(o.Markers).Cluster },
		byMarker: true,
	}
	policyKind = objKind[models.L4PolicySet]{
		typ:   "l4policyset",
		meta:  func(o *models.L4PolicySet) (**string, **string) { return &o.UUID, &o.LastModified },
		owner: func(o *models.L4PolicySet) string { return deref(o.CreatedBy) },
	}
	vsKind = objKind[models.VirtualService]{
		typ:   "virtualservice",
		meta:  func(o *models.VirtualService) (**string, **string) { return &o.UUID, &o.LastModified },
		owner: func(o *models.VirtualService) string { return deref(o.CreatedBy) },
	}
)

// adoptable checks that an object found by name may be taken over: it is
// ours, or unmarked (made by hand or by an older version, with a name in the
// cluster's prefix). Another owner's object is never touched.
func adoptable[T any](p *Provider, k objKind[T], o *T) error {
	want := p.owner
	if k.byMarker {
		want = p.cfg.ClusterName
	}
	if got := k.owner(o); got != "" && got != want {
		return fmt.Errorf("%s exists and belongs to %q, not %q", k.typ, got, want)
	}
	return nil
}

// apply makes the object name match what build returns: no call when cur is
// in sync, an update of cur, or a create. A create answered 409 (the object
// exists but was not seen) reads it by name and updates it; an update
// answered 412 (changed since read) reads it again and retries once.
func apply[T any](s *aviSession, p *Provider, log klog.Logger, k objKind[T], name string, cur *T,
	build func(cur *T) *T, synced func(*T) bool) (*T, error) {
	if cur != nil && synced(cur) {
		return cur, nil
	}
	if cur == nil {
		out, err := create(s, k.typ, build(nil))
		if err == nil {
			log.V(2).Info("Created Avi object", "type", k.typ, "name", name)
			return out, nil
		}
		if statusOf(err) != http.StatusConflict {
			return nil, fmt.Errorf("ensure %s %s: %w", k.typ, name, err)
		}
		found, gerr := getByName[T](s, k.typ, name, nil)
		if gerr != nil {
			return nil, fmt.Errorf("ensure %s %s: %w", k.typ, name, gerr)
		}
		if found == nil {
			return nil, fmt.Errorf("ensure %s %s: %w", k.typ, name, err)
		}
		if err := adoptable(p, k, found); err != nil {
			return nil, fmt.Errorf("ensure %s %s: %w", k.typ, name, err)
		}
		if synced(found) {
			return found, nil
		}
		cur = found
	}
	for attempt := 0; ; attempt++ {
		uuidField, lmField := k.meta(cur)
		uuid, lastModified := deref(*uuidField), *lmField
		obj := build(cur)
		objUUID, objLM := k.meta(obj)
		*objUUID, *objLM = &uuid, lastModified
		out, err := update(s, k.typ, uuid, obj)
		if err == nil {
			log.V(2).Info("Updated Avi object", "type", k.typ, "name", name)
			return out, nil
		}
		if statusOf(err) != http.StatusPreconditionFailed || attempt > 0 {
			return nil, fmt.Errorf("ensure %s %s: %w", k.typ, name, err)
		}
		if cur, err = getUUID[T](s, k.typ, uuid); err != nil {
			return nil, fmt.Errorf("ensure %s %s: %w", k.typ, name, err)
		}
		if synced(cur) {
			return cur, nil
		}
	}
}

// current is what the controller holds for one load balancer.
type current struct {
	vsvip  *models.VsVip
	policy *models.L4PolicySet
	vs     *models.VirtualService
	// pools are ours and wanted, by name; stale are ours but no longer
	// wanted (a removed listener or a changed protocol).
	pools map[string]*models.Pool
	stale []*models.Pool
}

// read fetches the objects of the load balancer name in four reads.
func (p *Provider) read(s *aviSession, name string, wanted map[string]bool) (*current, error) {
	ours := url.Values{"created_by": {p.owner}}
	cur := &current{pools: map[string]*models.Pool{}}
	var err error
	if cur.vs, err = getByName[models.VirtualService](s, vsKind.typ, name, ours); err != nil {
		return nil, fmt.Errorf("read virtualservice %s: %w", name, err)
	}
	if cur.policy, err = getByName[models.L4PolicySet](s, policyKind.typ, name, ours); err != nil {
		return nil, fmt.Errorf("read l4policyset %s: %w", name, err)
	}
	if cur.vsvip, err = getByName[models.VsVip](s, vsvipKind.typ, name, nil); err != nil {
		return nil, fmt.Errorf("read vsvip %s: %w", name, err)
	}
	pools, err := list[models.Pool](s, poolKind.typ, url.Values{"name.contains": {name + "-"}, "created_by": {p.owner}})
	if err != nil {
		return nil, fmt.Errorf("read pools of %s: %w", name, err)
	}
	referenced := map[string]bool{}
	if cur.policy != nil {
		for _, r := range rulesOf(cur.policy) {
			referenced[r.Pool] = true
		}
	}
	pattern := poolNamePattern(name)
	for _, o := range pools {
		n := deref(o.Name)
		switch {
		case wanted[n]:
			cur.pools[n] = o
		case referenced[n] || pattern.MatchString(n):
			cur.stale = append(cur.stale, o)
		}
	}
	// A shortened pool name need not contain the load balancer's name.
	for n := range wanted {
		if cur.pools[n] != nil || strings.Contains(n, name+"-") {
			continue
		}
		o, err := getByName[models.Pool](s, poolKind.typ, n, ours)
		if err != nil {
			return nil, fmt.Errorf("read pool %s: %w", n, err)
		}
		if o != nil {
			cur.pools[n] = o
		}
	}
	return cur, nil
}

// Ensure makes the controller's objects match lb (ensureL4, ensureL7).
// Objects already in sync cost no write, so a membership change is one PUT
// of a pool. An error leaves everything else as it was; calling again
// converges.
func (p *Provider) Ensure(ctx context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
	// Nothing is written of a model it cannot express whole, and the plan
	// makes no call: a model refused costs no session.
	if err := supported(lb); err != nil {
		return providers.Status{}, fmt.Errorf("ensure %s: Avi: %w", lb.Name, err)
	}
	var ensure func(*aviSession, klog.Logger) (providers.Status, error)
	if lb.IsL7() {
		want, err := p.planL7(lb)
		if err != nil {
			return providers.Status{}, fmt.Errorf("ensure %s: %w", lb.Name, err)
		}
		ensure = func(s *aviSession, log klog.Logger) (providers.Status, error) { return p.ensureL7(s, log, lb, want) }
	} else {
		want, err := p.plan(lb)
		if err != nil {
			return providers.Status{}, fmt.Errorf("ensure %s: %w", lb.Name, err)
		}
		ensure = func(s *aviSession, log klog.Logger) (providers.Status, error) { return p.ensureL4(s, log, lb, want) }
	}
	s, done, err := p.session(ctx)
	if err != nil {
		return providers.Status{}, fmt.Errorf("ensure %s: %w", lb.Name, err)
	}
	defer done()
	return ensure(s, klog.FromContext(ctx).WithValues("loadBalancer", lb.Name))
}

// ensureL4 makes the objects of L4 load balancer lb match want: VsVip, then
// pools, policy set and virtual service, then it deletes pools no longer
// wanted. Those of its old name are taken over (takeOverL4).
func (p *Provider) ensureL4(s *aviSession, log klog.Logger, lb *lbmodel.LoadBalancer, want *layout) (providers.Status, error) {
	cur, err := p.read(s, want.name, want.poolNames())
	if err != nil {
		return providers.Status{}, err
	}
	if err := p.takeOverL4(s, log, lb, want, cur); err != nil {
		return providers.Status{}, err
	}
	keep := want.objects.names()
	p.notePolicyRefs(keep, slices.Collect(maps.Values(cur.pools))...)
	p.notePolicyRefs(keep, cur.stale...)
	defer p.holds.Hold(keep)()

	if addressMoves(want.vsvip, cur.vsvip) {
		if err := p.dropVsVip(s, log, cur.vsvip, cur.vs); err != nil {
			return providers.Status{}, err
		}
		cur.vsvip, cur.vs = nil, nil
	}
	vsvip, err := p.applyVsVip(s, log, want.vsvip, cur.vsvip)
	if err != nil {
		return providers.Status{}, err
	}
	if err := p.ensurePolicyObjects(s, log, &want.objects); err != nil {
		return providers.Status{}, err
	}
	poolURLs, err := p.applyPools(s, log, want.pools, cur.pools)
	if err != nil {
		return providers.Status{}, err
	}

	policySum := checksum(want.policy)
	policy, err := apply(s, p, log, policyKind, want.name, cur.policy,
		func(*models.L4PolicySet) *models.L4PolicySet { return p.policyModel(want.policy, poolURLs, nil) },
		func(o *models.L4PolicySet) bool { return checksum(policySpecOf(o)) == policySum })
	if err != nil {
		return providers.Status{}, err
	}

	vsSum := checksum(want.vs)
	if _, err := apply(s, p, log, vsKind, want.name, cur.vs,
		func(*models.VirtualService) *models.VirtualService {
			return p.vsModel(want.vs, vsRefs{vsvip: vsvip.URL, l4Policy: policy.URL})
		},
		func(o *models.VirtualService) bool {
			return deref(o.CloudConfigCksum) == vsSum && checksum(vsSpecOf(o)) == vsSum
		}); err != nil {
		return providers.Status{}, err
	}

	if err := removePools(s, log, cur.stale); err != nil {
		return providers.Status{}, err
	}
	if err := p.sweep(s, log, keep); err != nil {
		return providers.Status{}, err
	}
	return providers.Status{VIPs: vipsOf(vsvip), Warnings: want.objects.warnings}, nil
}

// applyVsVip makes the VsVip match spec. VsVips are read by name alone
// (they have no created_by), so one found must be adoptable.
func (p *Provider) applyVsVip(s *aviSession, log klog.Logger, spec vsvipSpec, cur *models.VsVip) (*models.VsVip, error) {
	if cur != nil {
		if err := adoptable(p, vsvipKind, cur); err != nil {
			return nil, fmt.Errorf("ensure vsvip %s: %w", spec.Name, err)
		}
	}
	sum := checksum(spec)
	return apply(s, p, log, vsvipKind, spec.Name, cur,
		func(c *models.VsVip) *models.VsVip { return p.vsvipModel(spec, c) },
		func(o *models.VsVip) bool { return checksum(vsvipSpecOf(o)) == sum })
}

// addressMoves reports whether the VsVip cur holds another address than
// the one spec requests. A controller refuses to change the address of an
// existing vip ("If a new preferred IP is needed, please recreate the
// VIP"), so such a VsVip is deleted and created again (dropVsVip).
func addressMoves(spec vsvipSpec, cur *models.VsVip) bool {
	want, err := netip.ParseAddr(spec.Address)
	if cur == nil || err != nil {
		return false
	}
	have := vipsOf(cur)
	for _, a := range have {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Unmap() == want.Unmap() {
			return false
		}
	}
	return len(have) > 0
}

// dropVsVip deletes the VsVip vsvip and, first, the virtual services of
// the load balancer that use it (the controller refuses to delete an
// object still referred to); the apply that follows creates them again.
// The VsVip must be adoptable: another owner's is never touched.
func (p *Provider) dropVsVip(s *aviSession, log klog.Logger, vsvip *models.VsVip, users ...*models.VirtualService) error {
	if err := adoptable(p, vsvipKind, vsvip); err != nil {
		return fmt.Errorf("ensure vsvip %s: %w", deref(vsvip.Name), err)
	}
	for _, vs := range users {
		if vs == nil {
			continue
		}
		if err := remove(s, vsKind.typ, deref(vs.UUID)); err != nil {
			return fmt.Errorf("delete virtualservice %s to move its VIP: %w", deref(vs.Name), err)
		}
		log.V(2).Info("Deleted Avi object to move its VIP", "type", vsKind.typ, "name", deref(vs.Name))
	}
	if err := remove(s, vsvipKind.typ, deref(vsvip.UUID)); err != nil {
		return fmt.Errorf("delete vsvip %s to move its VIP: %w", deref(vsvip.Name), err)
	}
	log.V(2).Info("Deleted Avi object to move its VIP", "type", vsvipKind.typ, "name", deref(vsvip.Name))
	return nil
}

// applyPools makes the pools match specs and returns their URLs by name;
// cur, when not nil, is updated with the pools written, so that a later
// write of the same pool starts from what the controller holds.
func (p *Provider) applyPools(s *aviSession, log klog.Logger, specs []poolSpec, cur map[string]*models.Pool) (map[string]*string, error) {
	urls := make(map[string]*string, len(specs))
	for _, spec := range specs {
		sum := checksum(spec)
		pool, err := apply(s, p, log, poolKind, spec.Name, cur[spec.Name],
			func(*models.Pool) *models.Pool { return p.poolModel(spec) },
			func(o *models.Pool) bool {
				return deref(o.CloudConfigCksum) == sum && checksum(poolSpecOf(o, spec.Policy != nil)) == sum
			})
		if err != nil {
			return nil, err
		}
		urls[spec.Name] = pool.URL
		if cur != nil {
			cur[spec.Name] = pool
		}
	}
	return urls, nil
}

func removePools(s *aviSession, log klog.Logger, pools []*models.Pool) error {
	for _, o := range pools {
		if err := remove(s, poolKind.typ, deref(o.UUID)); err != nil {
			return fmt.Errorf("delete pool %s: %w", deref(o.Name), err)
		}
		log.V(2).Info("Deleted Avi object", "type", poolKind.typ, "name", deref(o.Name))
	}
	return nil
}

// Delete removes the virtual service, policy set, pools and VsVip of the
// load balancer name, in that order, and for an L7 load balancer its HTTP
// policy set and certificates too; what does not exist is skipped.
func (p *Provider) Delete(ctx context.Context, name string, kind lbmodel.Kind) error {
	s, done, err := p.session(ctx)
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	defer done()
	log := klog.FromContext(ctx).WithValues("loadBalancer", name)

	// The monitors and persistence profiles only its pools used, and any a
	// failed apply left, go with it.
	p.sweepDue.Store(true)
	var victims []victim
	if kind == lbmodel.L7 {
		if victims, err = p.l7Victims(s, name); err != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
	} else if victims, err = p.l4Victims(s, name); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	for _, v := range victims {
		if v.typ == vsvipKind.typ {
			// The monitors and persistence profiles only its pools used go
			// before the VsVip: while that exists, List still finds the
			// load balancer, so a failed sweep is tried again.
			if err := p.sweep(s, log, nil); err != nil {
				return fmt.Errorf("delete %s: %w", name, err)
			}
		}
		if err := remove(s, v.typ, v.uuid); err != nil {
			return fmt.Errorf("delete %s %s: %w", v.typ, v.name, err)
		}
		log.V(2).Info("Deleted Avi object", "type", v.typ, "name", v.name)
	}
	if err := p.sweep(s, log, nil); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// victim is an object Delete removes.
type victim struct{ typ, name, uuid string }

// l4Victims lists, in delete order, the objects of the L4 load balancer
// name: virtual service, policy set, pools, VsVip.
func (p *Provider) l4Victims(s *aviSession, name string) ([]victim, error) {
	aviName := lbmodel.Shorten(name, maxNameLength)
	cur, err := p.read(s, aviName, nil)
	if err != nil {
		return nil, err
	}
	var victims []victim
	if cur.vs != nil {
		victims = append(victims, victim{vsKind.typ, aviName, deref(cur.vs.UUID)})
	}
	if cur.policy != nil {
		victims = append(victims, victim{policyKind.typ, aviName, deref(cur.policy.UUID)})
	}
	for _, o := range cur.stale {
		victims = append(victims, victim{poolKind.typ, deref(o.Name), deref(o.UUID)})
	}
	// An unmarked VsVip with our name was not made by us: leave it.
	if cur.vsvip != nil && vsvipKind.owner(cur.vsvip) == p.cfg.ClusterName {
		victims = append(victims, victim{vsvipKind.typ, aviName, deref(cur.vsvip.UUID)})
	}
	return victims, nil
}

// List returns every load balancer of this cluster as the controller holds
// it, from all objects created by npl-<cluster> (and VsVips marked with the
// cluster). Objects left without their virtual service (after a failed
// delete) still form a load balancer, so that garbage collection finds them.
func (p *Provider) List(ctx context.Context) ([]lbmodel.LoadBalancer, error) {
	s, done, err := p.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	defer done()

	ours := url.Values{"created_by": {p.owner}}
	vss, err := list[models.VirtualService](s, vsKind.typ, ours)
	if err != nil {
		return nil, err
	}
	policies, err := list[models.L4PolicySet](s, policyKind.typ, ours)
	if err != nil {
		return nil, err
	}
	pools, err := list[models.Pool](s, poolKind.typ, ours)
	if err != nil {
		return nil, err
	}
	// VsVips have no created_by: find them by the name prefix (as much of
	// it as a shortened name keeps), then by their cluster marker.
	prefix := p.cfg.ClusterName + "--"
	if keep := maxNameLength - shortenedSuffixLength; len(prefix) > keep {
		prefix = prefix[:keep]
	}
	vsvips, err := list[models.VsVip](s, vsvipKind.typ, url.Values{"name.contains": {prefix}})
	if err != nil {
		return nil, err
	}
	httpPolicies, err := list[models.HTTPPolicySet](s, httpPolicyKind.typ, ours)
	if err != nil {
		return nil, err
	}
	certs, err := list[models.SSLKeyAndCertificate](s, certKind.typ, ours)
	if err != nil {
		return nil, err
	}
	groups, err := list[models.PoolGroup](s, poolGroupKind.typ, ours)
	if err != nil {
		return nil, err
	}
	l7, vss, policies, pools, vsvips := p.groupL7(vss, httpPolicies, policies, pools, groups, certs, vsvips)
	out := append(p.group(vss, policies, pools, vsvips), l7...)
	slices.SortFunc(out, func(a, b lbmodel.LoadBalancer) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// group assembles load balancers from the objects List read.
func (p *Provider) group(vss []*models.VirtualService, policies []*models.L4PolicySet, pools []*models.Pool,
	vsvips []*models.VsVip) []lbmodel.LoadBalancer {
	type parts struct {
		vs      *models.VirtualService
		policy  *models.L4PolicySet
		vsvip   *models.VsVip
		pools   []*models.Pool // pools found by name only
		service string
	}
	byName := map[string]*parts{}
	get := func(name string) *parts {
		if byName[name] == nil {
			byName[name] = &parts{}
		}
		return byName[name]
	}
	for _, o := range vss {
		pt := get(deref(o.Name))
		pt.vs = o
		pt.service = markersOf(o.Markers).Service
	}
	for _, o := range policies {
		get(deref(o.Name)).policy = o
	}
	vsvipByName := map[string]*models.VsVip{}
	for _, o := range vsvips {
		if markersOf(o.Markers).Cluster == p.cfg.ClusterName {
			vsvipByName[deref(o.Name)] = o
		}
	}
	for name, pt := range byName {
		if pt.vs != nil {
			pt.vsvip = vsvipByName[refName(pt.vs.VsvipRef)]
		} else {
			pt.vsvip = vsvipByName[name]
		}
	}
	for name, o := range vsvipByName {
		if byName[name] == nil {
			get(name).vsvip = o
		}
	}

	poolByName := map[string]*models.Pool{}
	for _, o := range pools {
		poolByName[deref(o.Name)] = o
	}
	referenced := map[string]bool{}
	for _, pt := range byName {
		if pt.policy != nil {
			for _, r := range rulesOf(pt.policy) {
				referenced[r.Pool] = true
			}
		}
	}
	// A pool no policy set selects belongs to the load balancer its name
	// says: <lb>-<PROTO>-<port>.
	for _, o := range pools {
		n := deref(o.Name)
		if referenced[n] {
			continue
		}
		if m := trailingListener.FindStringSubmatchIndex(n); m != nil {
			pt := get(n[:m[0]])
			pt.pools = append(pt.pools, o)
		}
	}

	out := make([]lbmodel.LoadBalancer, 0, len(byName))
	for name, pt := range byName {
		lb := lbmodel.LoadBalancer{Name: name, Listeners: []lbmodel.Listener{}}
		lb.Service = markersOfAny(pt.vs, pt.policy, pt.vsvip, pt.pools).Service
		lb.Name = p.modelName(name, lb.Service)
		lb.VIPs = vipsOf(pt.vsvip)
		if pt.policy != nil {
			for _, r := range rulesOf(pt.policy) {
				lb.Listeners = append(lb.Listeners, p.listener(lb.Name, r, poolByName[r.Pool]))
			}
		}
		for _, o := range pt.pools {
			m := trailingListener.FindStringSubmatch(deref(o.Name))
			port, _ := strconv.Atoi(m[2])
			r := ruleSpec{Port: int32(port), Protocol: lbmodel.Protocol(m[1]), Pool: deref(o.Name)}
			lb.Listeners = append(lb.Listeners, p.listener(lb.Name, r, o))
		}
		lbmodel.SortListeners(lb.Listeners)
		out = append(out, lb)
	}
	slices.SortFunc(out, func(a, b lbmodel.LoadBalancer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// trailingListener finds the -<PROTO>-<port> suffix of a pool name.
var trailingListener = regexp.MustCompile(`-(TCP|UDP)-([0-9]+)$`)

// listener builds the listener of rule r from its pool (nil if missing).
func (p *Provider) listener(lbName string, r ruleSpec, pool *models.Pool) lbmodel.Listener {
	ln := lbmodel.Listener{Port: r.Port, Protocol: r.Protocol, Pool: lbmodel.Pool{Name: r.Pool, Members: []lbmodel.Member{}}}
	full := lbmodel.PoolName(lbName, r.Protocol, r.Port)
	if lbmodel.Shorten(full, maxNameLength) == r.Pool {
		ln.Pool.Name = full
	}
	if pool != nil {
		ln.Pool.Members, ln.Pool.Policy = membersOf(pool), appliedPolicy(pool)
	}
	return ln
}

// modelName maps an Avi name back to the load balancer name npl-lbsync
// uses (from the service marker), which differs only when it was shortened.
func (p *Provider) modelName(aviName, service string) string {
	ns, svc, ok := strings.Cut(service, "/")
	if !ok || ns == "" || svc == "" {
		return aviName
	}
	if full := lbmodel.LoadBalancerName(p.cfg.ClusterName, ns, svc); lbmodel.Shorten(full, maxNameLength) == aviName {
		return full
	}
	return aviName
}

func markersOfAny(vs *models.VirtualService, policy *models.L4PolicySet, vsvip *models.VsVip, pools []*models.Pool) markers {
	switch {
	case vs != nil:
		return markersOf(vs.Markers)
	case policy != nil:
		return markersOf(policy.Markers)
	case vsvip != nil:
		return markersOf(vsvip.Markers)
	case len(pools) > 0:
		return markersOf(pools[0].Markers)
	}
	return markers{}
}
