// Package edgebed is the test bed of the haproxy provider: an edge network
// namespace that runs npl-edge and HAProxy, with the VIPs of
// 198.18.200.0/24 routed to it, and a client namespace that sends real
// traffic to the VIPs. Both hang off a bridge: the local cluster's npl-br0
// when a cluster runs, else a bridge of the bed's own. It runs inside the
// private namespaces of test/harness/cluster (cluster.RunMain).
package edgebed

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/internal/netns"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/registry"
)

// VIPRange is where the bed's VIPs come from: routed to the edge, local
// there (a local route), so HAProxy binds any of them.
var VIPRange = netip.MustParsePrefix("198.18.200.0/24")

// VIPRange6 is where the bed's IPv6 VIPs come from, when the bed has IPv6
// addresses (Options.BridgeIPv6): routed to the edge and local there too.
var VIPRange6 = netip.MustParsePrefix("fd00:198:200::/120")

// Options place the bed on a bridge.
type Options struct {
	// Bridge is an existing bridge to join (npl-br0 of a running cluster)
	// with BridgeIP its address; empty makes the bed's own bridge.
	Bridge   string
	BridgeIP netip.Addr
	// EdgeIP and ClientIP are the addresses of the edge and client
	// namespaces on the bridge's /24.
	EdgeIP   netip.Addr
	ClientIP netip.Addr
	// BridgeIPv6, when valid, is the bridge's IPv6 address (a /64, the
	// dual-stack cluster's fd00:198:18::1): the edge and client
	// namespaces get EdgeIPv6 and ClientIPv6 on it, and the VIPs of
	// VIPRange6 are routed to the edge.
	BridgeIPv6 netip.Addr
	EdgeIPv6   netip.Addr
	ClientIPv6 netip.Addr
	// SecondEdgeIP, when valid, is the address of a second edge namespace
	// (AddEdge): the edges' certificate names both.
	SecondEdgeIP netip.Addr
	// BinDir holds npl-edge.
	BinDir string
	// UDP is npl-edge's --udp ("" leaves its default, auto: nftables, as
	// the edge namespaces forward).
	UDP string
	// Attach makes each edge host run HAProxy itself, as Debian's
	// haproxy.service does (StartHostHAProxy), and npl-edge attach to it;
	// HostNoChroot leaves the chroot out of its global section (its
	// workers still run as nobody).
	Attach       bool
	HostNoChroot bool
	// Name distinguishes the namespaces and links of beds of one process.
	Name string
}

// ClusterOptions place a bed on the bridge npl-br0 of the running local
// cluster (198.18.0.1): the edge at 198.18.0.200, the client at
// 198.18.0.201, npl-edge from binDir.
func ClusterOptions(binDir, name string) Options {
	return Options{
		Bridge: "npl-br0", BridgeIP: netip.MustParseAddr("198.18.0.1"),
		EdgeIP: netip.MustParseAddr("198.18.0.200"), ClientIP: netip.MustParseAddr("198.18.0.201"),
		BinDir: binDir, Name: name,
	}
}

// Bed is a running edge and client namespace.
type Bed struct {
	Options
	Dir         string
	EdgeNetns   string
	ClientNetns string
	// EdgeURL is the npl-edge API of the first edge.
	EdgeURL string
	Certs   *Certs
	// Edges are the edge hosts: the first, and one more after AddEdge.
	Edges []*EdgeHost

	ownBridge bool
}

// EdgeHost is one edge namespace with its npl-edge and HAProxy.
type EdgeHost struct {
	Netns string
	IP    netip.Addr
	// IPv6 is the edge's IPv6 address, when the bed has IPv6.
	IPv6 netip.Addr
	URL  string
	Dir  string

	b        *Bed
	peer     string
	mu       sync.Mutex
	edgeCmd  *exec.Cmd
	edgeDone chan struct{}
	edgeLog  *os.File
	host     *exec.Cmd
	hostDone chan struct{}
	// stopErr says what of the edge host's processes a stop could not
	// end; Close reports it.
	stopErr error
}

