// Package cluster runs a real Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) on one machine with no container
// runtime, for tests and the demo. Each node is a network namespace, and an
// in-process stand-in for the kubelet runs each Pod scheduled to it as a
// network namespace with small built-in servers (HTTP answering with the Pod
// name, UDP echo) and writes Pod status as a kubelet would. Containers of the
// Gateway API conformance suite's images run as the suite needs them:
// echo-basic (HTTP, TCP, UDP and gRPC echo) as a process in the Pod's
// namespace, CoreDNS as a small DNS server of ours (dnsserver.go).
//
// Everything happens inside a private network and mount namespace that
// RunMain (tests) or Reexec (commands) enters first; the host's own network
// namespace is never changed. Addresses come from 198.18.0.0/15: the bridge
// npl-br0 is 198.18.0.1, node i is 198.18.0.(10+i) with Pod CIDR
// 198.19.i.0/24, Services get 198.18.128.0/20.
//
// A dual-stack cluster (Options.DualStack) adds IPv6 unique local addresses
// that mirror the IPv4 ones: npl-br0 is also fd00:198:18::1, node i also
// fd00:198:18::(10+i) with Pod CIDR fd00:198:19:i::/64 (a Pod's IPv6 address
// ends like its IPv4 one), Services also get fd00:198:18:128::/108 (the
// groups read as written, like the IPv4 octets, although IPv6 groups are
// hexadecimal).
//
// One cluster runs at a time per process; the expected use is one per test
// binary, shared by its tests (see Shared).
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

// maxNodes keeps node addresses (198.18.0.10+i) and Pod CIDRs
// (198.19.i.0/24) inside their ranges.
const maxNodes = 200

// Options configure a cluster. The zero value is a 3-node cluster.
type Options struct {
	// Nodes is the number of nodes; 0 means 3.
	Nodes int
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and
	// kube-scheduler; empty means bin/ at the repository root (the directory of
	// the main module's go.mod above the working directory).
	BinDir string
	// LogDir receives one log file per component and is kept after Close;
	// empty means a directory inside the cluster's temporary directory, which
	// Close removes. A failed Start includes the tail of each log in its error.
	LogDir string
	// Out, when set, also receives the component logs, each line prefixed with
	// the component name.
	Out io.Writer
	// ReadinessDelay is how long after a Pod starts its containers become
	// ready, unless the Pod's test.npl.io/readiness-delay annotation says
	// otherwise.
	ReadinessDelay time.Duration
	// TerminationDelay is how long a Pod that is being deleted keeps running
	// (and serving) before the kubelet stand-in removes it, so that drain
	// tests can watch a terminating Pod.
	TerminationDelay time.Duration
	// KubeProxy runs a stand-in for kube-proxy's NodePort handling: every
	// node opens the nodePorts of NodePort and LoadBalancer Services and
	// DNATs them to a random ready endpoint, with masquerade.
	KubeProxy bool
	// NoKubelet creates the nodes but runs no Pods: scheduled Pods stay
	// Pending unless the test writes their status. For scale benchmarks.
	NoKubelet bool
	// DualStack gives the bridge, every node and every Pod an IPv6 address
	// besides the IPv4 one (see the package documentation): Nodes get both
	// InternalIPs and Pod CIDRs, Pods both podIPs, the Pod servers listen on
	// both families, and the apiserver allocates ClusterIPs of both, so that
	// IPv6-only and dual-stack Services can be created. IPv4 stays the
	// primary family, so a Service without ipFamilyPolicy is IPv4-only.
	// Off by default, so that IPv4 tests see IPv4-only nodes and Pods.
	DualStack bool
	// RealNodes makes every node a real one: containerd, a real kubelet with
	// its own node credentials and a real kube-proxy (iptables mode) in
	// private mount, UTS and PID namespaces on the node's network, Pods as
	// containers on the CNI plugins bridge, host-local and portmap, and the
	// images of ImagesDir imported into every node. The stand-ins
	// (KubeProxy, ReadinessDelay, TerminationDelay, NoKubelet) do not apply.
	// With DualStack too, each kubelet has both node IPs and both Pod
	// CIDRs (host-local gets a range of each family, so every Pod an
	// address of each), and kube-proxy serves both families.
	RealNodes bool
	// ImagesDir holds the image tarballs of `make images`; empty means
	// BinDir/images.
	ImagesDir string
	// KubeProxyMode is the mode of the real nodes' kube-proxy: iptables
	// (empty) or nftables.
	KubeProxyMode string
}

