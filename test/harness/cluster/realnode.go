package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/test/harness/images"
)

// A real node (Options.RealNodes) runs containerd, a kubelet and kube-proxy
// inside private mount, UTS and PID namespaces that share the node's network
// namespace: Pods are containers on the CNI plugins bridge (the node's cbr0),
// host-local (the node's Pod CIDR) and portmap. The PID namespace's init is
// the node: killing it ends every process of the node, its containers
// included, and its mounts go with its mount namespace. A tmpfs on /run,
// /var/lib and /var/log keeps what containerd and the kubelet write to fixed
// paths inside the node; everything else lives in the node's directory.

// realNodeBinaries are the programs of a real node, with how to get each.
var realNodeBinaries = []struct{ name, how string }{
	{"kubelet", "make tools"},
	{"kube-proxy", "make tools"},
	{"cni/bridge", "make tools"},
	{"cni/host-local", "make tools"},
	{"cni/loopback", "make tools"},
	{"cni/portmap", "make tools"},
}

// realNodeTools are the system programs of a real node.
var realNodeTools = []struct{ name, pkg string }{
	{"containerd", "containerd"}, {"runc", "runc"}, {"ctr", "containerd"}, {"nsenter", "util-linux"}, {"conntrack", "conntrack"},
}

// realNodeImages are the image tarballs every real node imports.
var realNodeImages = []string{images.Pause, images.Agent, images.LBSync, images.NPLCtl, images.Workload}

// cgroupRootDir is where the cgroup v1 hierarchies are mounted.
const cgroupRootDir = "/sys/fs/cgroup"

// checkRealNodes reports in one line what a real-node cluster lacks.
func checkRealNodes(binDir, imagesDir string) error {
	for _, b := range realNodeBinaries {
		p := filepath.Join(binDir, b.name)
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return fmt.Errorf("npl test cluster: %s not found: run '%s'", p, b.how)
		}
	}
	for _, t := range realNodeTools {
		if _, err := exec.LookPath(t.name); err != nil {
			return fmt.Errorf("npl test cluster: '%s' not found: run 'make deps' (apt-get install %s)", t.name, t.pkg)
		}
	}
	for _, name := range realNodeImages {
		p := filepath.Join(imagesDir, name+".tar")
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("npl test cluster: image %s not found: run 'make images'", p)
		}
	}
	if _, err := os.Stat(filepath.Join(cgroupRootDir, "memory")); err != nil {
		return fmt.Errorf("npl test cluster: real nodes need the cgroup v1 hierarchies under %s: %w", cgroupRootDir, err)
	}
	return nil
}

// realNode is the processes and files of one real node.
type realNode struct {
	n   *Node
	c   *Cluster
	dir string
	// cgroupRoot is the kubelet's cgroupRoot, created in every hierarchy so
	// that kubelets of different nodes do not remove each other's Pods.
	cgroupRoot string
	proc       *process
	// initPID is the node's init (outside its PID namespace), whose
	// /proc/<pid>/root shows the node's mounts.
	initPID int
}

// logTails returns the last lines of the node's component logs, for errors.
func (rn *realNode) logTails() string {
	var b strings.Builder
	for _, c := range []string{"containerd", "kubelet", "kube-proxy"} {
		name := rn.n.Name + "-" + c
		p := &process{name: name, logPath: filepath.Join(rn.c.cp.logDir, name+".log")}
		fmt.Fprintf(&b, "--- %s:\n%s\n", name, p.tail(logTailLines))
	}
	return b.String()
}

// realNodeStarted, when set, learns of every real node whose processes
// started (tests of the clean-up).
var realNodeStarted func(*realNode)

