package edge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
)

// The operations of the API (server.go serves them): put, delete and list
// load balancers, and the edge's status.

// Put makes lb, a load balancer of cluster, the desired state of its name
// and applies it. lb.VIPs holds exactly the VIP to serve on. replaces, when
// not empty, is the name lb had before (api.LoadBalancerRequest.Replaces):
// a load balancer of that name and of lb's owner is swapped for lb in the
// same change (one reload), one of another owner is left alone.
func (e *Edge) Put(ctx context.Context, cluster string, lb *lbmodel.LoadBalancer, replaces string) (api.EnsureResult, error) {
	var res api.EnsureResult
	n, err := checkRequest(cluster, lb)
	if err != nil {
		return res, err
	}
	if replaces == n.Name {
		replaces = ""
	}
	if replaces != "" && !lbmodel.OwnedBy(cluster, replaces) {
		return res, fmt.Errorf("%w: load balancer %s replaces %q, which is not of cluster %q", ErrInvalid, n.Name, replaces, cluster)
	}
	if err := checkUDP(n); err != nil {
		return res, err
	}
	vip := netip.MustParseAddr(n.VIPs[0])
	for _, l := range n.Listeners {
		if why := e.unserved(l.Protocol, vip); why != "" {
			res.Unsupported = append(res.Unsupported, fmt.Sprintf("%s/%d", l.Protocol, l.Port))
			res.Reason = why
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	oldKey := lbKey{cluster, replaces}
	old := e.desired[oldKey]
	if old != nil && !lbmodel.SameOwner(old, n) {
		// The old names were ambiguous: only the owner it records takes
		// it over.
		klog.FromContext(ctx).Info("Not taking over a load balancer of another owner", "cluster", cluster,
			"loadBalancer", n.Name, "replaces", replaces, "service", n.Service, "ownerService", old.Service)
		old = nil
	}
	if err := e.checkConflicts(cluster, n, old); err != nil {
		return res, err
	}
	key := lbKey{cluster, n.Name}
	prev, had := e.desired[key]
	e.desired[key] = n
	if old != nil {
		delete(e.desired, oldKey)
	}
	changedDesired := !had || !lbmodel.SameModel(prev, n) || old != nil
	start := time.Now()
	changed, reloaded, err := e.converge(ctx)
	err = ownErrors(ctx, err, n.Name)
	if changed && err == nil {
		how := "runtime"
		if reloaded {
			how = "reload"
		}
		e.applyDuration.WithLabelValues(how).Observe(time.Since(start).Seconds())
	}
	if errors.Is(err, ErrRejected) || errors.Is(err, ErrInvalid) {
		// Nothing of it reached the running HAProxy: forget it.
		if had {
			e.desired[key] = prev
		} else {
			delete(e.desired, key)
		}
		if old != nil {
			e.desired[oldKey] = old
		}
		return res, err
	}
	if old != nil {
		klog.FromContext(ctx).Info("Load balancer renamed", "cluster", cluster, "loadBalancer", n.Name, "replaces", replaces)
	}
	if changedDesired {
		if serr := e.save(); serr != nil && err == nil {
			err = serr
		}
	}
	res.Changed, res.Reloaded = changed || changedDesired, reloaded
	if res.Changed {
		e.writes.Add(1)
		klog.FromContext(ctx).Info("Load balancer applied", "cluster", cluster, "loadBalancer", n.Name,
			"reloaded", reloaded, "unsupported", res.Unsupported)
	}
	return res, err
}

// Delete removes the load balancer name of cluster. Removing one that is
// not there is not an error.
func (e *Edge) Delete(ctx context.Context, cluster, name string) (bool, error) {
	if cluster == "" || !lbmodel.OwnedBy(cluster, name) {
		return false, fmt.Errorf("%w: load balancer %q is not of cluster %q", ErrInvalid, name, cluster)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	key := lbKey{cluster, name}
	prev, had := e.desired[key]
	if !had {
		return false, nil
	}
	delete(e.desired, key)
	_, _, err := e.converge(ctx)
	if err = ownErrors(ctx, err, name); err != nil {
		if errors.Is(err, ErrRejected) {
			e.desired[key] = prev
		} else {
			// Not running, or a runtime command failed: the deletion
			// stands and is applied when HAProxy runs or at the resync.
			err = errors.Join(err, e.save())
		}
		return false, fmt.Errorf("delete %s: %w", name, err)
	}
	if err := e.save(); err != nil {
		return true, err
	}
	e.writes.Add(1)
	klog.FromContext(ctx).Info("Load balancer deleted", "cluster", cluster, "loadBalancer", name)
	return true, nil
}

// List returns what HAProxy serves for cluster: the frontends and rules of
// the configuration it loaded, with the members its worker holds now and
// the weight of each pool's invalid server (none when it is out of
// rotation).
func (e *Edge) List(ctx context.Context, cluster string) ([]lbmodel.LoadBalancer, error) {
	e.mu.Lock()
	running, text := e.running, e.activeText
	e.mu.Unlock()
	if !running {
		return nil, ErrUnavailable
	}
	px, err := haproxy.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("read the configuration back: %w", err)
	}
	states, err := haproxy.ShowServersState(ctx, e.adminSocket())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	lbs := haproxy.LoadBalancers(px, states, cluster)
	if err := e.listUDP(ctx, cluster, lbs); err != nil {
		return nil, err
	}
	out := make([]lbmodel.LoadBalancer, 0, len(lbs))
	for _, lb := range lbs {
		lbmodel.SortListeners(lb.Listeners)
		lbmodel.SortPools(lb.Pools)
		slices.Sort(lb.VIPs)
		if lb.HTTP != nil {
			lbmodel.SortRules(lb.HTTP.Rules)
			slices.SortFunc(lb.HTTP.TLS, func(a, b lbmodel.TLSCert) int { return cmp.Compare(a.Secret, b.Secret) })
		}
		out = append(out, *lb)
	}
	slices.SortFunc(out, func(a, b lbmodel.LoadBalancer) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Status reports HAProxy's processes and the edge's counters.
func (e *Edge) Status(ctx context.Context) api.Status {
	s := api.Status{
		MasterPID:       e.proc.MasterPID(),
		Reloads:         e.reloads.Load(),
		Starts:          e.starts.Load(),
		Writes:          e.writes.Load(),
		RuntimeCommands: e.runtimeCommands.Load(),
		UDP:             e.udpMode(),
	}
	if s.MasterPID != 0 {
		if procs, err := haproxy.ShowProc(ctx, e.masterSocket); err == nil {
			s.WorkerPID = haproxy.CurrentWorker(procs)
		}
	}
	return s
}

// checkRequest checks a load balancer sent to the edge and returns it in
// canonical form. The model's rules are lbmodel.Normalize's (names and
// owners a configuration would have to quote among them); the edge adds
// only what HAProxy needs: one VIP, the names of its proxies (the load
// balancer's, its pools') in the cluster's prefix, so that no cluster's
// proxy takes another's name, and no policy field it cannot express
// (api.PolicyCapabilities, which the haproxy provider strips before it
// sends): a field it left out would be lost silently.
func checkRequest(cluster string, lb *lbmodel.LoadBalancer) (*lbmodel.LoadBalancer, error) {
	if cluster == "" || lb == nil || !lbmodel.OwnedBy(cluster, lb.Name) {
		return nil, fmt.Errorf("%w: the load balancer's name must start with the cluster name %q and \"--\"", ErrInvalid, cluster)
	}
	if err := lbmodel.CheckClusterName(cluster); err != nil {
		return nil, fmt.Errorf("%w: cluster name: %v", ErrInvalid, err)
	}
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for _, p := range poolNames(n) {
		if !lbmodel.OwnedBy(cluster, p) {
			return nil, fmt.Errorf("%w: load balancer %s: pool %s does not start with the cluster name %q and \"--\"", ErrInvalid, n.Name, p, cluster)
		}
	}
	if _, gaps := api.PolicyCapabilities().StripPolicies(n); len(gaps) > 0 {
		return nil, fmt.Errorf("%w: load balancer %s: %s", ErrInvalid, n.Name, lbmodel.JoinPolicyGaps(gaps))
	}
	if len(n.VIPs) != 1 {
		return nil, fmt.Errorf("%w: load balancer %s: want exactly one VIP, got %d", ErrInvalid, n.Name, len(n.VIPs))
	}
	vip, err := netip.ParseAddr(n.VIPs[0])
	if err != nil || vip.Zone() != "" {
		return nil, fmt.Errorf("%w: load balancer %s: VIP %q is not an IP address", ErrInvalid, n.Name, n.VIPs[0])
	}
	if err := lbmodel.UsableVIP(vip); err != nil {
		return nil, fmt.Errorf("%w: load balancer %s: VIP: %v", ErrInvalid, n.Name, err)
	}
	n.VIPs = []string{vip.Unmap().String()}
	return n, nil
}

// poolNames are the names of lb's pools, each once.
func poolNames(lb *lbmodel.LoadBalancer) []string {
	var out []string
	for _, l := range lb.Listeners {
		if l.Pool.Name != "" {
			out = append(out, l.Pool.Name)
		}
	}
	for _, p := range lb.Pools {
		out = append(out, p.Name)
	}
	return out
}

// checkConflicts refuses a listener that another load balancer (of any
// cluster) serves on the same VIP and port (TCP and UDP apart); replaced,
// when not nil, is the load balancer lb takes over, whose listeners pass
// to lb.
func (e *Edge) checkConflicts(cluster string, lb, replaced *lbmodel.LoadBalancer) error {
	for k, other := range e.desired {
		if k == (lbKey{cluster, lb.Name}) || other == replaced || other.VIPs[0] != lb.VIPs[0] {
			continue
		}
		for _, l := range lb.Listeners {
			for _, o := range other.Listeners {
				if e.conflicting(l.Protocol, o.Protocol) && l.Port == o.Port {
					return fmt.Errorf("%w: load balancer %s: %s:%d is already served by load balancer %s of cluster %s",
						ErrConflict, lb.Name, lb.VIPs[0], l.Port, other.Name, k.cluster)
				}
			}
		}
	}
	return nil
}

// AttachCertificates puts the PEM data of certs into the TLS entries of lb
// they belong to; a certificate for a Secret lb does not name is an error.
func AttachCertificates(lb *lbmodel.LoadBalancer, certs []api.Certificate) error {
	for _, c := range certs {
		found := false
		if lb.HTTP != nil {
			for i := range lb.HTTP.TLS {
				if lb.HTTP.TLS[i].Secret == c.Secret {
					lb.HTTP.TLS[i].CertPEM, lb.HTTP.TLS[i].KeyPEM = []byte(c.CertPEM), []byte(c.KeyPEM)
					found = true
				}
			}
		}
		if !found {
			return fmt.Errorf("%w: load balancer %s: a certificate for TLS Secret %s, which it does not name", ErrInvalid, lb.Name, c.Secret)
		}
	}
	return nil
}
