// Package edge is npl-edge: it runs beside HAProxy on an edge host, owns
// HAProxy's configuration file, its admin socket and its master CLI, and
// makes HAProxy serve the load balancers npl-lbsync's haproxy provider
// asks for over a mutual-TLS API (package api holds the wire format).
//
// Member changes go through the runtime API without a reload; new or
// changed listeners are rendered into a whole configuration, checked with
// "haproxy -c", written, and applied by a hitless reload of the master.
// The desired state is kept in a file, so a restarted edge or HAProxy
// serves it again at once. UDP listeners, which HAProxy cannot serve, go to
// the nftables table of package udp (Config.UDP).
package edge

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/edge/udp"
	"github.com/nodeportlocal/npl/internal/atomicfile"
	"github.com/nodeportlocal/npl/lbmodel"
)

// Config is what the edge needs to run HAProxy.
type Config struct {
	// HAProxyBin is the haproxy executable.
	HAProxyBin string
	// Dir holds the files the edge owns: haproxy.cfg, the admin and master
	// sockets, the socket of the frontend that answers the invalid share
	// of pools 500, and desired.json (the desired state).
	Dir string
	// Checks are the members' health-check settings.
	Checks haproxy.Checks
	// ResyncPeriod is how often the runtime state is compared with the
	// desired one and repaired.
	ResyncPeriod time.Duration
	// UDP serves the UDP listeners with nftables (package udp); nil leaves
	// them unserved, reported as unsupported.
	UDP *udp.Table
	// Attach, when set, makes the edge drive the HAProxy the host runs
	// instead of starting its own.
	Attach *Attach
}

// Attach is the HAProxy of the host that an attached edge drives: it
// loads the host's configuration files, then the edge's own file
// (Dir/npl.cfg, given last with -f), and the host's global section holds
// an admin socket at level admin. The edge
// writes only its own file and reloads HAProxy through the master CLI;
// systemd starts and restarts HAProxy.
type Attach struct {
	// Configs are the host's configuration files, in the order HAProxy
	// loads them, before the edge's.
	Configs []string
	// AdminSocket is the host's admin socket (its "stats socket").
	AdminSocket string
	// MasterSocket is the master CLI (-S).
	MasterSocket string
}

// runner is the HAProxy the edge drives: one it starts (haproxy.Process)
// or the host's (haproxy.Attached).
type runner interface {
	Start(ctx context.Context) error
	Exited() <-chan struct{}
	MasterPID() int
	Reload(ctx context.Context) error
	Stop(timeout time.Duration)
}

// Edge makes HAProxy serve the desired load balancers.
type Edge struct {
	cfg  Config
	proc runner
	// configFile is the file the edge writes and HAProxy loads (the whole
	// configuration, or the edge's part of the host's); masterSocket the
	// master CLI.
	configFile, masterSocket string
	// chroot is the host's HAProxy chroot, when attached.
	chroot string

	// mu serialises every change of the desired state and of HAProxy.
	mu      sync.Mutex
	desired map[lbKey]*lbmodel.LoadBalancer
	running bool
	// startErr is why HAProxy does not run (the last start or attach
	// failed), said to every change meanwhile.
	startErr error
	// activeFrame is the frame (the configuration without servers) the
	// running HAProxy loaded; activeText the configuration file as written.
	activeFrame string
	activeText  []byte

	reloads, starts, writes, runtimeCommands atomic.Int64
	// applyDuration times the PUTs that changed HAProxy, by how: "runtime"
	// (members only) or "reload".
	applyDuration *prometheus.HistogramVec
}

type lbKey struct{ cluster, name string }

// Error classes of the API; the server maps them to HTTP statuses.
var (
	// ErrInvalid is a request the edge refuses as written.
	ErrInvalid = errors.New("invalid request")
	// ErrConflict is a listener another load balancer already holds.
	ErrConflict = errors.New("conflict")
	// ErrRejected is a configuration HAProxy refused; the previous one
	// keeps serving.
	ErrRejected = errors.New("rejected by HAProxy")
	// ErrUnavailable is an HAProxy that does not run (yet), or, attached,
	// one that does not load the edge's file.
	ErrUnavailable = errors.New("HAProxy is unavailable")
)