// realNodeAPIServerArgs are the apiserver flags real kubelets need: node
// credentials are restricted to their own Node and Pods, and the apiserver
// reaches kubelets (logs, exec) at their InternalIP with its own client
// certificate. It calls admission webhooks (the chart's readiness-gate
// injector) at their Pods' IPs rather than their Services' ClusterIPs, as
// an apiserver outside the cluster network must: no kube-proxy runs where
// it does, the Pod CIDRs are routed to the nodes.
func (cp *controlPlane) realNodeAPIServerArgs() ([]string, error) {
	pair, err := cp.ca.clientCert("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return nil, err
	}
	if err := writeFiles(map[string][]byte{
		cp.path("kubelet-client.crt"): pair.certPEM, cp.path("kubelet-client.key"): pair.keyPEM,
	}); err != nil {
		return nil, err
	}
	return []string{
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + cp.path("kubelet-client.crt"),
		"--kubelet-client-key=" + cp.path("kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--enable-aggregator-routing=true",
	}, nil
}

// startRealNodes registers each node with its Pod CIDR, starts its
// containerd, kubelet and kube-proxy, imports the images into every node at
// once and waits until every node is Ready.
func (c *Cluster) startRealNodes(ctx context.Context) error {
	tag, err := images.TagOf(filepath.Join(c.opts.ImagesDir, images.Pause+".tar"))
	if err != nil {
		return err
	}
	removeStaleCgroups(c.log)
	hostPathsBefore()
	for _, n := range c.nodes {
		rn := &realNode{n: n, c: c, dir: filepath.Join(c.dir, "nodes", n.Name), cgroupRoot: "/npl-" + c.runID + "-" + n.Name}
		c.realNodes = append(c.realNodes, rn)
	}
	return forEachNode(c.nodes, func(n *Node) error {
		rn := c.realNode(n)
		if err := rn.register(ctx); err != nil {
			return err
		}
		err := rn.start(ctx, tag)
		if err == nil {
			err = rn.importImages(ctx)
		}
		if err == nil {
			err = rn.waitReady(ctx)
		}
		if err != nil {
			return fmt.Errorf("node %s: %w\n%s", n.Name, err, rn.logTails())
		}
		return nil
	})
}

func (c *Cluster) realNode(n *Node) *realNode {
	for _, rn := range c.realNodes {
		if rn.n == n {
			return rn
		}
	}
	return nil
}

// register creates the Node with its Pod CIDR and addresses, so the kubelet,
// which cannot set them, finds them; the kubelet writes the status.
func (rn *realNode) register(ctx context.Context) error {
	node := rn.n.object()
	node.Status = corev1.NodeStatus{}
	_, err := rn.c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", rn.n.Name, err)
	}
	return nil
}

func (rn *realNode) path(name string) string { return filepath.Join(rn.dir, name) }

// socket is containerd's API socket, reachable from outside the node.
func (rn *realNode) socket() string { return rn.path("containerd.sock") }

