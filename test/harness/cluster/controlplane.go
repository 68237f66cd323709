package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

var (
	// bridgeIP is the test namespace's address on npl-br0; the apiserver
	// listens there so that processes inside node namespaces reach it.
	bridgeIP = netip.MustParseAddr("198.18.0.1")
	// bridgeIPv6 is the test namespace's IPv6 address on npl-br0 in a
	// dual-stack cluster, the nodes' IPv6 default gateway.
	bridgeIPv6 = netip.MustParseAddr("fd00:198:18::1")
	// serviceCIDR holds ClusterIPs; its first address is the kubernetes Service.
	serviceCIDR     = netip.MustParsePrefix("198.18.128.0/20")
	kubernetesSvcIP = netip.MustParseAddr("198.18.128.1")
	// serviceCIDRv6 holds the IPv6 ClusterIPs of a dual-stack cluster.
	serviceCIDRv6     = netip.MustParsePrefix("fd00:198:18:128::/108")
	componentBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
)

const (
	// stopGrace is how long a component gets between SIGTERM and SIGKILL.
	stopGrace = 5 * time.Second
	// logTailLines is how much of each component log a start error carries.
	logTailLines = 15
)

// process is one control-plane component.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error
}

// startProcess starts bin with args, its output going to logDir/name.log and
// to out when set.
func startProcess(name, bin, logDir string, out io.Writer, args ...string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if out != nil {
		w := io.MultiWriter(logFile, &prefixWriter{w: out, prefix: "[" + name + "] "})
		cmd.Stdout, cmd.Stderr = w, w
	}
	if err := startFromSpawnerThread(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// spawner is a goroutine locked to its OS thread for the life of the process.
// Pdeathsig fires when the thread that forked a child exits, and Go ends a
// thread whenever a goroutine exits while locked to it (as doInNetns does
// after a failed setns): long-lived components are forked from this thread,
// so they die with the process and only then.
var spawner struct {
	once sync.Once
	reqs chan func()
}

func startFromSpawnerThread(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread()
			for f := range spawner.reqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// exited returns an error when the process is no longer running.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.waitErr)
	default:
		return nil
	}
}

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits for the exit.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last lines of the process log.
func (p *process) tail(lines int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// prefixWriter writes whole lines, each prefixed, under one lock shared by
// all components so that their lines do not interleave.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

var outMu sync.Mutex

func (pw *prefixWriter) Write(b []byte) (int, error) {
	outMu.Lock()
	defer outMu.Unlock()
	pw.buf = append(pw.buf, b...)
	for {
		i := bytes.IndexByte(pw.buf, '\n')
		if i < 0 {
			break
		}
		if _, err := fmt.Fprintf(pw.w, "%s%s\n", pw.prefix, pw.buf[:i]); err != nil {
			return len(b), nil // a broken log sink must not stop the component
		}
		pw.buf = pw.buf[i+1:]
	}
	return len(b), nil
}

// freePort returns a TCP port free on ip now. The namespace is private, so
// only this process can race for it.
func freePort(ip netip.Addr) (int, error) {
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// controlPlane holds the files and processes of etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler.
type controlPlane struct {
	dir    string // certificates, kubeconfigs, etcd data
	logDir string
	binDir string
	out    io.Writer

	// serviceCIDRs are the ClusterIP ranges, IPv4 first.
	serviceCIDRs []netip.Prefix

	ca        *authority
	admin     keyPair
	serverURL string
	// componentPorts are the health ports of the controller-manager and the
	// scheduler, on 127.0.0.1.
	componentPorts map[string]int

	// extraArgs are added to a component's flags, by component name (the
	// apiserver's flags for real nodes).
	extraArgs map[string][]string

	mu    sync.Mutex
	procs []*process
}

func (cp *controlPlane) path(name string) string { return filepath.Join(cp.dir, name) }

// CheckBinaries reports, in one line, which control-plane binary binDir
// lacks and how to build it.
func CheckBinaries(binDir string) error {
	for _, b := range componentBinaries {
		p := filepath.Join(binDir, b)
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("npl test cluster: %s not found: run 'make tools', or point BinDir (--bin-dir) at the binaries", p)
		}
	}
	return nil
}

// DefaultBinDir is bin/ at the repository root, where 'make tools' puts the
// control-plane binaries.
func DefaultBinDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// writeCredentials generates the CA, the certificates, the service account
// key and the kubeconfigs of the admin and of the two controllers.
func (cp *controlPlane) writeCredentials(apiPort int) error {
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	cp.ca = ca
	cp.serverURL = "https://" + netip.AddrPortFrom(bridgeIP, uint16(apiPort)).String()
	serving, err := ca.issue(pkix.Name{CommonName: "kube-apiserver"},
		[]net.IP{bridgeIP.AsSlice(), net.IPv4(127, 0, 0, 1), kubernetesSvcIP.AsSlice()},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return err
	}
	componentServing, err := ca.issue(pkix.Name{CommonName: "npl-test-component"}, []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	if err != nil {
		return err
	}
	saKey, saPub, err := newServiceAccountKey()
	if err != nil {
		return err
	}
	if err := writeFiles(map[string][]byte{
		cp.path("ca.crt"): ca.certPEM, cp.path("ca.key"): ca.keyPEM,
		cp.path("apiserver.crt"): serving.certPEM, cp.path("apiserver.key"): serving.keyPEM,
		cp.path("component.crt"): componentServing.certPEM, cp.path("component.key"): componentServing.keyPEM,
		cp.path("sa.key"): saKey, cp.path("sa.pub"): saPub,
	}); err != nil {
		return err
	}
	if cp.admin, err = ca.clientCert("npl-admin", "system:masters"); err != nil {
		return err
	}
	if err := writeKubeconfig(cp.path("kubeconfig"), cp.serverURL, ca.certPEM, cp.admin, "npl-admin"); err != nil {
		return err
	}
	for file, user := range map[string]string{
		"controller-manager.kubeconfig": "system:kube-controller-manager",
		"scheduler.kubeconfig":          "system:kube-scheduler",
	} {
		pair, err := ca.clientCert(user)
		if err != nil {
			return err
		}
		if err := writeKubeconfig(cp.path(file), cp.serverURL, ca.certPEM, pair, user); err != nil {
			return err
		}
	}
	return nil
}

func (cp *controlPlane) start(name string, args ...string) (*process, error) {
	args = append(args, cp.extraArgs[name]...)
	p, err := startProcess(name, filepath.Join(cp.binDir, name), cp.logDir, cp.out, args...)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	return p, nil
}

// serviceCIDRs returns the ClusterIP ranges: IPv4, then IPv6 when dualStack.
func serviceCIDRs(dualStack bool) []netip.Prefix {
	if dualStack {
		return []netip.Prefix{serviceCIDR, serviceCIDRv6}
	}
	return []netip.Prefix{serviceCIDR}
}

// commaList is the comma-separated list of addresses or prefixes the
// components' flags take.
func commaList[T fmt.Stringer](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// startEtcd starts a single-member etcd on loopback and returns its client URL.
func (cp *controlPlane) startEtcd() (string, error) {
	lo := netip.MustParseAddr("127.0.0.1")
	clientPort, err := freePort(lo)
	if err != nil {
		return "", err
	}
	peerPort, err := freePort(lo)
	if err != nil {
		return "", err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	_, err = cp.start("etcd",
		"--name=npl",
		"--data-dir="+cp.path("etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=npl="+peerURL,
		// The data is thrown away at Close: durability only costs time.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	return clientURL, err
}

func (cp *controlPlane) startAPIServer(etcdURL string, port int) error {
	_, err := cp.start("kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address="+bridgeIP.String(),
		"--advertise-address="+bridgeIP.String(),
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+cp.path("apiserver-certs"),
		"--tls-cert-file="+cp.path("apiserver.crt"),
		"--tls-private-key-file="+cp.path("apiserver.key"),
		"--client-ca-file="+cp.path("ca.crt"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+cp.path("sa.pub"),
		"--service-account-signing-key-file="+cp.path("sa.key"),
		"--service-cluster-ip-range="+commaList(cp.serviceCIDRs),
		"--service-node-port-range=30000-32767",
		"--allow-privileged=true",
		"--profiling=false",
	)
	return err
}

// startControllers starts kube-controller-manager and kube-scheduler, each
// serving its health endpoints on a loopback port with a certificate of our CA.
func (cp *controlPlane) startControllers() error {
	cp.componentPorts = map[string]int{}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		port, err := freePort(netip.MustParseAddr("127.0.0.1"))
		if err != nil {
			return err
		}
		cp.componentPorts[name] = port
	}
	kcm := cp.path("controller-manager.kubeconfig")
	if _, err := cp.start("kube-controller-manager",
		"--kubeconfig="+kcm,
		"--authentication-kubeconfig="+kcm,
		"--authorization-kubeconfig="+kcm,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(cp.componentPorts["kube-controller-manager"]),
		"--tls-cert-file="+cp.path("component.crt"),
		"--tls-private-key-file="+cp.path("component.key"),
		"--leader-elect=false",
		"--controllers=*",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+cp.path("sa.key"),
		"--root-ca-file="+cp.path("ca.crt"),
		"--cluster-signing-cert-file="+cp.path("ca.crt"),
		"--cluster-signing-key-file="+cp.path("ca.key"),
		// Nodes register with their Pod CIDRs (both families in a
		// dual-stack cluster), so node IPAM and --cluster-cidr stay off.
		"--allocate-node-cidrs=false",
		"--service-cluster-ip-range="+commaList(cp.serviceCIDRs),
		// Scale runs create many objects; the default 20 QPS would pace them.
		"--kube-api-qps=100",
		"--kube-api-burst=200",
		"--profiling=false",
	); err != nil {
		return err
	}
	sched := cp.path("scheduler.kubeconfig")
	_, err := cp.start("kube-scheduler",
		"--kubeconfig="+sched,
		"--authentication-kubeconfig="+sched,
		"--authorization-kubeconfig="+sched,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(cp.componentPorts["kube-scheduler"]),
		"--tls-cert-file="+cp.path("component.crt"),
		"--tls-private-key-file="+cp.path("component.key"),
		"--leader-elect=false",
		"--profiling=false",
	)
	return err
}

// exitedProcess returns an error for the first component that has exited.
func (cp *controlPlane) exitedProcess() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range cp.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// waitHealthy polls https://127.0.0.1:port/path of a component until it
// answers 200, a component dies, or ctx ends.
func (cp *controlPlane) waitHealthy(ctx context.Context, name, path string) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.ca.certPEM)
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d%s", cp.componentPorts[name], path)
	return cp.poll(ctx, name+" "+path, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
		}
		return nil
	})
}

// poll calls check every 100ms until it succeeds. It stops early when a
// component exits, and reports the last failure when ctx ends.
func (cp *controlPlane) poll(ctx context.Context, what string, check func(context.Context) error) error {
	log := klog.FromContext(ctx)
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	var last error
	for {
		if err := cp.exitedProcess(); err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(attempt)
		cancel()
		if last == nil {
			return nil
		}
		log.V(4).Info("Not ready yet", "what", what, "err", last)
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-ticker.C:
		}
	}
}

// stopAll stops the components in the reverse order of their start: the
// controllers together, then the apiserver, then etcd, which would otherwise
// wait for the apiserver's connections to drain.
func (cp *controlPlane) stopAll() {
	cp.mu.Lock()
	procs := cp.procs
	cp.procs = nil
	cp.mu.Unlock()
	var controllers sync.WaitGroup
	for _, p := range procs {
		if p.name == "kube-controller-manager" || p.name == "kube-scheduler" {
			controllers.Add(1)
			go func() { defer controllers.Done(); p.stop() }()
		}
	}
	controllers.Wait()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop() // no-op for the controllers, already stopped
	}
}

// logTails returns the end of each component log, for error messages.
func (cp *controlPlane) logTails() string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var b strings.Builder
	for _, p := range cp.procs {
		fmt.Fprintf(&b, "\n--- %s (%s), last lines ---\n%s", p.name, p.logPath, p.tail(logTailLines))
	}
	return b.String()
}

// errWithLogs adds the component log tails to a start error.
func (cp *controlPlane) errWithLogs(err error) error {
	if tails := cp.logTails(); tails != "" {
		return fmt.Errorf("%w%s", err, tails)
	}
	return err
}

var errNoRepoRoot = errors.New("npl test cluster: cannot find the repository root (a go.mod of module github.com/nodeportlocal/npl above the working directory); set BinDir (--bin-dir)")

// RepoRoot returns the repository root: the directory of the main module's
// go.mod (module github.com/nodeportlocal/npl), found by walking up from the
// working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("npl test cluster: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/nodeportlocal/npl\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errNoRepoRoot
		}
		dir = parent
	}
}
