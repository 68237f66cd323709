package edge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/internal/atomicfile"
)

// Making HAProxy serve the desired state: a reload when the frame changed,
// runtime commands for the members.

// proxies are the HAProxy frontends and backends of the desired state
// (haproxy.ProxiesOf).
func (e *Edge) proxies() haproxy.Proxies {
	lbs := make([]haproxy.Desired, 0, len(e.desired))
	for k, lb := range e.desired {
		lbs = append(lbs, haproxy.Desired{Cluster: k.cluster, LB: lb})
	}
	return haproxy.ProxiesOf(lbs, e.files())
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
				if c := p.DynamicCookieCommand(); c != "" {
					cmds = append(cmds, c)
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