// writeFiles writes the node's credentials and configuration.
func (rn *realNode) writeFiles(sandboxImage string) error {
	for _, d := range []string{"cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volume-plugins", "containerd/root", "containerd/state"} {
		if err := os.MkdirAll(rn.path(d), 0o755); err != nil {
			return err
		}
	}
	cp := rn.c.cp
	kubelet, err := cp.ca.clientCert("system:node:"+rn.n.Name, "system:nodes")
	if err != nil {
		return err
	}
	proxy, err := cp.ca.clientCert("system:kube-proxy")
	if err != nil {
		return err
	}
	if err := writeKubeconfig(rn.path("kubelet.kubeconfig"), cp.serverURL, cp.ca.certPEM, kubelet, "system:node:"+rn.n.Name); err != nil {
		return err
	}
	if err := writeKubeconfig(rn.path("kube-proxy.kubeconfig"), cp.serverURL, cp.ca.certPEM, proxy, "system:kube-proxy"); err != nil {
		return err
	}
	data := map[string]any{
		"Dir": rn.dir, "BinDir": rn.c.opts.BinDir, "Node": rn.n, "CgroupRoot": rn.cgroupRoot,
		"SandboxImage": sandboxImage, "CA": cp.path("ca.crt"), "ClusterCIDR": podNetwork,
		"ProxyMode": rn.c.opts.KubeProxyMode, "DualStack": rn.c.opts.DualStack,
	}
	if rn.c.opts.DualStack {
		data["ClusterCIDR"] = podNetwork + "," + podNetworkV6
	}
	for name, tmpl := range map[string]*template.Template{
		"containerd.toml":   containerdConfig,
		"cni-template.json": cniTemplate,
		"kubelet.yaml":      kubeletConfig,
		"kube-proxy.yaml":   kubeProxyConfig,
	} {
		var b bytes.Buffer
		if err := tmpl.Execute(&b, data); err != nil {
			return fmt.Errorf("render %s: %w", name, err)
		}
		if err := os.WriteFile(rn.path(name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// podNetwork holds every node's Pod CIDR (198.19.i.0/24), podNetworkV6
// every node's IPv6 one in a dual-stack cluster (fd00:198:19:i::/64).
const (
	podNetwork   = "198.19.0.0/16"
	podNetworkV6 = "fd00:198:19::/48"
)

// start creates the node's cgroups and starts its namespaces with
// containerd, the kubelet and kube-proxy, and returns when containerd answers.
func (rn *realNode) start(ctx context.Context, sandboxImage string) error {
	if err := rn.writeFiles(sandboxImage); err != nil {
		return err
	}
	if err := rn.createCgroups(); err != nil {
		return err
	}
	logDir := rn.c.cp.logDir
	bin := rn.c.opts.BinDir
	// Order matters: the tmpfs on /run first, or containerd writes the host's
	// /run/containerd. Each component logs to its own file.
	script := strings.Join([]string{
		"set -e",
		"mount -t tmpfs -o mode=0755 npl-run /run",
		"mount -t tmpfs -o mode=0755 npl-var-lib /var/lib",
		"mount -t tmpfs -o mode=0755 npl-var-log /var/log",
		"mkdir -p /run/netns",
		"hostname " + rn.n.Name,
		fmt.Sprintf("containerd --config %s >>%s 2>&1 &", rn.path("containerd.toml"), filepath.Join(logDir, rn.n.Name+"-containerd.log")),
		// The kubelet exits at once when containerd's socket is not there
		// yet, which a loaded machine makes likely: wait for it (bounded,
		// 60 s; start's poll reports a containerd that never answers).
		fmt.Sprintf("i=0; while [ ! -S %s ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done", rn.socket()),
		fmt.Sprintf("%s --config=%s --kubeconfig=%s --root-dir=%s --hostname-override=%s --node-ip=%s >>%s 2>&1 &",
			filepath.Join(bin, "kubelet"), rn.path("kubelet.yaml"), rn.path("kubelet.kubeconfig"), rn.path("kubelet"),
			rn.n.Name, commaList(rn.n.IPs()), filepath.Join(logDir, rn.n.Name+"-kubelet.log")),
		rn.kubeProxyCommand() + " &",
		"wait",
	}, "\n")
	// nsenter joins the node's network namespace and execs unshare, which
	// forks the node's init; --kill-child ends it (and with it the PID
	// namespace) when unshare dies, whatever kills it.
	p, err := startProcess(rn.n.Name, "nsenter", logDir, rn.c.opts.Out,
		"--net="+rn.n.NetnsPath(), "--",
		"unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "--propagation", "private", "--kill-child",
		"--", "env", rn.marker(), "/bin/sh", "-c", script)
	if err != nil {
		return err
	}
	rn.proc = p
	startedRealNodes.Lock()
	startedRealNodes.rns = append(startedRealNodes.rns, rn)
	startedRealNodes.Unlock()
	if realNodeStarted != nil {
		realNodeStarted(rn)
	}
	return rn.c.cp.poll(ctx, "containerd of node "+rn.n.Name, func(ctx context.Context) error {
		if err := p.exited(); err != nil {
			return fmt.Errorf("%w: %s", err, p.tail(logTailLines))
		}
		if rn.initPID == 0 {
			child, err := childOf(rn.proc.cmd.Process.Pid)
			if err != nil {
				return err
			}
			rn.initPID = child
		}
		return rn.ctr(ctx, "version")
	})
}

// kubeProxyCommand is the shell command that runs the node's kube-proxy,
// logging to its file.
func (rn *realNode) kubeProxyCommand() string {
	return fmt.Sprintf("%s --config=%s >>%s 2>&1", filepath.Join(rn.c.opts.BinDir, "kube-proxy"), rn.path("kube-proxy.yaml"),
		filepath.Join(rn.c.cp.logDir, rn.n.Name+"-kube-proxy.log"))
}

// childOf returns a child process of pid.
func childOf(pid int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		if i > 0 && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			return strconv.Atoi(e.Name())
		}
	}
	return 0, fmt.Errorf("process %d has no child", pid)
}

// ctr runs ctr against the node's containerd, in the k8s.io namespace the
// kubelet uses.
func (rn *realNode) ctr(ctx context.Context, args ...string) error {
	return runContext(ctx, "ctr", append([]string{"--address", rn.socket(), "--namespace", "k8s.io"}, args...)...)
}

// importImages loads every image tarball into the node's containerd.
func (rn *realNode) importImages(ctx context.Context) error {
	began := time.Now()
	for _, name := range realNodeImages {
		if err := rn.ctr(ctx, "images", "import", filepath.Join(rn.c.opts.ImagesDir, name+".tar")); err != nil {
			return fmt.Errorf("import image %s: %w", name, err)
		}
	}
	klog.FromContext(ctx).V(1).Info("Images imported", "node", rn.n.Name, "duration", time.Since(began).Round(time.Millisecond))
	return nil
}

// waitReady waits for kube-proxy to serve /healthz and for the kubelet to
// report the node Ready.
func (rn *realNode) waitReady(ctx context.Context) error {
	if err := rn.c.cp.poll(ctx, "kube-proxy of node "+rn.n.Name+" healthy", func(ctx context.Context) error {
		if err := rn.proc.exited(); err != nil {
			return fmt.Errorf("%w: %s", err, rn.proc.tail(logTailLines))
		}
		return rn.n.Do(kubeProxyHealthy)
	}); err != nil {
		return err
	}
	return rn.c.cp.poll(ctx, "node "+rn.n.Name+" Ready", func(ctx context.Context) error {
		if err := rn.proc.exited(); err != nil {
			return fmt.Errorf("%w: %s", err, rn.proc.tail(logTailLines))
		}
		node, err := rn.c.client.CoreV1().Nodes().Get(ctx, rn.n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("not Ready: %s: %s", cond.Reason, cond.Message)
			}
		}
		return errors.New("not Ready: no Ready condition yet")
	})
}

// kubeProxyHealthy asks kube-proxy's /healthz, on loopback of the network
// namespace it runs in (the connection is opened on this thread, which
// n.Do puts in the node's namespace).
func kubeProxyHealthy() error {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:10256", 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-proxy /healthz: %s", resp.Status)
	}
	return nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies.
func cgroupHierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupRootDir)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		// unified too: the kubelet also creates its cgroupRoot there.
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(cgroupRootDir, e.Name()))
		}
	}
	return dirs, nil
}

func (rn *realNode) createCgroups() error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.MkdirAll(filepath.Join(h, rn.cgroupRoot), 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", filepath.Join(h, rn.cgroupRoot), err)
		}
	}
	return nil
}

// removeCgroups removes the node's cgroups, deepest first, once their
// processes are gone.
func (rn *realNode) removeCgroups() error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		errs = append(errs, removeCgroupTree(filepath.Join(h, rn.cgroupRoot), 20*time.Second))
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes the cgroup at root and those below it, deepest
// first; cgroups still busy (their last processes exiting) are retried
// until wait has passed.
func removeCgroupTree(root string, wait time.Duration) error {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	deadline := time.Now().Add(wait)
	for {
		var busy []string
		var errs []error
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				busy = append(busy, d)
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if len(errs) > 3 {
				errs = append(errs[:3], fmt.Errorf("and %d more cgroups", len(errs)-3))
			}
			return errors.Join(errs...)
		}
		dirs = busy
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupRootPattern matches the cgroupRoot of every real node: npl-<run>-<node>.
var cgroupRootPattern = regexp.MustCompile(`^npl-([0-9a-f]+)-npl-node-\d+$`)

// removeStaleCgroups removes the cgroups of real nodes whose run died
// without closing (its directory, which removeStaleDirs removes first, is
// gone); the kernel ended their processes with the run.
func removeStaleCgroups(log klog.Logger) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return
	}
	for _, h := range hs {
		entries, _ := os.ReadDir(h)
		for _, e := range entries {
			m := cgroupRootPattern.FindStringSubmatch(e.Name())
			if m == nil {
				continue
			}
			if dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "npl-cluster-"+m[1]+"-*")); len(dirs) > 0 {
				continue
			}
			log.V(1).Info("Removing the cgroups of a dead run's node", "cgroup", filepath.Join(h, e.Name()))
			_ = removeCgroupTree(filepath.Join(h, e.Name()), 0)
		}
	}
}