func (o Options) withDefaults() (Options, error) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes < 0 || o.Nodes > maxNodes {
		return o, fmt.Errorf("npl test cluster: Nodes must be between 1 and %d, not %d", maxNodes, o.Nodes)
	}
	if o.BinDir == "" {
		dir, err := DefaultBinDir()
		if err != nil {
			return o, err
		}
		o.BinDir = dir
	}
	if o.ImagesDir == "" {
		o.ImagesDir = filepath.Join(o.BinDir, "images")
	}
	if o.RealNodes && (o.KubeProxy || o.NoKubelet) {
		return o, errors.New("npl test cluster: RealNodes run a real kubelet and kube-proxy: KubeProxy and NoKubelet do not apply")
	}
	switch o.KubeProxyMode {
	case "":
		o.KubeProxyMode = "iptables"
	case "iptables", "nftables":
	default:
		return o, fmt.Errorf("npl test cluster: KubeProxyMode %q: want iptables or nftables", o.KubeProxyMode)
	}
	return o, nil
}

// Cluster is a running local cluster. Close stops it and removes everything
// it created.
type Cluster struct {
	opts  Options
	runID string
	dir   string
	log   klog.Logger

	cp         *controlPlane
	restConfig *rest.Config
	client     kubernetes.Interface
	nodes      []*Node
	kubelets   map[string]*kubelet // by node name
	realNodes  []*realNode
	// releaseRealNodes lets the next real-node cluster on the machine start.
	releaseRealNodes func()

	// bgCtx lives from Start to Close; heartbeats and kubelets run under it.
	bgCtx    context.Context
	bgCancel context.CancelFunc

	podSeq        atomic.Uint64
	userSeq       atomic.Uint64
	startDuration time.Duration

	closeOnce sync.Once
	closeErr  error
}