// Start makes the namespaces and links of the bed and the certificates of
// its API; StartEdge starts npl-edge.
func Start(ctx context.Context, dir string, o Options) (_ *Bed, err error) {
	b := &Bed{Options: o, Dir: dir,
		EdgeNetns: "npl-edge-" + o.Name, ClientNetns: "npl-client-" + o.Name,
		EdgeURL: "https://" + net.JoinHostPort(o.EdgeIP.String(), "8443")}
	defer func() {
		if err != nil {
			_ = b.Close()
		}
	}()
	if b.Bridge == "" {
		b.Bridge, b.ownBridge = "npl-eb-"+o.Name, true
		ip4 := o.BridgeIP.As4()
		if err := ipBatch(ctx, "",
			// A MAC of its own, locally administered, after its address: a
			// bridge without one takes its ports' lowest, which changes
			// when a port goes.
			fmt.Sprintf("link add %s address 02:00:%02x:%02x:%02x:%02x type bridge", b.Bridge, ip4[0], ip4[1], ip4[2], ip4[3]),
			fmt.Sprintf("addr add %s/24 dev %s", o.BridgeIP, b.Bridge),
			"link set "+b.Bridge+" up"); err != nil {
			return nil, err
		}
	}
	if err := b.attach(ctx, b.ClientNetns, "npl-ec-"+o.Name, o.ClientIP, o.ClientIPv6); err != nil {
		return nil, err
	}
	ips := []netip.Addr{o.EdgeIP}
	if o.SecondEdgeIP.IsValid() {
		ips = append(ips, o.SecondEdgeIP)
	}
	certs, err := writeCerts(filepath.Join(dir, "certs"), ips...)
	if err != nil {
		return nil, err
	}
	b.Certs = certs
	if _, err := b.addEdge(ctx, b.EdgeNetns, "npl-ee-"+o.Name, o.EdgeIP, o.EdgeIPv6); err != nil {
		return nil, err
	}
	if err := b.RouteVIPsTo(ctx, b.Edges[0]); err != nil {
		return nil, err
	}
	return b, nil
}