// stop kills the node's init, and with it every process of the node, waits
// until they are gone and removes the node's cgroups.
func (rn *realNode) stop() error {
	if rn.proc != nil {
		_ = rn.proc.cmd.Process.Kill()
		<-rn.proc.done
	}
	var errs []error
	deadline := time.Now().Add(10 * time.Second)
	for len(rn.processes()) > 0 {
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("node %s: processes %v still running", rn.n.Name, rn.processes()))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := rn.removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// processes lists the node's processes: those that inherited the node's
// marker from its init (containerd, its shims, the kubelet, kube-proxy),
// and the containers', which have an environment of their own and cgroups
// under the node's cgroupRoot.
func (rn *realNode) processes() []int {
	entries, _ := os.ReadDir("/proc")
	marker := []byte(rn.marker() + "\x00")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// The node's own processes inherit its marker; PID namespace inodes
		// are reused by the kernel, so another run's node may have ours.
		if env, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(env, marker) {
			pids = append(pids, pid)
			continue
		}
		if cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup"); err == nil && bytes.Contains(cg, []byte(":"+rn.cgroupRoot+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// marker is the environment variable every process of the node inherits
// from its init, unique to the run and the node.
func (rn *realNode) marker() string { return "NPL_REAL_NODE=" + strings.TrimPrefix(rn.cgroupRoot, "/") }

// stopRealNodes stops every real node at once.
func (c *Cluster) stopRealNodes() error {
	errs := make([]error, len(c.realNodes))
	var wg sync.WaitGroup
	for i, rn := range c.realNodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = rn.stop() }()
	}
	wg.Wait()
	if c.releaseRealNodes != nil {
		c.releaseRealNodes()
		c.releaseRealNodes = nil
	}
	return errors.Join(errs...)
}

// realNodesLockFile serialises real-node clusters on the machine, across
// test processes: `go test ./...` runs packages in parallel, and two sets of
// containerds and kubelets starting at once on a small machine starve each
// other (a node once stayed NotReady past its deadline that way).
var realNodesLockFile = filepath.Join(os.TempDir(), "npl-real-nodes.lock")

// lockRealNodes waits until no other real-node cluster runs on the
// machine, and returns the function that lets the next one start. The lock
// is a flock, so a process that dies releases it. The wait is not the
// start's: ctx's cancellation ends it, its deadline does not (a start given
// two minutes behind another package's cluster that runs for six would fail
// while it waits, and whether it does would depend on which package the
// machine ran first). The context returned is ctx with its deadline moved
// by the time waited, for the start that follows; its CancelFunc releases
// what it holds.
func lockRealNodes(ctx context.Context, log klog.Logger) (context.Context, context.CancelFunc, func(), error) {
	f, err := os.OpenFile(realNodesLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("npl test cluster: real nodes lock: %w", err)
	}
	wait, stopWait := withoutDeadline(ctx)
	defer stopWait()
	began := time.Now()
	waited := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, nil, nil, fmt.Errorf("npl test cluster: real nodes lock %s: %w", realNodesLockFile, err)
		}
		if !waited {
			log.Info("Waiting for another real-node cluster on this machine to close", "lock", realNodesLockFile)
			waited = true
		}
		select {
		case <-wait.Done():
			f.Close()
			return nil, nil, nil, fmt.Errorf("npl test cluster: wait for another real-node cluster to close (%s): %w", realNodesLockFile, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	release := func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }
	if waited {
		log.Info("Another real-node cluster closed: starting", "waited", time.Since(began).Round(time.Second))
	}
	start, cancel := deadlineMoved(ctx, time.Since(began))
	return start, cancel, release, nil
}

