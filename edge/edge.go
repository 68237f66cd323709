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
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/edge/udp"
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