// attach makes the namespace name with eth0 at ip on the bridge, and at
// ip6 too when valid.
func (b *Bed) attach(ctx context.Context, name, peer string, ip, ip6 netip.Addr) error {
	if err := Run(ctx, "ip", "netns", "add", name); err != nil {
		return err
	}
	// A MAC address derived from the IP: a namespace made again with the
	// same address (the next test's) stays reachable through neighbour
	// entries other namespaces cached for the previous one.
	a := ip.As4()
	mac := fmt.Sprintf("02:42:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3])
	if err := ipBatch(ctx, "",
		fmt.Sprintf("link add %s type veth peer name eth0 address %s netns %s", peer, mac, name),
		fmt.Sprintf("link set %s master %s", peer, b.Bridge),
		fmt.Sprintf("link set %s up", peer)); err != nil {
		return err
	}
	lines := []string{
		"link set lo up",
		fmt.Sprintf("addr add %s/24 dev eth0", ip),
		"link set eth0 up",
		fmt.Sprintf("route add default via %s dev eth0", b.BridgeIP),
	}
	if ip6.IsValid() {
		// nodad: usable at once, no duplicate address detection wait.
		lines = append(lines, fmt.Sprintf("addr add %s/64 dev eth0 nodad", ip6),
			fmt.Sprintf("route add default via %s dev eth0", b.BridgeIPv6))
	}
	return ipBatch(ctx, name, lines...)
}

// addEdge makes an edge namespace where every VIP is local.
func (b *Bed) addEdge(ctx context.Context, name, peer string, ip, ip6 netip.Addr) (*EdgeHost, error) {
	// A short directory: HAProxy's unix socket paths are limited to 97
	// bytes, which a test's temporary directory can exceed.
	dir, err := os.MkdirTemp("", "npl-edge-")
	if err != nil {
		return nil, err
	}
	e := &EdgeHost{Netns: name, IP: ip, URL: "https://" + net.JoinHostPort(ip.String(), "8443"),
		Dir: dir, b: b, peer: peer}
	b.Edges = append(b.Edges, e)
	e.IPv6 = ip6
	if err := b.attach(ctx, name, peer, ip, ip6); err != nil {
		return nil, err
	}
	lines := []string{fmt.Sprintf("route add local %s dev lo", VIPRange)}
	if ip6.IsValid() {
		lines = append(lines, fmt.Sprintf("route add local %s dev lo", VIPRange6))
	}
	if err := ipBatch(ctx, name, lines...); err != nil {
		return nil, err
	}
	// The edge forwards what its nftables table sends to UDP members
	// (this namespace only).
	if err := Run(ctx, "ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
		return nil, err
	}
	if ip6.IsValid() {
		// A local route lets IPv4 sockets bind any address of the range;
		// IPv6 sockets need non-local binds allowed (this namespace only).
		if err := Run(ctx, "ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.ip_nonlocal_bind=1"); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// AddEdge makes the second edge namespace, at Options.SecondEdgeIP; StartEdge
// of the result starts its npl-edge.
func (b *Bed) AddEdge(ctx context.Context) (*EdgeHost, error) {
	if !b.SecondEdgeIP.IsValid() {
		return nil, errors.New("the bed has no SecondEdgeIP")
	}
	return b.addEdge(ctx, "npl-edge2-"+b.Name, "npl-ee2-"+b.Name, b.SecondEdgeIP, netip.Addr{})
}

// RouteVIPsTo sends the traffic for the VIPs, from the client and the test
// namespace, to edge e, as VRRP moves the VIPs to the edge that is master.
func (b *Bed) RouteVIPsTo(ctx context.Context, e *EdgeHost) error {
	client := []string{fmt.Sprintf("route replace %s via %s dev eth0", VIPRange, e.IP)}
	test := []string{fmt.Sprintf("route replace %s via %s dev %s", VIPRange, e.IP, b.Bridge)}
	if e.IPv6.IsValid() {
		client = append(client, fmt.Sprintf("route replace %s via %s dev eth0", VIPRange6, e.IPv6))
		test = append(test, fmt.Sprintf("route replace %s via %s dev %s", VIPRange6, e.IPv6, b.Bridge))
	}
	if err := ipBatch(ctx, b.ClientNetns, client...); err != nil {
		return err
	}
	return ipBatch(ctx, "", test...)
}

// StartEdge starts npl-edge of the first edge.
func (b *Bed) StartEdge(ctx context.Context) error { return b.Edges[0].StartEdge(ctx) }

// StopEdge stops npl-edge of the first edge.
func (b *Bed) StopEdge() { b.Edges[0].StopEdge() }

// EdgeLog returns the log of the first edge.
func (b *Bed) EdgeLog() string { return b.Edges[0].EdgeLog() }

// Status reads the first edge's status.
func (b *Bed) Status(ctx context.Context) (api.Status, error) { return b.Edges[0].Status(ctx) }

// StartEdge starts npl-edge in the edge namespace and waits until its API
// answers and HAProxy runs (attached: npl-edge attached to it).
func (b *EdgeHost) StartEdge(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.edgeCmd != nil {
		return errors.New("npl-edge already runs")
	}
	bin := filepath.Join(b.b.BinDir, "npl-edge")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s not found: run make build", bin)
	}
	logFile, err := os.OpenFile(filepath.Join(b.Dir, "npl-edge.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	certs := b.b.Certs
	args := []string{"netns", "exec", b.Netns, bin,
		"--listen", net.JoinHostPort(b.IP.String(), "8443"),
		"--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey, "--client-ca-file", certs.CA,
		"--state-dir", b.StateDir(),
		"--check-interval", "300ms", "--check-fall", "1", "--check-rise", "1", "--resync-period", "1s", "-v", "2"}
	if b.b.UDP != "" {
		args = append(args, "--udp", b.b.UDP)
	}
	if b.b.Attach {
		if b.host == nil {
			if err := b.startHostHAProxy(true); err != nil {
				return err
			}
		}
		args = append(args, "--haproxy-config", b.hostConfig(), "--haproxy-admin-socket", b.hostAdminSocket(),
			"--haproxy-master-socket", b.HostMasterSocket())
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), b.marker(edgeProcesses))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start npl-edge: %w", err)
	}
	remember(b.marker(edgeProcesses))
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.edgeCmd, b.edgeDone, b.edgeLog = cmd, done, logFile
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Started (or attached): a worker, and the edge's start done.
		st, err := b.Status(ctx)
		if err == nil && st.WorkerPID != 0 && st.Starts > 0 {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("npl-edge exited at start; log:\n%s", b.EdgeLog())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("npl-edge does not serve after 20s (%v); log:\n%s", err, b.EdgeLog())
		}
	}
}

// HostVIP is where the edge host's own HAProxy frontend (Options.Attach)
// answers HostAnswer on port 80: the host's proxies beside npl-edge's.
const (
	HostVIP    = "198.18.200.254"
	HostAnswer = "the host's own frontend"
)

// StateDir is npl-edge's --state-dir: its configuration of HAProxy, its
// sockets, desired.json and the certificates it serves (tls/).
func (b *EdgeHost) StateDir() string { return filepath.Join(b.Dir, "edge-state") }

func (b *EdgeHost) hostConfig() string      { return filepath.Join(b.Dir, "host", "haproxy.cfg") }
func (b *EdgeHost) hostAdminSocket() string { return filepath.Join(b.Dir, "host", "admin.sock") }

// HostMasterSocket is the master CLI of the edge host's own HAProxy
// (StartHostHAProxy), where an operator's reload goes.
func (b *EdgeHost) HostMasterSocket() string { return filepath.Join(b.Dir, "host", "master.sock") }

// StartHostHAProxy starts the edge host's own HAProxy (Options.Attach) as
// Debian's haproxy.service does, with the files an operator writes for
// npl-edge (docs/haproxy.md): haproxy -Ws -S <master CLI> -f <the host's
// configuration> -f <npl-edge's npl.cfg>, the host's global section with a
// chroot, another user (nobody) and the admin socket npl-edge uses, and a
// frontend of its own. It waits until the master lists a worker.
func (b *EdgeHost) StartHostHAProxy() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.startHostHAProxy(true)
}