// New returns an edge over the files of cfg.Dir, with the desired state
// saved there by an earlier run.
func New(cfg Config) (*Edge, error) {
	if cfg.Checks == (haproxy.Checks{}) {
		cfg.Checks = haproxy.DefaultChecks
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 10 * time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("edge directory: %w", err)
	}
	e := &Edge{
		cfg:     cfg,
		desired: map[lbKey]*lbmodel.LoadBalancer{},
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "npl_edge_apply_duration_seconds", Help: "Time to apply a changed load balancer to HAProxy, by how (runtime or reload).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"how"}),
	}
	if a := cfg.Attach; a != nil {
		if len(a.Configs) == 0 || a.AdminSocket == "" || a.MasterSocket == "" {
			return nil, errors.New("attaching to the host's HAProxy needs its configuration files, its admin socket and its master CLI")
		}
		chroot, err := haproxy.HostChroot(a.Configs)
		if err != nil {
			return nil, err
		}
		e.chroot, e.configFile, e.masterSocket = chroot, filepath.Join(cfg.Dir, "npl.cfg"), a.MasterSocket
		e.proc = &haproxy.Attached{MasterSocket: a.MasterSocket}
		if chroot == "" {
			// The workers may run as another user: they reach the socket
			// of the invalid share through the directory, which lists
			// nothing to them and whose files they cannot read.
			if err := os.Chmod(cfg.Dir, 0o711); err != nil {
				return nil, fmt.Errorf("edge directory: %w", err)
			}
		}
	} else {
		e.configFile, e.masterSocket = filepath.Join(cfg.Dir, "haproxy.cfg"), filepath.Join(cfg.Dir, "master.sock")
		e.proc = &haproxy.Process{Bin: cfg.HAProxyBin, ConfigFile: e.configFile, MasterSocket: e.masterSocket}
	}
	// HAProxy refuses unix socket paths longer than this (it appends
	// ".<pid>.tmp" while it binds them).
	const maxSocketPath = 97
	for _, p := range []string{e.masterSocket, e.globals().InvalidSocket} {
		if len(p) > maxSocketPath {
			return nil, fmt.Errorf("edge directory %s: the socket path %s is longer than HAProxy's limit of %d bytes", cfg.Dir, p, maxSocketPath)
		}
	}
	if err := e.load(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Edge) adminSocket() string {
	if e.cfg.Attach != nil {
		return e.cfg.Attach.AdminSocket
	}
	return filepath.Join(e.cfg.Dir, "admin.sock")
}

func (e *Edge) stateFile() string { return filepath.Join(e.cfg.Dir, "desired.json") }

// globals are the process-wide settings of HAProxy's configuration.
func (e *Edge) globals() haproxy.Globals {
	g := haproxy.Globals{AdminSocket: e.adminSocket(), InvalidSocket: filepath.Join(e.cfg.Dir, "500.sock"), Checks: e.cfg.Checks}
	if e.cfg.Attach != nil {
		g.Attached, g.Chroot = true, e.chroot
		if e.chroot != "" {
			// The workers connect from inside the chroot.
			g.InvalidSocket = filepath.Join(e.chroot, "npl-edge-500.sock")
		}
	}
	return g
}

// Run starts HAProxy, starts it again whenever it exits (the new one loads
// the desired state at once), and repairs runtime drift every ResyncPeriod,
// until ctx ends; then it stops HAProxy.
func (e *Edge) Run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	defer e.proc.Stop(10 * time.Second)
	e.startUDP(ctx)
	backoff := 200 * time.Millisecond
	for {
		err := e.start(ctx)
		e.mu.Lock()
		e.startErr = err
		e.mu.Unlock()
		if err != nil {
			log.Error(err, "Start HAProxy", "retryIn", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		e.supervise(ctx)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// supervise repairs drift until HAProxy exits or ctx ends.
func (e *Edge) supervise(ctx context.Context) {
	log := klog.FromContext(ctx)
	tick := time.NewTicker(e.cfg.ResyncPeriod)
	defer tick.Stop()
	exited := e.proc.Exited()
	for {
		select {
		case <-ctx.Done():
			return
		case <-exited:
			e.mu.Lock()
			e.running = false
			e.mu.Unlock()
			if e.cfg.Attach != nil {
				log.Info("The host's HAProxy stopped or restarted; attaching to it again")
			} else {
				log.Info("HAProxy exited; starting it again with the desired state")
			}
			return
		case <-tick.C:
			e.mu.Lock()
			changed, _, err := e.converge(ctx)
			e.mu.Unlock()
			switch {
			case err != nil:
				log.Error(err, "Resync HAProxy")
			case changed:
				log.Info("Repaired HAProxy's runtime state")
			}
		}
	}
}

// start renders the desired state, makes HAProxy run on it and sets the
// runtime states the configuration cannot hold (drain). An own HAProxy is
// started on the file. The host's is waited for first, without the lock
// (meanwhile a change is saved and answered unavailable), then reloaded on
// the file: what it loaded is not known, as the file may have changed while
// the edge was not attached.
func (e *Edge) start(ctx context.Context) error {
	attached := e.cfg.Attach != nil
	if attached {
		if err := e.proc.Start(ctx); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	px := e.proxies()
	r := e.render(px)
	if err := e.checkAndWrite(ctx, r); err != nil {
		return err
	}
	if attached {
		if err := e.proc.Reload(ctx); err != nil {
			return fmt.Errorf("reload the host's HAProxy on %s: %w", e.configFile, err)
		}
		e.reloads.Add(1)
		if err := e.checkLoaded(ctx, px); err != nil {
			return err
		}
	} else if err := e.proc.Start(ctx); err != nil {
		return err
	}
	e.starts.Add(1)
	e.running, e.activeFrame, e.activeText = true, r.Frame, r.Text
	if _, err := e.syncServers(ctx, px); err != nil {
		return fmt.Errorf("set the runtime state after the start: %w", err)
	}
	klog.FromContext(ctx).Info("HAProxy serves the desired state", "attached", attached, "masterPID", e.proc.MasterPID(),
		"file", e.configFile, "loadBalancers", len(e.desired))
	return nil
}

// checkLoaded tells an attached edge whose file the host's HAProxy does
// not load (its -f missing) from one it does: after a reload, the backends
// of the file are there.
func (e *Edge) checkLoaded(ctx context.Context, px haproxy.Proxies) error {
	if e.cfg.Attach == nil || len(px.Backends) == 0 {
		return nil
	}
	names, err := haproxy.ShowBackends(ctx, e.adminSocket())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for _, b := range px.Backends {
		if slices.Contains(names, b.Name) {
			return nil
		}
	}
	return fmt.Errorf("%w: the host's HAProxy does not load %s: add \"-f %s\" after its own configuration (CONFIG in /etc/default/haproxy)", ErrUnavailable, e.configFile, e.configFile)
}

// Stop stops HAProxy; Run does it when its context ends.
func (e *Edge) Stop() { e.proc.Stop(10 * time.Second) }

// Put makes lb, a load balancer of cluster, the desired state of its name
// and applies it. lb.VIPs holds exactly the VIP to serve on.
func (e *Edge) Put(ctx context.Context, cluster string, lb *lbmodel.LoadBalancer) (api.EnsureResult, error) {
	var res api.EnsureResult
	n, err := checkRequest(cluster, lb)
	if err != nil {
		return res, err
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
	if err := e.checkConflicts(cluster, n); err != nil {
		return res, err
	}
	key := lbKey{cluster, n.Name}
	prev, had := e.desired[key]
	e.desired[key] = n
	changedDesired := !had || !lbmodel.SameModel(prev, n)
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
		return res, err
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
// canonical form. The model's rules are lbmodel.Normalize's; the edge
// adds only what HAProxy needs: one VIP.
func checkRequest(cluster string, lb *lbmodel.LoadBalancer) (*lbmodel.LoadBalancer, error) {
	if cluster == "" || lb == nil || !lbmodel.OwnedBy(cluster, lb.Name) {
		return nil, fmt.Errorf("%w: the load balancer's name must start with the cluster name %q and \"--\"", ErrInvalid, cluster)
	}
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(n.VIPs) != 1 {
		return nil, fmt.Errorf("%w: load balancer %s: want exactly one VIP, got %d", ErrInvalid, n.Name, len(n.VIPs))
	}
	vip, err := netip.ParseAddr(n.VIPs[0])
	if err != nil || vip.Zone() != "" {
		return nil, fmt.Errorf("%w: load balancer %s: VIP %q is not an IP address", ErrInvalid, n.Name, n.VIPs[0])
	}
	n.VIPs = []string{vip.Unmap().String()}
	return n, nil
}

// checkConflicts refuses a listener that another load balancer (of any
// cluster) serves on the same VIP and port (TCP and UDP apart).
func (e *Edge) checkConflicts(cluster string, lb *lbmodel.LoadBalancer) error {
	for k, other := range e.desired {
		if k == (lbKey{cluster, lb.Name}) || other.VIPs[0] != lb.VIPs[0] {
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

// proxies are the HAProxy frontends and backends of the desired state
// (haproxy.ProxiesOf).
func (e *Edge) proxies() haproxy.Proxies {
	lbs := make([]haproxy.Desired, 0, len(e.desired))
	for k, lb := range e.desired {
		lbs = append(lbs, haproxy.Desired{Cluster: k.cluster, LB: lb})
	}
	return haproxy.ProxiesOf(lbs, e.certPath)
}

func (e *Edge) render(px haproxy.Proxies) haproxy.Rendered {
	return haproxy.Render(e.globals(), px)
}

// converge makes HAProxy serve the desired state: a reload when the frame
// changed, runtime commands for the members, and the configuration file
// rewritten so that the next start has them; then the UDP listeners.
// Called with e.mu held.
func (e *Edge) converge(ctx context.Context) (changed, reloaded bool, err error) {
	defer e.convergeUDP(ctx, &changed, &err)
	if err := e.writeCerts(); err != nil {
		return false, false, err
	}
	px := e.proxies()
	r := e.render(px)
	if r.Frame != e.activeFrame || !e.running {
		if err := e.checkAndWrite(ctx, r); err != nil {
			return false, false, err
		}
		if !e.running {
			// Run starts HAProxy on the file just written.
			e.activeText = r.Text
			if e.startErr != nil {
				return true, false, fmt.Errorf("%w: %v; the change is saved and served when it runs", ErrUnavailable, e.startErr)
			}
			return true, false, fmt.Errorf("%w: the change is saved and served when it starts", ErrUnavailable)
		}
		if err := e.proc.Reload(ctx); err != nil {
			// Put the previous configuration back for the next start; if
			// that fails too, say so beside the reload's error.
			if werr := atomicfile.Write(e.configFile, e.activeText, 0o600); werr != nil {
				err = errors.Join(err, fmt.Errorf("restore the previous configuration: %w", werr))
			}
			var ce *haproxy.CheckError
			if errors.As(err, &ce) {
				return false, false, e.rejection(ce, r)
			}
			return false, false, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		e.reloads.Add(1)
		e.activeFrame, e.activeText = r.Frame, r.Text
		changed, reloaded = true, true
		if err := e.checkLoaded(ctx, px); err != nil {
			return changed, reloaded, err
		}
	}
	ops, err := e.syncServers(ctx, px)
	if ops > 0 {
		changed = true
	}
	if err != nil {
		return changed, reloaded, err
	}
	if string(r.Text) != string(e.activeText) {
		if err := atomicfile.Write(e.configFile, r.Text, 0o600); err != nil {
			return changed, reloaded, err
		}
		e.activeText = r.Text
	}
	e.removeStaleCerts()
	return changed, reloaded, nil
}

// certPath is the file of a certificate and its key, named by the
// certificate's fingerprint: a changed certificate is a new file, hence a
// changed configuration and a reload.
func (e *Edge) certPath(fingerprint string) string {
	return filepath.Join(e.cfg.Dir, "tls", fingerprint+".pem")
}

// writeCerts writes the certificate files of the desired state that do not
// exist yet (mode 0600 in a 0700 directory): HAProxy reads them, and a
// restarted edge reads the keys back from them.
func (e *Edge) writeCerts() error {
	for _, lb := range e.desired {
		if !lb.IsL7() {
			continue
		}
		for _, c := range lb.HTTP.TLS {
			path := e.certPath(c.Fingerprint)
			if _, err := os.Stat(path); err == nil {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			pemData := append(append(bytes.TrimSpace(slices.Clone(c.CertPEM)), '\n'), bytes.TrimSpace(c.KeyPEM)...)
			if err := atomicfile.Write(path, append(pemData, '\n'), 0o600); err != nil {
				return fmt.Errorf("write the certificate of TLS Secret %s: %w", c.Secret, err)
			}
		}
	}
	return nil
}

// removeStaleCerts removes the certificate files no load balancer uses.
func (e *Edge) removeStaleCerts() {
	used := map[string]bool{}
	for _, lb := range e.desired {
		if lb.IsL7() {
			for _, c := range lb.HTTP.TLS {
				used[e.certPath(c.Fingerprint)] = true
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(e.cfg.Dir, "tls", "*.pem"))
	for _, f := range files {
		if !used[f] {
			_ = os.Remove(f)
		}
	}
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

// readCert reads the certificate and key of a TLS entry back from its file.
func (e *Edge) readCert(c *lbmodel.TLSCert) error {
	data, err := os.ReadFile(e.certPath(c.Fingerprint))
	if err != nil {
		return err
	}
	var certs, key []byte
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			certs = append(certs, pem.EncodeToMemory(block)...)
		} else {
			key = pem.EncodeToMemory(block)
		}
	}
	c.CertPEM, c.KeyPEM = certs, key
	return nil
}

// checkAndWrite checks the configuration with "haproxy -c" and writes it;
// a refused one is not written, and the error names the objects of the
// lines HAProxy complains about.
func (e *Edge) checkAndWrite(ctx context.Context, r haproxy.Rendered) error {
	tmp := e.configFile + ".new"
	if err := os.WriteFile(tmp, r.Text, 0o600); err != nil {
		return err
	}
	var files []string
	if e.cfg.Attach != nil {
		files = append(files, e.cfg.Attach.Configs...)
	}
	if err := haproxy.Check(ctx, e.cfg.HAProxyBin, append(files, tmp)...); err != nil {
		_ = os.Remove(tmp)
		var ce *haproxy.CheckError
		if errors.As(err, &ce) {
			return e.rejection(ce, r)
		}
		return fmt.Errorf("%w: %v", ErrRejected, err)
	}
	_ = os.Remove(tmp)
	return atomicfile.Write(e.configFile, r.Text, 0o600)
}

// rejection is the error of a configuration HAProxy refused, naming the
// objects of the lines it complains about.
func (e *Edge) rejection(ce *haproxy.CheckError, r haproxy.Rendered) error {
	var objs []string
	// Only the lines of the edge's file: an attached edge's check loads the
	// host's files too.
	for _, n := range ce.Lines(e.configFile, e.configFile+".new") {
		if o, ok := r.Objects[n]; ok && !slices.Contains(objs, o) {
			objs = append(objs, o)
		}
	}
	if len(objs) > 0 {
		return fmt.Errorf("%w: %s: %v", ErrRejected, strings.Join(objs, ", "), ce)
	}
	return fmt.Errorf("%w: %v", ErrRejected, ce)
}

// syncServers makes the servers of the running worker match the members
// and invalid shares of proxies through the runtime API, and returns how
// many commands changed something.
func (e *Edge) syncServers(ctx context.Context, px haproxy.Proxies) (int, error) {
	states, err := haproxy.ShowServersState(ctx, e.adminSocket())
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	current := map[string]map[string]haproxy.ServerState{}
	for _, s := range states {
		if current[s.Backend] == nil {
			current[s.Backend] = map[string]haproxy.ServerState{}
		}
		current[s.Backend][s.Name] = s
	}
	ops := 0
	admin := e.adminSocket()
	run := func(cmd string, ok ...string) error {
		if err := haproxy.Run(ctx, admin, cmd, ok...); err != nil {
			return err
		}
		ops++
		e.runtimeCommands.Add(1)
		return nil
	}
	runChain := func(cmds []string, ok ...string) error {
		if err := haproxy.RunChain(ctx, admin, cmds, ok...); err != nil {
			return err
		}
		ops += len(cmds)
		e.runtimeCommands.Add(int64(len(cmds)))
		return nil
	}
	var errs []error
	for _, p := range px.Backends {
		have := current[p.Name]
		want := map[string]bool{}
		for _, m := range p.Members {
			name := haproxy.ServerName(m)
			want[name] = true
			srv := p.Name + "/" + name
			s, ok := have[name]
			switch {
			case !ok:
				// One round trip to the worker: a new member takes traffic
				// as soon as it can, and every round trip waits for both
				// processes to be scheduled on a busy host.
				cmds := []string{"add server " + srv + " " + p.ServerArgs(m, e.cfg.Checks), "enable health " + srv}
				if m.Enabled {
					cmds = append(cmds, "enable server "+srv)
				} else {
					cmds = append(cmds, "set server "+srv+" state drain")
				}
				if err := runChain(cmds, "New server registered"); err != nil {
					errs = append(errs, &memberError{lb: p.LoadBalancer, err: fmt.Errorf("load balancer %s: add member %s: %w", p.LoadBalancer, srv, err)})
				}
			case m.Enabled && !s.Enabled():
				if err := run("set server " + srv + " state ready"); err != nil {
					errs = append(errs, &memberError{lb: p.LoadBalancer, err: fmt.Errorf("load balancer %s: enable member %s: %w", p.LoadBalancer, srv, err)})
				}
			case !m.Enabled && !s.Draining():
				// In the rotation, or in maintenance: a start or reload
				// loads a draining member disabled (Render), which HAProxy
				// holds as maintenance; drain it again.
				if err := run("set server " + srv + " state drain"); err != nil {
					errs = append(errs, &memberError{lb: p.LoadBalancer, err: fmt.Errorf("load balancer %s: drain member %s: %w", p.LoadBalancer, srv, err)})
				}
			}
			if ok && s.ModelWeight() != m.Weight {
				if err := run(fmt.Sprintf("set server %s weight %d", srv, haproxy.Weight(m))); err != nil {
					errs = append(errs, &memberError{lb: p.LoadBalancer, err: fmt.Errorf("load balancer %s: set the weight of member %s: %w", p.LoadBalancer, srv, err)})
				}
			}
		}
		if p.InvalidWeight > 0 {
			want[haproxy.InvalidServer] = true
			srv := p.Name + "/" + haproxy.InvalidServer
			s, ok := have[haproxy.InvalidServer]
			switch {
			case !ok:
				cmds := []string{"add server " + srv + " " + e.globals().InvalidServerArgs(p.InvalidWeight), "enable server " + srv}
				if err := runChain(cmds, "New server registered"); err != nil {
					errs = append(errs, &memberError{lb: p.LoadBalancer, err: fmt.Errorf("load balancer %s: add the invalid share %s: %w", p.LoadBalancer, srv, err)})
				}
			case !s.Enabled():
				if err := run("set server " + srv + " state ready"); err != nil {
					errs = append(errs, &memberError{lb: p.LoadBalancer, err: fmt.Errorf("load balancer %s: enable the invalid share %s: %w", p.LoadBalancer, srv, err)})
				}
			}
			if ok && s.Weight != int(p.InvalidWeight) {
				if err := run(fmt.Sprintf("set server %s weight %d", srv, p.InvalidWeight)); err != nil {
					errs = append(errs, &memberError{lb: p.LoadBalancer, err: fmt.Errorf("load balancer %s: set the weight of the invalid share %s: %w", p.LoadBalancer, srv, err)})
				}
			}
		}
		for name := range have {
			if want[name] {
				continue
			}
			srv := p.Name + "/" + name
			err := run("set server " + srv + " state maint")
			if err == nil {
				if err = run("del server "+srv, "Server deleted"); err != nil {
					// Connections still open to it: the member is gone
					// from the model, so they end now.
					_ = run("shutdown sessions server " + srv)
					err = run("del server "+srv, "Server deleted")
				}
			}
			if err != nil {
				errs = append(errs, &memberError{lb: p.LoadBalancer, err: fmt.Errorf("load balancer %s: remove member %s: %w", p.LoadBalancer, srv, err)})
			}
		}
	}
	return ops, errors.Join(errs...)
}

// memberError is a runtime command that failed for a member or the invalid
// share of one load balancer.
type memberError struct {
	lb  string
	err error
}

func (m *memberError) Error() string { return m.err.Error() }
func (m *memberError) Unwrap() error { return m.err }

// ownErrors keeps of err, which converge returned while applying load
// balancer lb, what concerns lb or the whole edge. The runtime commands
// that failed for another load balancer's members are logged instead: the
// resync and that load balancer's own next Ensure try them again, and a
// member that one load balancer cannot get must not fail every other's
// writes.
func ownErrors(ctx context.Context, err error, lb string) error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	var own []error
	for _, e := range errs {
		var me *memberError
		if errors.As(e, &me) && me.lb != lb {
			klog.FromContext(ctx).Error(e, "Runtime command of another load balancer failed; the resync tries it again", "loadBalancer", me.lb)
			continue
		}
		own = append(own, e)
	}
	return errors.Join(own...)
}

// savedLB is one entry of desired.json.
type savedLB struct {
	Cluster      string               `json:"cluster"`
	LoadBalancer lbmodel.LoadBalancer `json:"loadBalancer"`
}

func (e *Edge) save() error {
	out := make([]savedLB, 0, len(e.desired))
	for k, lb := range e.desired {
		out = append(out, savedLB{Cluster: k.cluster, LoadBalancer: *lb})
	}
	slices.SortFunc(out, func(a, b savedLB) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.LoadBalancer.Name, b.LoadBalancer.Name))
	})
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(e.stateFile(), b, 0o600); err != nil {
		return fmt.Errorf("save the desired state: %w", err)
	}
	return nil
}

func (e *Edge) load() error {
	b, err := os.ReadFile(e.stateFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load the desired state: %w", err)
	}
	var saved []savedLB
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("load the desired state %s: %w", e.stateFile(), err)
	}
	for _, s := range saved {
		if s.LoadBalancer.HTTP != nil {
			var missing error
			for i := range s.LoadBalancer.HTTP.TLS {
				if err := e.readCert(&s.LoadBalancer.HTTP.TLS[i]); err != nil {
					missing = fmt.Errorf("the certificate of TLS Secret %s: %w", s.LoadBalancer.HTTP.TLS[i].Secret, err)
				}
			}
			if missing != nil {
				// Served again when the provider next states it; the
				// others start now.
				klog.ErrorS(missing, "Load balancer of the saved state left out", "cluster", s.Cluster, "loadBalancer", s.LoadBalancer.Name)
				continue
			}
		}
		n, err := checkRequest(s.Cluster, &s.LoadBalancer)
		if err != nil {
			return fmt.Errorf("load the desired state %s: %w", e.stateFile(), err)
		}
		e.desired[lbKey{s.Cluster, n.Name}] = n
	}
	return nil
}