// Start starts a cluster and returns when the apiserver is ready, the
// controller-manager and the scheduler are healthy, the nodes are registered
// and the default ServiceAccount exists. ctx bounds the start only: the
// cluster runs until Close. Real nodes first wait for any other real-node
// cluster on the machine to close, which ctx's cancellation ends but its
// deadline does not: the start gets its whole time after the wait. On
// error, everything started is removed and the error carries the tail of
// each component log.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := CheckPrerequisites(); err != nil {
		return nil, err
	}
	if err := ensurePrivateNetns(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := CheckBinaries(opts.BinDir); err != nil {
		return nil, err
	}
	if opts.RealNodes {
		if err := checkRealNodes(opts.BinDir, opts.ImagesDir); err != nil {
			return nil, err
		}
	}
	began := time.Now()
	c := &Cluster{opts: opts, runID: newRunID(), kubelets: map[string]*kubelet{}}
	c.log = klog.FromContext(ctx).WithName("npl-cluster").WithValues("run", c.runID)
	if err := claimActive(c); err != nil {
		return nil, err
	}
	if err := c.start(klog.NewContext(ctx, c.log)); err != nil {
		if c.cp != nil {
			err = c.cp.errWithLogs(err)
		}
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up after the failed start: %w", cerr))
		}
		return nil, fmt.Errorf("start npl test cluster: %w", err)
	}
	c.startDuration = time.Since(began)
	c.log.Info("Cluster started", "nodes", opts.Nodes, "dualStack", opts.DualStack, "apiserver", c.cp.serverURL,
		"kubeconfig", c.Kubeconfig(), "duration", c.startDuration.Round(time.Millisecond))
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	if c.opts.RealNodes {
		// First: one real-node cluster at a time on the machine, and the
		// wait for it is not the start's (lockRealNodes).
		start, cancel, release, err := lockRealNodes(ctx, c.log)
		if err != nil {
			return err
		}
		defer cancel()
		ctx, c.releaseRealNodes = start, release
	}
	removeStaleDirs(c.log)
	dir, err := os.MkdirTemp("", "npl-cluster-"+c.runID+"-")
	if err != nil {
		return fmt.Errorf("create temporary directory: %w", err)
	}
	c.dir = dir
	// The pid lets a later run remove this directory if we die uncleanly.
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("write pid file: %w", err)
	}
	logDir := c.opts.LogDir
	if logDir == "" {
		logDir = filepath.Join(dir, "logs")
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	c.cp = &controlPlane{dir: dir, logDir: logDir, binDir: c.opts.BinDir, out: c.opts.Out, serviceCIDRs: serviceCIDRs(c.opts.DualStack)}

	if err := createBridge(ctx, c.opts.DualStack); err != nil {
		return fmt.Errorf("create bridge %s: %w", bridgeName, err)
	}
	apiPort, err := freePort(bridgeIP)
	if err != nil {
		return err
	}
	if err := c.cp.writeCredentials(apiPort); err != nil {
		return err
	}
	c.restConfig = &rest.Config{
		Host: c.cp.serverURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: c.cp.ca.certPEM, CertData: c.cp.admin.certPEM, KeyData: c.cp.admin.keyPEM,
		},
		// Tests create objects in bursts; client-side throttling would only slow them.
		QPS:   200,
		Burst: 400,
	}
	if c.client, err = kubernetes.NewForConfig(c.restConfig); err != nil {
		return fmt.Errorf("build client: %w", err)
	}

	if c.opts.RealNodes {
		args, err := c.cp.realNodeAPIServerArgs()
		if err != nil {
			return err
		}
		c.cp.extraArgs = map[string][]string{"kube-apiserver": args}
	}
	etcdURL, err := c.cp.startEtcd()
	if err != nil {
		return err
	}
	if err := c.cp.startAPIServer(etcdURL, apiPort); err != nil {
		return err
	}
	// Node networks need no API: build them while the apiserver boots.
	for i := range c.opts.Nodes {
		c.nodes = append(c.nodes, newNode(c, i))
	}
	if err := forEachNode(c.nodes, func(n *Node) error { return n.setupNetwork(ctx) }); err != nil {
		return err
	}
	if err := c.cp.poll(ctx, "kube-apiserver /readyz", func(ctx context.Context) error {
		_, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return err
	}
	if err := c.cp.startControllers(); err != nil {
		return err
	}

	c.bgCtx, c.bgCancel = context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), c.log))
	if c.opts.RealNodes {
		if err := c.startRealNodes(ctx); err != nil {
			return err
		}
		return c.waitControllers(ctx)
	}
	if err := forEachNode(c.nodes, func(n *Node) error { return n.register(ctx) }); err != nil {
		return err
	}
	for _, n := range c.nodes {
		n.StartHeartbeat()
	}
	if c.opts.KubeProxy {
		if err := c.startKubeProxy(c.bgCtx); err != nil {
			return err
		}
	}
	if !c.opts.NoKubelet {
		for _, n := range c.nodes {
			k := newKubelet(c, n)
			c.kubelets[n.Name] = k
			if err := k.start(c.bgCtx); err != nil {
				return err
			}
		}
	}

	return c.waitControllers(ctx)
}