// StartHostHAProxyWithoutTheEdgesFile starts it without the -f of npl.cfg:
// a host whose unit an operator did not change.
func (b *EdgeHost) StartHostHAProxyWithoutTheEdgesFile() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.startHostHAProxy(false)
}

func (b *EdgeHost) startHostHAProxy(withEdgeFile bool) error {
	if b.host != nil {
		return errors.New("the host's HAProxy already runs")
	}
	chroot := filepath.Join(filepath.Dir(b.hostConfig()), "chroot")
	global := "    chroot " + chroot
	if b.b.HostNoChroot {
		global, chroot = "    # no chroot", filepath.Dir(b.hostConfig())
		// The workers reach the state directory's socket through its
		// parents, as through /var/lib.
		if err := os.Chmod(b.Dir, 0o711); err != nil {
			return err
		}
	}
	// The chroot inside the host's directory, or the directory itself.
	if err := os.MkdirAll(chroot, 0o755); err != nil {
		return err
	}
	cfg := strings.Join([]string{
		"global",
		global,
		"    uid 65534",
		"    gid 65534",
		"    stats socket " + b.hostAdminSocket() + " mode 660 level admin",
		"    stats timeout 30s",
		"    hard-stop-after 1m",
		"defaults",
		"    mode http",
		"    timeout connect 3s",
		"    timeout client 30s",
		"    timeout server 30s",
		"frontend host_own",
		"    bind " + net.JoinHostPort(HostVIP, "80"),
		"    http-request return status 200 content-type text/plain string " + strconv.Quote(HostAnswer),
		"",
	}, "\n")
	if err := os.WriteFile(b.hostConfig(), []byte(cfg), 0o644); err != nil {
		return err
	}
	// The operator's install step: the state directory, and an empty
	// npl.cfg for HAProxy to load before npl-edge first writes it.
	edgeFile := filepath.Join(b.StateDir(), "npl.cfg")
	if err := os.MkdirAll(b.StateDir(), 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(edgeFile); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(edgeFile, nil, 0o600); err != nil {
			return err
		}
	}
	logFile, err := os.OpenFile(filepath.Join(b.Dir, "host-haproxy.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"netns", "exec", b.Netns, "haproxy", "-Ws", "-S", b.HostMasterSocket() + ",mode,600", "-f", b.hostConfig()}
	if withEdgeFile {
		args = append(args, "-f", edgeFile)
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), b.marker(hostProcesses))
	// Its own process group, so that a kill takes the workers too; gone
	// with the test process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the host's HAProxy: %w", err)
	}
	remember(b.marker(hostProcesses))
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.host, b.hostDone = cmd, done
	deadline := time.Now().Add(15 * time.Second)
	for {
		procs, err := haproxy.ShowProc(context.Background(), b.HostMasterSocket())
		if err == nil && haproxy.CurrentWorker(procs) != 0 {
			return nil
		}
		select {
		case <-done:
			b.host = nil
			return fmt.Errorf("the host's HAProxy exited at start:\n%s", b.HostLog())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the host's HAProxy lists no worker after 15s: %v", err)
		}
	}
}

