// Command npl-edge runs beside HAProxy on an edge host: it starts HAProxy
// in master-worker mode, owns its configuration and sockets, serves UDP
// listeners with an nftables table of its own, and serves the mutual-TLS
// API through which npl-lbsync's haproxy provider sets the load balancers
// the edge serves.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/edge"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/edge/udp"
	"github.com/nodeportlocal/npl/internal/cli"
	"github.com/nodeportlocal/npl/internal/serve"
)

func main() {
	cli.Main(newCommand())
}

type options struct {
	listen       string
	certFile     string
	keyFile      string
	clientCAFile string
	haproxyBin   string
	dir          string
	checkInter   time.Duration
	checkFall    int
	checkRise    int
	resync       time.Duration
	metricsAddr  string
	profiling    *bool
	udp          string
	hostConfigs  []string
	hostAdmin    string
	hostMaster   string
}

func newCommand() *cobra.Command {
	o := &options{}
	cmd := cli.NewRoot(&cobra.Command{
		Use:   "npl-edge",
		Short: "Run HAProxy for npl-lbsync on an edge host",
		Long: `npl-edge starts HAProxy (master-worker mode), owns its configuration file, its
admin socket and its master CLI, and serves an HTTPS API with mutual TLS through
which npl-lbsync's haproxy provider states the load balancers to serve. Member
changes go through HAProxy's runtime API without a reload; new or changed
listeners are checked with haproxy -c and applied by a hitless reload. UDP
listeners, which HAProxy cannot serve, are served by the nftables table
inet npl-edge (DNAT to the members by weight, --udp).

With --haproxy-master-socket, npl-edge attaches to the HAProxy the host runs
(Debian's haproxy.service) instead of starting its own: it writes only
<state-dir>/npl.cfg, which HAProxy loads after the host's configuration
(a second -f), and reloads HAProxy through the host's master CLI; systemd
starts and restarts HAProxy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd.Context(), o) },
	})
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "", "address of the HTTPS API: the edge's management address and port, such as 192.0.2.10:8443 (required)")
	f.StringVar(&o.certFile, "tls-cert-file", "/etc/npl-edge/tls.crt", "the API's certificate (PEM)")
	f.StringVar(&o.keyFile, "tls-key-file", "/etc/npl-edge/tls.key", "the API's private key (PEM)")
	f.StringVar(&o.clientCAFile, "client-ca-file", "/etc/npl-edge/client-ca.crt", "CA certificates (PEM) that sign the clients' certificates; a client without one is refused")
	f.StringVar(&o.haproxyBin, "haproxy", "haproxy", "the haproxy executable")
	f.StringVar(&o.dir, "state-dir", "/var/lib/npl-edge", "directory of haproxy.cfg, the sockets and the desired state")
	f.DurationVar(&o.checkInter, "check-interval", haproxy.DefaultChecks.Inter, "interval of the members' health checks")
	f.IntVar(&o.checkFall, "check-fall", haproxy.DefaultChecks.Fall, "failed checks that mark a member down")
	f.IntVar(&o.checkRise, "check-rise", haproxy.DefaultChecks.Rise, "passed checks that mark a member up")
	f.DurationVar(&o.resync, "resync-period", 10*time.Second, "how often HAProxy's runtime state is compared with the desired one and repaired")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:9105", "address of the Prometheus metrics and /healthz listener, such as the edge's management address and a port (0 disables it); loopback by default, as nothing authenticates it and it must not answer on the VIPs")
	o.profiling = cli.AddProfilingFlag(cmd)
	f.StringVar(&o.udp, "udp", "auto", "how to serve UDP listeners: nftables (the table inet npl-edge; needs nft and net.ipv4.ip_forward=1), off (reported as not served; the table is removed), or auto (nftables when it works here)")
	f.StringSliceVar(&o.hostConfigs, "haproxy-config", nil, "attached: the host's HAProxy configuration files (or directories), in the order HAProxy loads them before <state-dir>/npl.cfg, such as /etc/haproxy/haproxy.cfg")
	f.StringVar(&o.hostAdmin, "haproxy-admin-socket", "", "attached: the host's admin socket (a stats socket at level admin), such as /run/haproxy/admin.sock")
	f.StringVar(&o.hostMaster, "haproxy-master-socket", "", "attach to the HAProxy the host runs, through its master CLI (haproxy -S), such as /run/haproxy-master.sock; needs --haproxy-config and --haproxy-admin-socket")
	return cmd
}

// attach returns the host's HAProxy to attach to, nil when npl-edge runs
// its own.
func attach(o *options) (*edge.Attach, error) {
	if o.hostMaster == "" {
		if len(o.hostConfigs) > 0 || o.hostAdmin != "" {
			return nil, cli.Usagef("--haproxy-config and --haproxy-admin-socket go with --haproxy-master-socket")
		}
		return nil, nil
	}
	if len(o.hostConfigs) == 0 || o.hostAdmin == "" {
		return nil, cli.Usagef("--haproxy-master-socket needs --haproxy-config (the host's configuration files) and --haproxy-admin-socket")
	}
	return &edge.Attach{Configs: o.hostConfigs, AdminSocket: o.hostAdmin, MasterSocket: o.hostMaster}, nil
}

func run(ctx context.Context, o *options) error {
	if err := checkListen(o.listen); err != nil {
		return err
	}
	if o.checkInter < 100*time.Millisecond || o.checkFall < 1 || o.checkRise < 1 {
		return cli.Usagef("--check-interval must be at least 100ms, --check-fall and --check-rise at least 1")
	}
	if o.resync <= 0 {
		return cli.Usagef("--resync-period must be positive")
	}
	host, err := attach(o)
	if err != nil {
		return err
	}
	tlsConfig, err := edge.ServerTLS(o.certFile, o.keyFile, o.clientCAFile)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	udpTable, err := udpTable(ctx, o.udp, o.resync)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	e, err := edge.New(edge.Config{
		HAProxyBin:   o.haproxyBin,
		Dir:          o.dir,
		Checks:       haproxy.Checks{Inter: o.checkInter, Fall: o.checkFall, Rise: o.checkRise},
		ResyncPeriod: o.resync,
		UDP:          udpTable,
		Attach:       host,
	})
	if err != nil {
		return cli.Usagef("%v", err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return cli.Usagef("listen on %s: %v", o.listen, err)
	}
	d := cli.StartDaemon(ctx)
	d.Profiling = *o.profiling
	defer d.Stop()
	ctx = d.Ctx
	e.Register(d.Registry)
	// One listener: /healthz beside the metrics.
	if err := d.Serve(o.metricsAddr, map[string]http.Handler{"/healthz": serve.Probes(nil, nil)}, "", nil); err != nil {
		return err
	}
	d.Log.Info("Starting npl-edge", "listen", ln.Addr().String(), "stateDir", o.dir, "udp", e.Status(ctx).UDP, "attached", host != nil)
	runDone := make(chan error, 1)
	go func() { runDone <- e.Run(ctx) }()
	serveErr := e.Serve(ctx, ln, tlsConfig)
	d.Stop()
	runErr := <-runDone
	return errors.Join(serveErr, runErr)
}

// checkListen refuses an API address without a host: an API on every
// address would take its port on the VIPs too, where HAProxy binds them.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return cli.Usagef("--listen must be the edge's management address and port, such as 192.0.2.10:8443 (got %q)", addr)
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		return cli.Usagef("--listen %s listens on every address, the VIPs' too: give the edge's management address, such as 192.0.2.10:8443", addr)
	}
	return nil
}

// udpTable returns the table that serves UDP listeners, or nil when they
// are not served (mode off, or auto where nftables cannot work: said in
// the log).
func udpTable(ctx context.Context, mode string, resync time.Duration) (*udp.Table, error) {
	log := klog.FromContext(ctx)
	switch mode {
	case "off":
		// A table an earlier run left would serve listeners nobody
		// updates: remove it.
		if t, err := udp.New(); err == nil {
			if err := t.Delete(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case "nftables", "auto":
	default:
		return nil, fmt.Errorf("--udp must be nftables, off or auto, not %q", mode)
	}
	t, err := udp.New()
	if err == nil {
		err = udp.Forwarding()
	}
	if err != nil {
		if mode == "auto" {
			log.Info("UDP listeners are not served (--udp=auto)", "reason", err.Error())
			return nil, nil
		}
		return nil, fmt.Errorf("--udp=nftables: %w", err)
	}
	t.VerifyEvery = resync
	return t, nil
}