// waitControllers waits for the controller-manager, the scheduler and the
// default ServiceAccount.
func (c *Cluster) waitControllers(ctx context.Context) error {
	if err := c.cp.waitHealthy(ctx, "kube-controller-manager", "/healthz"); err != nil {
		return err
	}
	if err := c.cp.waitHealthy(ctx, "kube-scheduler", "/readyz"); err != nil {
		return err
	}
	return c.cp.poll(ctx, "the default ServiceAccount", func(ctx context.Context) error {
		_, err := c.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// forEachNode runs fn for every node at once and joins the errors.
func forEachNode(nodes []*Node, fn func(*Node) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn(n) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close stops the kubelet stand-ins and heartbeats, removes every Pod and
// node namespace, the bridge and its routes, stops the components (SIGTERM,
// then SIGKILL after a few seconds) and removes the temporary directory. It is
// safe to call more than once and after a failed Start.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Cluster) close() error {
	defer releaseActive(c)
	var errs []error
	if c.bgCancel != nil {
		c.bgCancel()
	}
	for _, k := range c.kubelets {
		k.stop()
	}
	for _, n := range c.nodes {
		n.StopHeartbeat()
	}
	if err := c.stopRealNodes(); err != nil {
		errs = append(errs, err)
	}
	// Before the bridge goes: the apiserver's shutdown hooks call 198.18.0.1.
	if c.cp != nil {
		c.cp.stopAll()
	}
	for _, n := range c.nodes {
		if err := n.teardownNetwork(); err != nil {
			errs = append(errs, fmt.Errorf("remove the network of node %s: %w", n.Name, err))
		}
	}
	// Whatever a lost Pod left behind carries our run id.
	if names, err := listNetns(); err != nil {
		errs = append(errs, err)
	} else {
		for _, name := range names {
			if strings.HasPrefix(name, "npl-"+c.runID+"-") {
				if err := deleteNetns(name); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := deleteBridge(); err != nil {
		errs = append(errs, fmt.Errorf("delete bridge: %w", err))
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", c.dir, err))
		}
	}
	if len(errs) == 0 {
		c.log.V(1).Info("Cluster closed")
	}
	return errors.Join(errs...)
}

// Kubeconfig is the path of the admin kubeconfig (user in system:masters).
func (c *Cluster) Kubeconfig() string { return c.cp.path("kubeconfig") }

// RESTConfig returns a new copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Client returns the admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// APIServerURL is https://198.18.0.1:<port>, reachable from the test
// namespace and from every node namespace.
func (c *Cluster) APIServerURL() string { return c.cp.serverURL }

// Nodes returns the nodes, npl-node-0 first.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Node returns the node of that name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// PodNetns returns the name of the network namespace that runs a Pod, when
// the kubelet stand-in runs it in one (not for hostNetwork Pods).
func (c *Cluster) PodNetns(namespace, name string) (string, bool) {
	for _, k := range c.kubelets {
		if netns := k.netnsOf(namespace + "/" + name); netns != "" {
			return netns, true
		}
	}
	return "", false
}

// PodDo runs fn on an OS thread inside a running Pod's network namespace, as
// if it ran in the Pod (see Node.Do for what that covers). It fails for a Pod
// that no kubelet stand-in runs in a namespace of its own.
func (c *Cluster) PodDo(namespace, name string, fn func() error) error {
	netns, ok := c.PodNetns(namespace, name)
	if !ok {
		return fmt.Errorf("run in pod %s/%s: it does not run in a network namespace here", namespace, name)
	}
	if err := doInNetns(netnsPath(netns), fn); err != nil {
		return fmt.Errorf("run in pod %s/%s: %w", namespace, name, err)
	}
	return nil
}

// DualStack reports whether the cluster has IPv6 besides IPv4.
func (c *Cluster) DualStack() bool { return c.opts.DualStack }

// ImagesDir is the directory of the image tarballs real nodes imported.
func (c *Cluster) ImagesDir() string { return c.opts.ImagesDir }

// StartDuration is how long Start took.
func (c *Cluster) StartDuration() time.Duration { return c.startDuration }

// LogDir is the directory of the component logs.
func (c *Cluster) LogDir() string { return c.cp.logDir }

// CAPEM returns the cluster CA certificate, PEM encoded.
func (c *Cluster) CAPEM() []byte { return append([]byte(nil), c.cp.ca.certPEM...) }

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// UserKubeconfig writes a kubeconfig that authenticates with a client
// certificate as user, member of groups, and returns its path. RBAC decides
// what it may do: use it to test permissions.
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, error) {
	if user == "" {
		return "", errors.New("user kubeconfig: empty user name")
	}
	pair, err := c.cp.ca.clientCert(user, groups...)
	if err != nil {
		return "", fmt.Errorf("user kubeconfig for %s: %w", user, err)
	}
	name := fmt.Sprintf("kubeconfig-%s-%d", unsafeFileChars.ReplaceAllString(user, "_"), c.userSeq.Add(1))
	path := c.cp.path(name)
	if err := writeKubeconfig(path, c.cp.serverURL, c.cp.ca.certPEM, pair, user); err != nil {
		return "", fmt.Errorf("user kubeconfig for %s: %w", user, err)
	}
	return path, nil
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as a
// ServiceAccount, with a token from the TokenRequest API, as a Pod running
// under it would, and returns its path. RBAC decides what it may do.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	expiry := int64((24 * time.Hour).Seconds())
	tr, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	path := c.cp.path(fmt.Sprintf("kubeconfig-%s-%d", unsafeFileChars.ReplaceAllString(user, "_"), c.userSeq.Add(1)))
	if err := writeKubeconfigAuth(path, c.cp.serverURL, c.cp.ca.certPEM, user, &clientcmdapi.AuthInfo{Token: tr.Status.Token}); err != nil {
		return "", fmt.Errorf("kubeconfig of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return path, nil
}

// TestNamespace creates a namespace named after the test (unique per call)
// and deletes it when the test ends.
func (c *Cluster) TestNamespace(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(testNameChars.ReplaceAllString(t.Name(), "-"))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-") + "-" + strconv.FormatInt(time.Now().UnixNano()%100000, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CreateNamespace(ctx, name); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

var testNameChars = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// CreateNamespace creates a namespace and waits for its default
// ServiceAccount, without which the apiserver refuses Pods.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	err = pollUntil(ctx, 100*time.Millisecond, func() (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("wait for the default ServiceAccount of namespace %s: %w", name, err)
	}
	return ns, nil
}

// WaitForPods waits until exactly n Pods in ns match selector (nil: all),
// terminating ones included, and, when ready is true, every one of them is
// Running, Ready and not terminating. It returns them sorted by name.
func (c *Cluster) WaitForPods(ctx context.Context, ns string, selector labels.Selector, n int, ready bool) ([]corev1.Pod, error) {
	if selector == nil {
		selector = labels.Everything()
	}
	var last string
	var pods []corev1.Pod
	err := pollUntil(ctx, 200*time.Millisecond, func() (bool, error) {
		list, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		pods = list.Items
		readyCount := 0
		for i := range pods {
			if podRunningAndReady(&pods[i]) {
				readyCount++
			}
		}
		last = fmt.Sprintf("%d pods, %d running and ready", len(pods), readyCount)
		return len(pods) == n && (!ready || readyCount == n), nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for %d pods in %s matching %q (ready=%t): %w (last seen: %s)", n, ns, selector, ready, err, last)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

func podRunningAndReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ChangePodIP moves a running Pod to a new network namespace with a new IP
// (its servers follow), rewrites its status and returns the new IP.
func (c *Cluster) ChangePodIP(ctx context.Context, ns, name string) (netip.Addr, error) {
	pod, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("change IP of pod %s/%s: %w", ns, name, err)
	}
	if pod.Spec.HostNetwork {
		return netip.Addr{}, fmt.Errorf("change IP of pod %s/%s: it uses the host network", ns, name)
	}
	k := c.kubelets[pod.Spec.NodeName]
	if k == nil {
		return netip.Addr{}, fmt.Errorf("change IP of pod %s/%s: no kubelet runs it (node %q)", ns, name, pod.Spec.NodeName)
	}
	ip, err := k.changePodIP(ctx, ns+"/"+name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("change IP of pod %s/%s: %w", ns, name, err)
	}
	return ip, nil
}

// pollUntil calls cond every interval until it returns true or an error, or
// ctx ends.
func pollUntil(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

func newRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b)
}

// removeStaleDirs removes the temporary directories of earlier runs whose
// process is gone (killed before Close could run).
func removeStaleDirs(log klog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "npl-cluster-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err != nil {
			continue // not ours, or still being created
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			log.V(1).Info("Removing the directory of a dead run", "dir", dir, "pid", pid)
			_ = os.RemoveAll(dir)
		}
	}
}