// KillHostHAProxy kills the host's HAProxy, master and workers (SIGKILL),
// and waits until every one of its processes is gone.
func (b *EdgeHost) KillHostHAProxy() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.host == nil {
		return
	}
	_ = syscall.Kill(-b.host.Process.Pid, syscall.SIGKILL)
	<-b.hostDone
	b.host = nil
	b.stopErr = errors.Join(b.stopErr, waitGone(b.marker(hostProcesses), 5*time.Second))
}

// HostMasterPID is the PID of the host's HAProxy master, 0 when it does
// not run.
func (b *EdgeHost) HostMasterPID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.host == nil {
		return 0
	}
	return b.host.Process.Pid
}

// HostLog is what the host's HAProxy printed.
func (b *EdgeHost) HostLog() string {
	out, _ := os.ReadFile(filepath.Join(b.Dir, "host-haproxy.log"))
	return string(out)
}

// edgeStopTimeout is how long npl-edge gets to stop before SIGKILL, and
// exitGrace how long what it started (HAProxy's master and workers) then
// gets to exit before SIGKILL.
var edgeStopTimeout, exitGrace = 15 * time.Second, 10 * time.Second

// StopEdge stops npl-edge (SIGTERM; it stops HAProxy) and waits until it
// and every process it started (HAProxy's master and workers, a check)
// are gone: SIGKILL for npl-edge after edgeStopTimeout, for what it left
// exitGrace later.
func (b *EdgeHost) StopEdge() {
	b.mu.Lock()
	cmd, done, logFile := b.edgeCmd, b.edgeDone, b.edgeLog
	b.edgeCmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(edgeStopTimeout):
		_ = cmd.Process.Kill()
		<-done
	}
	logFile.Close()
	err := waitGone(b.marker(edgeProcesses), exitGrace)
	b.mu.Lock()
	b.stopErr = errors.Join(b.stopErr, err)
	b.mu.Unlock()
}

// What of an edge host runs: npl-edge and what it starts, or the host's
// own HAProxy (Options.Attach), each process carrying its marker.
const (
	edgeProcesses = "npl-edge"
	hostProcesses = "host-haproxy"
)

// marker is the environment entry that every process of what (npl-edge
// and what it starts, or the host's HAProxy) of this edge host inherits,
// unique to it: after a stop, what still carries it is left behind.
func (b *EdgeHost) marker(what string) string { return "NPL_EDGE_BED=" + what + ":" + b.Dir }

// markers are those of the edge hosts this process started processes of.
var markers struct {
	sync.Mutex
	all []string
}

func remember(marker string) {
	markers.Lock()
	defer markers.Unlock()
	if !slices.Contains(markers.all, marker) {
		markers.all = append(markers.all, marker)
	}
}

// processesWith lists the running processes whose environment holds
// marker, by PID.
func processesWith(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	want := []byte(marker + "\x00")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A zombie's environment reads empty: it runs no more.
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && (bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...))) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits until no process carries marker, SIGKILLs those still
// there after grace and waits for them too; it names what it could not end.
func waitGone(marker string, grace time.Duration) error {
	wait := func(d time.Duration) []int {
		deadline := time.Now().Add(d)
		for {
			pids := processesWith(marker)
			if len(pids) == 0 || time.Now().After(deadline) {
				return pids
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	left := wait(grace)
	if len(left) == 0 {
		return nil
	}
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if left = wait(5 * time.Second); len(left) > 0 {
		return fmt.Errorf("processes %v (%s) still run after SIGKILL", left, marker)
	}
	return nil
}

// LeftBehind lists the processes of the edge hosts this process started
// (npl-edge, HAProxy and what they started) that still run: none once
// every bed closed, whose Close waits for them.
func LeftBehind() []string {
	markers.Lock()
	all := slices.Clone(markers.all)
	markers.Unlock()
	var out []string
	for _, m := range all {
		for _, pid := range processesWith(m) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			out = append(out, fmt.Sprintf("%d (%s): %s", pid, m, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))))
		}
	}
	return out
}