// withoutDeadline is ctx without its deadline: it ends when ctx is
// canceled, not when ctx's deadline passes.
func withoutDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return out, func() { stop(); cancel() }
}

// deadlineMoved is ctx with its deadline, if it has one, d later; it ends
// at once when ctx is canceled.
func deadlineMoved(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || d <= 0 {
		return context.WithCancel(ctx)
	}
	base, stop := withoutDeadline(ctx)
	out, cancel := context.WithDeadline(base, deadline.Add(d))
	return out, func() { cancel(); stop() }
}

var containerdConfig = template.Must(template.New("containerd").Parse(`version = 2
root = "{{.Dir}}/containerd/root"
state = "{{.Dir}}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{{.Dir}}/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.SandboxImage}}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.BinDir}}/cni"
    conf_dir = "{{.Dir}}/cni/net.d"
    conf_template = "{{.Dir}}/cni-template.json"
`))

// cniTemplate is the CNI configuration containerd writes once the kubelet
// passes the node's Pod CIDR: Pods join cbr0, whose address the node's
// network already holds.
var cniTemplate = template.Must(template.New("cni").Delims("[[", "]]").Parse(`{
  "cniVersion": "1.0.0",
  "name": "npl",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cbr0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "[[.Dir]]/cni/ipam",
        "ranges": [{{range $i, $range := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$range}}"}]{{end}}],
        "routes": [{"dst": "0.0.0.0/0"}[[if .DualStack]], {"dst": "::/0"}[[end]]]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`))

var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://{{.Dir}}/containerd.sock
address: {{.Node.IP}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {{.CA}}
authorization:
  mode: Webhook
clusterDomain: cluster.local
podLogsDir: {{.Dir}}/pod-logs
volumePluginDir: {{.Dir}}/volume-plugins
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
`))

var kubeProxyConfig = template.Must(template.New("kube-proxy").Parse(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: {{.ProxyMode}}
hostnameOverride: {{.Node.Name}}
clusterCIDR: {{.ClusterCIDR}}
clientConnection:
  kubeconfig: {{.Dir}}/kube-proxy.kubeconfig
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`))

// PodToken returns the ServiceAccount token the kubelet of a real node
// mounted into a running Pod (its projected volume), so that a test can act
// with exactly the Pod's credentials.
func (c *Cluster) PodToken(ctx context.Context, namespace, name string) (string, error) {
	pod, err := c.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("token of pod %s/%s: %w", namespace, name, err)
	}
	for _, rn := range c.realNodes {
		if rn.n.Name != pod.Spec.NodeName {
			continue
		}
		// The kubelet mounts the volume in the node's mount namespace:
		// read it through the node's init.
		root := fmt.Sprintf("/proc/%d/root", rn.initPID)
		files, _ := filepath.Glob(filepath.Join(root, rn.path("kubelet"), "pods", string(pod.UID), "volumes", "kubernetes.io~projected", "*", "token"))
		if len(files) != 1 {
			return "", fmt.Errorf("token of pod %s/%s: %d projected token files on %s", namespace, name, len(files), rn.n.Name)
		}
		b, err := os.ReadFile(files[0])
		return string(b), err
	}
	return "", fmt.Errorf("token of pod %s/%s: it does not run on a real node (node %q)", namespace, name, pod.Spec.NodeName)
}