// EdgeLog returns the log of npl-edge (and HAProxy).
func (b *EdgeHost) EdgeLog() string {
	out, _ := os.ReadFile(filepath.Join(b.Dir, "npl-edge.log"))
	return string(out)
}

// Close stops npl-edge and the host's HAProxy, and returns once every
// process of theirs is gone; it removes the namespaces, links and routes.
func (b *Bed) Close() error {
	peers, netns := []string{"npl-ec-" + b.Name}, []string{b.ClientNetns}
	var errs []error
	for _, e := range b.Edges {
		e.StopEdge()
		e.KillHostHAProxy()
		peers, netns = append(peers, e.peer), append(netns, e.Netns)
		e.mu.Lock()
		errs = append(errs, e.stopErr, os.RemoveAll(e.Dir))
		e.mu.Unlock()
	}
	_ = Run(context.Background(), "ip", "route", "del", VIPRange.String())
	if b.BridgeIPv6.IsValid() {
		_ = Run(context.Background(), "ip", "-6", "route", "del", VIPRange6.String())
	}
	for _, peer := range peers {
		if linkExists(peer) {
			errs = append(errs, Run(context.Background(), "ip", "link", "del", peer))
		}
	}
	for _, ns := range netns {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
			errs = append(errs, Run(context.Background(), "ip", "netns", "del", ns))
		}
	}
	if b.ownBridge && linkExists(b.Bridge) {
		errs = append(errs, Run(context.Background(), "ip", "link", "del", b.Bridge))
	}
	return errors.Join(errs...)
}

// ProviderSection is the provider.haproxy section of cluster for the given
// edges (the first edge when none): its client certificate names cluster
// (Certs.ClientFor), as an operator makes npl-lbsync's.
func (b *Bed) ProviderSection(cluster string, edges ...string) []byte {
	if len(edges) == 0 {
		edges = []string{b.EdgeURL}
	}
	cert, key, err := b.Certs.ClientFor(cluster)
	if err != nil {
		// The provider reads these files: it names the failure.
		cert, key = filepath.Join(b.Dir, "certs", "client-for-"+cluster+"-failed: "+err.Error()), ""
	}
	s, _ := json.Marshal(map[string]any{"edges": edges, "certFile": cert, "keyFile": key,
		"caFile": b.Certs.CA, "timeout": "5s"})
	return s
}

// LBSyncConfig is the part of the configuration of an npl-lbsync of
// cluster that serves the bed's edge: the VIP range as vipPool and the
// haproxy provider.
func (b *Bed) LBSyncConfig(cluster string) string {
	provider, _ := json.Marshal(map[string]any{"name": "haproxy", "haproxy": json.RawMessage(b.ProviderSection(cluster))}) // cannot fail: strings and valid JSON
	return fmt.Sprintf("vipPool: [%q]\nprovider: %s\n", VIPRange, provider)
}

// OpenProvider opens the haproxy provider of cluster through the registry,
// as npl-lbsync does, with the bed's VIP range as vipPool.
func (b *Bed) OpenProvider(ctx context.Context, cluster string, section []byte) (providers.Provider, error) {
	cfg, err := registry.Parse("haproxy", providers.Common{ClusterName: cluster, VIPPool: []netip.Prefix{VIPRange}}, section)
	if err != nil {
		return nil, err
	}
	return cfg.Open(ctx)
}

// APIClient is an HTTPS client of the edge API with the given client
// certificate files.
func (b *Bed) APIClient(certFile, keyFile string) (*http.Client, error) {
	pem, err := os.ReadFile(b.Certs.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		// Sent whatever CAs the server names, as a misconfigured client
		// would.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}, nil
}

// Status reads the edge's status.
func (b *EdgeHost) Status(ctx context.Context) (api.Status, error) {
	var st api.Status
	c, err := b.b.APIClient(b.b.Certs.ClientCert, b.b.Certs.ClientKey)
	if err != nil {
		return st, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+api.StatusPath, nil)
	resp, err := c.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: HTTP %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// ClientDo runs fn on a thread inside the client namespace: sockets it
// opens are the client's.
func (b *Bed) ClientDo(fn func() error) error {
	return doInNetns(filepath.Join("/run/netns", b.ClientNetns), fn)
}

// ClientDial opens a connection from the client namespace, as a client
// outside the cluster would, within timeout.
func (b *Bed) ClientDial(ctx context.Context, network, addr string, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := b.ClientDo(func() error {
		var err error
		d := net.Dialer{Timeout: timeout}
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// ClientHTTP is an HTTP client whose connections start in the client
// namespace, one connection per request (so that each request is balanced).
func (b *Bed) ClientHTTP(timeout time.Duration) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return b.ClientDial(ctx, network, addr, timeout)
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// Backends are HTTP servers in the test namespace on the bridge address,
// each answering with its name: the members of the bed's pools when no
// cluster gives Pods. The answer's headers say what the backend received
// (EchoHost, EchoURI, EchoHeaders), and who answered (BackendHeader).
type Backends struct {
	IP      netip.Addr
	servers map[int32]*http.Server
	names   map[int32]string
	// statuses[port][path] is what the backend on port answers on path
	// instead of 200 (SetStatus).
	statuses map[int32]map[string]int
	mu       sync.Mutex
}

// The headers of a backend's answer: its name, and the Host, request URI
// and headers (JSON of an http.Header) of the request it received.
const (
	BackendHeader = "X-Npl-Backend"
	EchoHost      = "X-Npl-Echo-Host"
	EchoURI       = "X-Npl-Echo-Uri"
	EchoHeaders   = "X-Npl-Echo-Headers"
)

// StartBackend starts a backend named name and returns its port.
func (bs *Backends) StartBackend(name string) (int32, error) {
	return bs.serve(name, 0)
}

// RestartBackend starts again, on the same port and with the same name,
// the backend StopBackend closed: a member that answers again.
func (bs *Backends) RestartBackend(port int32) error {
	bs.mu.Lock()
	name, known := bs.names[port]
	_, running := bs.servers[port]
	bs.mu.Unlock()
	switch {
	case !known:
		return fmt.Errorf("no backend was started on port %d", port)
	case running:
		return fmt.Errorf("backend %s on port %d runs", name, port)
	}
	_, err := bs.serve(name, port)
	return err
}

// serve starts the backend name on port (0: any free port).
func (bs *Backends) serve(name string, port int32) (int32, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(bs.IP.String(), strconv.Itoa(int(port))))
	if err != nil {
		return 0, err
	}
	port = int32(ln.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set(BackendHeader, name)
		h.Set(EchoHost, r.Host)
		h.Set(EchoURI, r.RequestURI)
		if b, err := json.Marshal(r.Header); err == nil {
			h.Set(EchoHeaders, string(b))
		}
		bs.mu.Lock()
		status := bs.statuses[port][r.URL.Path]
		bs.mu.Unlock()
		if status != 0 {
			w.WriteHeader(status)
		}
		_, _ = io.WriteString(w, name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.servers == nil {
		bs.servers, bs.names = map[int32]*http.Server{}, map[int32]string{}
	}
	bs.servers[port], bs.names[port] = srv, name
	return port, nil
}

// SetStatus makes the backend on port answer status on path from now on
// (0: 200 again), while it answers every other path as before: an
// application that fails its health check and still takes connections.
func (bs *Backends) SetStatus(port int32, path string, status int) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.statuses == nil {
		bs.statuses = map[int32]map[string]int{}
	}
	if bs.statuses[port] == nil {
		bs.statuses[port] = map[string]int{}
	}
	bs.statuses[port][path] = status
}

// StopBackend closes the backend on port: its port refuses connections
// (RestartBackend opens it again).
func (bs *Backends) StopBackend(port int32) {
	bs.mu.Lock()
	srv := bs.servers[port]
	delete(bs.servers, port)
	bs.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Close stops every backend.
func (bs *Backends) Close() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, s := range bs.servers {
		_ = s.Close()
	}
	bs.servers = nil
}

// Name is the name of the backend on port.
func (bs *Backends) Name(port int32) string {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.names[port]
}

// Get sends one request to url from the client namespace and returns the
// body: the name of the backend that answered.
func Get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	body, _, err := Do(c, req)
	return body, err
}

// Do sends req and returns the body of its answer, which must be 200 OK,
// and the answer (its body read and closed).
func Do(c *http.Client, req *http.Request) (string, *http.Response, error) {
	resp, err := c.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", resp, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", resp, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	return string(body), resp, nil
}

// Stream sends requests to url from the client namespace, workers at a
// time, until Stop or its bound; it counts every request and the backends
// that answer.
type Stream struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  time.Time
	bound  string

	mu       sync.Mutex
	OK       int
	Failed   int
	Errors   []string
	Answered map[string]int
	// InFlight counts the requests Stop (or the bound) cut short: sent,
	// with no answer yet, counted neither OK nor Failed.
	InFlight int
	// ended is when the stream reached its bound (zero while it runs);
	// stopped is set by Stop, and stopErr is what it reported.
	ended   time.Time
	stopped bool
	stopErr error
}

// StartStream starts a stream of requests, bounded by maxDuration.
func StartStream(ctx context.Context, c *http.Client, url string, workers int, maxDuration time.Duration) *Stream {
	return StartStreamN(ctx, c, url, workers, 0, maxDuration)
}

// StartStreamN starts a stream of requests bounded by maxRequests (0: no
// bound by count) and by maxDuration. A stream that reaches a bound stops
// sending; Stop then says so, since its counts cover a shorter window than
// the caller meant.
func StartStreamN(ctx context.Context, c *http.Client, url string, workers, maxRequests int, maxDuration time.Duration) *Stream {
	ctx, cancel := context.WithTimeout(ctx, maxDuration)
	s := &Stream{cancel: cancel, start: time.Now(), Answered: map[string]int{},
		bound: fmt.Sprintf("%v", maxDuration)}
	if maxRequests > 0 {
		s.bound = fmt.Sprintf("%d requests or %v", maxRequests, maxDuration)
	}
	// Once stopping (Stop or a bound), a request that ends is in flight.
	stopping := func() bool { return ctx.Err() != nil }
	for range workers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for !stopping() {
				name, err := Get(ctx, c, url)
				s.mu.Lock()
				switch {
				case stopping():
					if s.ended.IsZero() && !s.stopped && errors.Is(ctx.Err(), context.DeadlineExceeded) {
						s.reachBound()
					}
					s.InFlight++ // cut short: neither OK nor failed
				case err != nil:
					s.Failed++
					if len(s.Errors) < 10 {
						// Timed as klog times its lines, to read beside the
						// edge's and npl-lbsync's logs.
						s.Errors = append(s.Errors, time.Now().UTC().Format("15:04:05.000000")+" "+err.Error())
					}
				default:
					s.OK++
					s.Answered[name]++
				}
				if maxRequests > 0 && s.OK+s.Failed >= maxRequests && s.ended.IsZero() {
					s.reachBound()
					cancel() // the others' requests end in flight
				}
				s.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
			s.mu.Lock()
			if s.ended.IsZero() && !s.stopped && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				s.reachBound()
			}
			s.mu.Unlock()
		}()
	}
	return s
}

// reachBound records that the stream ended by its bound; s.mu is held.
func (s *Stream) reachBound() {
	if s.ended.IsZero() {
		s.ended = time.Now()
	}
}

// Stop ends the stream and waits for its requests. It returns an error
// when the stream had reached its bound before Stop: its counts then cover
// less than the caller's window, and "0 failed" would claim too much.
// Calling it again returns the same result.
func (s *Stream) Stop() error {
	s.mu.Lock()
	if s.stopped {
		defer s.mu.Unlock()
		return s.stopErr
	}
	s.stopped = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended.IsZero() {
		s.stopErr = fmt.Errorf("the request stream reached its bound (%s) %v after its start and %v before Stop: its %d ok, %d failed cover only that window",
			s.bound, s.ended.Sub(s.start).Round(time.Millisecond), time.Since(s.ended).Round(time.Millisecond), s.OK, s.Failed)
	}
	return s.stopErr
}

// Snapshot returns the counts so far.
func (s *Stream) Snapshot() (ok, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.OK, s.Failed
}

// Run runs a command in the caller's network namespace (an `ip netns exec`
// reaches the bed's), with its output in the error when it fails.
func Run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func ipBatch(ctx context.Context, name string, lines ...string) error {
	return netns.IPBatch(ctx, name, lines...)
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// doInNetns runs fn in the network namespace at path (netns.Do).
func doInNetns(path string, fn func() error) error { return netns.Do(path, fn) }

// URL is http://vip:port/.
func URL(vip string, port int32) string {
	return "http://" + net.JoinHostPort(vip, strconv.Itoa(int(port))) + "/"
}
