// Package demo runs the whole system on one machine: a local 3-node cluster,
// npl-agent on every node, npl-lbsync with a load balancer (HAProxy on an
// edge host, the mock, or the Avi or BIG-IP simulator), the manifests in
// examples/, and real traffic.
// `make demo` and its test run this same code.
package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// Namespace is where the examples live.
const Namespace = "npl-demo"

// Options configure a run.
type Options struct {
	// Provider is haproxy (the default), mock, avi or bigip.
	Provider string
	// Keep leaves everything running until ctx ends, for kubectl and curl.
	Keep bool
	// Out receives the report.
	Out io.Writer
	// StateDir holds the pid and kubeconfig pointers of a kept demo
	// (default /tmp/npl-demo), for `make demo-shell`.
	StateDir string
}

// Result is what the run measured; the test asserts on it.
type Result struct {
	// Answers maps each pool member "ip:port" of web to the Pod that
	// answered, and Expected to the Pod that should have.
	Answers, Expected map[string]string
	// UDPAnswers maps each UDP member of dns to its echo reply, and
	// UDPExpected to the Pod that should have replied (from the annotation
	// of the Pod that owns the member's node port).
	UDPAnswers, UDPExpected map[string]string
	// NodePortOpen and NPLOpen say, per node, whether the NodePort Service
	// and web's node ports answer there; Backends counts web Pods per node.
	NodePortOpen, NPLOpen map[string]bool
	Backends              map[string]int
	// ScaleConvergence is the time from the scale to 2 until the load
	// balancer's pool held exactly the 2 remaining Pods.
	ScaleConvergence time.Duration

	// The requests through HAProxy's VIPs (provider haproxy only).
	// VIPAnswers counts the answers of each Pod to requests to web's VIP;
	// VIPWrong counts those where the Pod that answered is not the one
	// behind the member HAProxy chose (a second hop), VIPFailed the failed
	// requests.
	VIPAnswers          map[string]int
	VIPWrong, VIPFailed int
	// NodePortRequests went to a second VIP whose members are every
	// node's nodeIP:NodePort of web-nodeport; NodePortSecondHops of them
	// were answered by a Pod on another node than the member's, and
	// NodePortFailed failed.
	NodePortRequests, NodePortSecondHops, NodePortFailed int
	// The UDP flows to dns's VIP (provider haproxy only: the edge's
	// nftables table). UDPVIPAnswers counts the answers of each Pod;
	// UDPVIPWrong those where the Pod that answered is not the one behind
	// the member the edge chose, UDPVIPFailed the flows without answer.
	UDPVIPAnswers             map[string]int
	UDPVIPWrong, UDPVIPFailed int
	// Session persistence (provider haproxy only): StickyRequests went from
	// one client to web-sticky's VIP (sessionAffinity ClientIP) and reached
	// StickyNPLPods Pods; as many went to the NodePort VIP with the same
	// source persistence, reached StickyNodePortMembers members (nodes)
	// and StickyNodePortPods Pods. StickyFailed failed.
	StickyRequests, StickyNPLPods, StickyNodePortMembers, StickyNodePortPods, StickyFailed int
}

// VIPRequests and NodePortVIPRequests are how many requests the demo sends
// to web's VIP (each of its 4 Pods twice under round robin) and to the
// NodePort VIP (each of the 3 nodes 4 times).
const (
	VIPRequests         = 8
	NodePortVIPRequests = 12
	// StickyRequests is how many requests one client sends to each VIP
	// with source persistence.
	StickyRequests = 20
	// UDPVIPRequests is how many UDP flows the demo sends to dns's VIP:
	// each of its 2 Pods gets one unless the random choice misses it 16
	// times in a row (1 in 32768).
	UDPVIPRequests = 16
)

// nodePortVIP is the address of the NodePort contrast's load balancer: in
// the edge's VIP range, outside what npl-lbsync allocates from.
var nodePortVIP = netip.MustParsePrefix("198.18.200.250/32")

type run struct {
	opts    Options
	out     io.Writer
	c       *cluster.Cluster
	client  kubernetes.Interface
	backend stack.Backend
	bed     *edgebed.Bed // provider haproxy: the edge and client namespaces
	lbsync  *stack.LBSync
	agents  []*stack.Agent
	cluster string
	bin     string
	root    string
	res     *Result
}

// Run runs the demo; it cleans up everything it started before returning,
// also on failure (after ctx ends when Keep is set), and returns only once
// every process it started has exited (an error says what it could not
// stop).
func Run(ctx context.Context, opts Options) (_ *Result, err error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Provider == "" {
		opts.Provider = "haproxy"
	}
	if opts.StateDir == "" {
		opts.StateDir = "/tmp/npl-demo"
	}
	switch opts.Provider {
	case "haproxy", "mock", "avi", "bigip":
	default:
		return nil, fmt.Errorf("provider %q: want haproxy, mock, avi or bigip", opts.Provider)
	}
	r := &run{opts: opts, out: opts.Out, cluster: "demo", res: &Result{
		Answers: map[string]string{}, Expected: map[string]string{}, UDPAnswers: map[string]string{}, UDPExpected: map[string]string{},
		NodePortOpen: map[string]bool{}, NPLOpen: map[string]bool{}, Backends: map[string]int{}, VIPAnswers: map[string]int{},
		UDPVIPAnswers: map[string]int{},
	}}
	defer func() { err = errors.Join(err, r.cleanup()) }()
	if err := r.steps(ctx); err != nil {
		return r.res, err
	}
	if opts.Keep {
		r.keep(ctx)
	}
	return r.res, nil
}

func (r *run) printf(format string, args ...any) { fmt.Fprintf(r.out, format, args...) }

func (r *run) step(title string, f func() error) error {
	r.printf("%s ... ", title)
	start := time.Now()
	if err := f(); err != nil {
		r.printf("failed\n")
		return err
	}
	r.printf("done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (r *run) steps(ctx context.Context) error {
	var err error
	if r.bin, err = stack.BinDir(); err != nil {
		return err
	}
	if r.root, err = cluster.RepoRoot(); err != nil {
		return err
	}
	r.printf("npl demo: NodePortLocal on a local 3-node cluster, load balancer: %s\n\n", r.opts.Provider)
	if err := r.step("Starting the cluster (etcd, kube-apiserver, controller-manager, scheduler, 3 nodes)", func() error {
		// The transcript says what happens; the cluster's own log lines
		// (its errors come back in err) would break its lines.
		r.c, err = cluster.Start(klog.NewContext(ctx, logr.Discard()), cluster.Options{Nodes: 3, KubeProxy: true})
		if err != nil {
			return err
		}
		r.client = r.c.Client()
		return nil
	}); err != nil {
		return err
	}
	if err := r.step("Starting npl-agent on every node", func() error {
		r.agents, err = stack.StartAgents(ctx, r.c, stack.AgentOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := r.step("Starting npl-lbsync with the "+r.opts.Provider+" load balancer", func() error { return r.startLBSync(ctx) }); err != nil {
		return err
	}
	if err := r.step("Applying examples/ and waiting for Pods, annotations and pools", func() error {
		if err := r.apply(ctx); err != nil {
			return err
		}
		return r.waitConverged(ctx, "web", 4)
	}); err != nil {
		return err
	}
	for _, f := range []func(context.Context) error{r.showPods, r.showPools, r.showTraffic, r.showContrast, r.showScale} {
		if err := f(ctx); err != nil {
			return err
		}
	}
	if r.bed != nil {
		r.printf("\nAll good: every request to the VIP went one hop to the Pod behind the member HAProxy chose.\n")
	} else {
		r.printf("\nAll good: every pool member is one hop to the right Pod.\n")
	}
	return nil
}

func (r *run) startLBSync(ctx context.Context) error {
	dir := filepath.Join(r.c.LogDir(), "lb")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	vips := netip.MustParsePrefix("198.18.200.0/24")
	var err error
	if r.opts.Provider == "haproxy" {
		if err := r.startEdge(ctx, dir); err != nil {
			return err
		}
		// npl-lbsync allocates below the NodePort contrast's VIP.
		vips = netip.MustParsePrefix("198.18.200.0/25")
	} else if r.backend, err = stack.StartBackend(r.opts.Provider, dir, vips); err != nil {
		return err
	}
	// drainSeconds 0: the demo shows a scaled-down Pod leaving its pool at
	// once; the default (30 s) keeps it there, disabled, while it drains.
	cfg := fmt.Sprintf("clusterName: %s\ndefaultLoadBalancer: true\ndrainSeconds: 0\nvipPool: [%q]\n%s", r.cluster, vips, r.backend.ProviderConfig())
	r.lbsync, err = stack.StartLBSync(ctx, r.c, stack.LBSyncOptions{Config: cfg})
	return err
}

// startEdge starts the edge host (npl-edge and HAProxy in a network namespace
// on the cluster's bridge, VIPs routed to it) and the client namespace the
// requests to the VIPs come from: the bed of test/harness/edgebed.
func (r *run) startEdge(ctx context.Context, dir string) error {
	bed, err := edgebed.Start(ctx, dir, edgebed.Options{
		Bridge: "npl-br0", BridgeIP: netip.MustParseAddr("198.18.0.1"),
		EdgeIP: netip.MustParseAddr("198.18.0.200"), ClientIP: netip.MustParseAddr("198.18.0.201"),
		BinDir: r.bin, Name: "demo",
	})
	if err != nil {
		return err
	}
	r.bed = bed
	if err := bed.StartEdge(ctx); err != nil {
		return err
	}
	r.backend, err = edgebed.NewLBBackend(ctx, bed, r.cluster)
	return err
}

// apply creates the objects of every file in examples/, in name order.
func (r *run) apply(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(r.root, "examples", "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", filepath.Base(f), err)
			}
			if err := r.create(ctx, obj); err != nil {
				return fmt.Errorf("%s: %w", filepath.Base(f), err)
			}
		}
	}
	return nil
}

func stripComments(doc string) string {
	var keep []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func (r *run) create(ctx context.Context, obj any) error {
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = r.client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		if err == nil {
			err = waitUntil(ctx, 30*time.Second, func() (bool, error) {
				_, err := r.client.CoreV1().ServiceAccounts(o.Name).Get(ctx, "default", metav1.GetOptions{})
				return err == nil, nil
			})
		}
	case *appsv1.Deployment:
		_, err = r.client.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = r.client.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		return fmt.Errorf("the demo does not apply %T", obj)
	}
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func waitUntil(ctx context.Context, d time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pods returns the running Pods of an app, sorted by name.
func (r *run) pods(ctx context.Context, app string) ([]corev1.Pod, error) {
	list, err := r.client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// members returns the nodeIP:nodePort entries of the ready Pods of an app
// for one protocol, with the Pod behind each.
// pingUDP sends one UDP echo straight to each member and records and
// prints the answer beside the Pod that owns the member.
func (r *run) pingUDP(members []lbmodel.Member, owner map[string]string) {
	for _, m := range members {
		target := fmt.Sprintf("%s:%d", m.IP, m.Port)
		reply, err := stack.UDPEcho(target, "ping")
		if err != nil {
			reply = "error: " + err.Error()
		}
		r.res.UDPAnswers[target], r.res.UDPExpected[target] = reply, owner[target]
		r.printf("  udp %-24s -> %q (want %s)\n", target, reply, owner[target])
	}
}

func (r *run) members(ctx context.Context, app string, proto contract.Protocol) ([]lbmodel.Member, map[string]string, error) {
	pods, err := r.pods(ctx, app)
	if err != nil {
		return nil, nil, err
	}
	var out []lbmodel.Member
	owner := map[string]string{}
	for _, p := range pods {
		if !ready(&p) {
			continue
		}
		es, err := contract.Parse(p.Annotations[contract.PodKey])
		if err != nil {
			continue
		}
		for _, e := range es {
			if e.Protocol == proto {
				out = append(out, lbmodel.Member{IP: e.NodeIP, Port: int32(e.NodePort), Enabled: true})
				owner[fmt.Sprintf("%s:%d", e.NodeIP, e.NodePort)] = p.Name
			}
		}
	}
	return lbmodel.SortMembers(out), owner, nil
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitConverged waits until n Pods of app are ready and annotated and the
// load balancer's TCP pool holds exactly their node ports.
func (r *run) waitConverged(ctx context.Context, app string, n int) error {
	lb := lbmodel.LoadBalancerName(r.cluster, Namespace, app)
	var last string
	err := waitUntil(ctx, 90*time.Second, func() (bool, error) {
		want, _, err := r.members(ctx, app, contract.ProtocolTCP)
		if err != nil || len(want) != n {
			last = fmt.Sprintf("%d of %d Pods ready and annotated", len(want), n)
			return false, err
		}
		pools, _, ok, err := r.backend.Pools(lb)
		if err != nil || !ok {
			last = "no load balancer yet"
			return false, err
		}
		for name, got := range pools {
			if strings.Contains(name, "-TCP-") && sameMembers(got, want) {
				return true, nil
			}
		}
		last = fmt.Sprintf("pools %v, want %v", pools, want)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not converge: %s: %w", app, last, err)
	}
	return nil
}

// sameMembers reports whether a and b hold the same members, each once, in
// any order: convergence is about the set, not the order the provider keeps.
func sameMembers(a, b []lbmodel.Member) bool {
	count := map[lbmodel.Member]int{}
	for _, m := range a {
		count[m]++
	}
	for _, m := range b {
		count[m]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return len(count) == len(a)
}

func (r *run) showPods(ctx context.Context) error {
	r.printf("\n1. Pods, their nodes and their nodeportlocal.antrea.io annotations (written by npl-agent)\n\n")
	tw := tabwriter.NewWriter(r.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tNODE\tPOD IP\tANNOTATION")
	for _, app := range []string{"web", "dns"} {
		pods, err := r.pods(ctx, app)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				r.res.Backends[p.Spec.NodeName] += map[bool]int{true: 1}[app == "web"]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Annotations[contract.PodKey])
		}
	}
	return tw.Flush()
}

func (r *run) showPools(ctx context.Context) error {
	r.printf("\n2. nplctl pools -o wide: each pool's expected members (from the Pods) beside the load balancer's\n\n")
	// dns converges independently of web; wait for both before printing.
	if err := r.waitConverged(ctx, "dns", 2); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(r.bin, "nplctl"), "pools", "-o", "wide",
		"--kubeconfig", r.c.Kubeconfig(), "--config", r.lbsync.ConfigPath, "-n", Namespace)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nplctl pools: %v: %s", err, stderr.String())
	}
	_, err := r.out.Write(out.Bytes())
	return err
}

func (r *run) showTraffic(ctx context.Context) error {
	if r.bed != nil {
		return r.showVIPTraffic(ctx)
	}
	r.printf("\n3. One request to every pool member, from outside the nodes\n\n")
	lb := lbmodel.LoadBalancerName(r.cluster, Namespace, "web")
	pools, vips, _, err := r.backend.Pools(lb)
	if err != nil {
		return err
	}
	_, owner, err := r.members(ctx, "web", contract.ProtocolTCP)
	if err != nil {
		return err
	}
	pods, err := r.pods(ctx, "web")
	if err != nil {
		return err
	}
	nodeOf := map[string]string{}
	for _, p := range pods {
		nodeOf[p.Name] = p.Spec.NodeName
	}
	r.printf("web (VIP %s)\n", strings.Join(vips, ","))
	for _, name := range sortedKeys(pools) {
		for _, m := range pools[name] {
			target := fmt.Sprintf("%s:%d", m.IP, m.Port)
			body, err := stack.HTTPGet(target)
			r.res.Answers[target], r.res.Expected[target] = body, owner[target]
			verdict := "one hop, the right Pod"
			if err != nil {
				body, verdict = "error: "+err.Error(), "FAILED"
			} else if body != owner[target] {
				verdict = "WRONG Pod, want " + owner[target]
			}
			r.printf("  GET http://%-20s -> %-24s on %-11s %s\n", target, body, nodeOf[body], verdict)
		}
	}
	udp, uowner, err := r.members(ctx, "dns", contract.ProtocolUDP)
	if err != nil {
		return err
	}
	r.printf("dns over UDP\n")
	r.pingUDP(udp, uowner)
	for t, want := range r.res.Expected {
		if r.res.Answers[t] != want {
			return fmt.Errorf("member %s answered %q, want %q", t, r.res.Answers[t], want)
		}
	}
	return nil
}

// showVIPTraffic sends requests to web's VIP from the client namespace,
// one at a time, and names for each the member HAProxy chose (from its own
// per-server counters) and the Pod that answered: the member's Pod, one hop.
func (r *run) showVIPTraffic(ctx context.Context) error {
	r.printf("\n3. Requests to web's VIP from a client outside the nodes, through HAProxy on the edge host\n\n")
	lb := lbmodel.LoadBalancerName(r.cluster, Namespace, "web")
	pools, vips, _, err := r.backend.Pools(lb)
	if err != nil {
		return err
	}
	if len(vips) != 1 || len(pools) != 1 {
		return fmt.Errorf("web's load balancer has VIPs %v and pools %v, want one each", vips, pools)
	}
	_, owner, err := r.members(ctx, "web", contract.ProtocolTCP)
	if err != nil {
		return err
	}
	nodeOf, err := r.nodeOf(ctx, "web")
	if err != nil {
		return err
	}
	pool := sortedKeys(pools)[0]
	url := edgebed.URL(vips[0], 80)
	c := r.bed.ClientHTTP(5 * time.Second)
	for range VIPRequests {
		body, server, err := r.bed.GetVia(ctx, c, url, r.bed.Edges[0], pool)
		body = strings.TrimSpace(body)
		if err != nil {
			r.res.VIPFailed++
			r.printf("  GET %s -> FAILED: %v\n", url, err)
			continue
		}
		member := memberOf(server, pools[pool])
		verdict := "one hop, the member's Pod"
		if owner[member] != body {
			r.res.VIPWrong++
			verdict = "WRONG Pod, the member is " + owner[member] + "'s"
		}
		r.res.VIPAnswers[body]++
		r.printf("  GET %s -> member %-18s -> %-22s on %-10s %s\n", url, member, body, nodeOf[body], verdict)
	}
	for _, pod := range sortedKeys(nodeOf) {
		if r.res.VIPAnswers[pod] == 0 {
			return fmt.Errorf("no request to web's VIP reached Pod %s", pod)
		}
	}
	if r.res.VIPWrong+r.res.VIPFailed > 0 {
		return fmt.Errorf("web's VIP: %d requests failed, %d reached another Pod than the member's", r.res.VIPFailed, r.res.VIPWrong)
	}
	if err := r.showUDPVIPTraffic(ctx); err != nil {
		return err
	}
	udp, uowner, err := r.members(ctx, "dns", contract.ProtocolUDP)
	if err != nil {
		return err
	}
	r.printf("dns over UDP, straight to the members\n")
	r.pingUDP(udp, uowner)
	return nil
}

// showUDPVIPTraffic sends UDP flows to dns's VIP from the client namespace,
// each from its own source port, and names for each the member the edge's
// nftables table chose (from the edge's conntrack entry of the flow) and
// the Pod that answered: the member's Pod, one hop.
func (r *run) showUDPVIPTraffic(ctx context.Context) error {
	udp, owner, err := r.members(ctx, "dns", contract.ProtocolUDP)
	if err != nil {
		return err
	}
	lb := lbmodel.LoadBalancerName(r.cluster, Namespace, "dns")
	var vips []string
	if err := waitUntil(ctx, 15*time.Second, func() (bool, error) {
		pools, v, _, err := r.backend.Pools(lb)
		if err != nil || len(v) != 1 {
			return false, err
		}
		vips = v
		return len(pools[lbmodel.PoolName(lb, lbmodel.UDP, 53)]) == len(udp), nil
	}); err != nil {
		return fmt.Errorf("dns's UDP pool on the edge with its %d members: %w", len(udp), err)
	}
	addr := net.JoinHostPort(vips[0], "53")
	r.printf("dns over UDP through its VIP (HAProxy has no UDP: npl-edge's nftables table DNATs each new flow to a member)\n")
	for range UDPVIPRequests {
		f, err := r.bed.DialUDP(ctx, addr)
		if err != nil {
			return err
		}
		name, err := f.Ask("ping")
		member := ""
		if err == nil {
			member, err = r.bed.Edges[0].UDPMemberOf(ctx, f)
		}
		f.Close()
		if err != nil {
			r.res.UDPVIPFailed++
			r.printf("  udp %s -> FAILED: %v\n", addr, err)
			continue
		}
		verdict := "one hop, the chosen member's Pod"
		if owner[member] != name {
			r.res.UDPVIPWrong++
			verdict = "WRONG Pod, the member is " + owner[member] + "'s"
		}
		r.res.UDPVIPAnswers[name]++
		r.printf("  udp %s -> member %-18s -> %-22s %s\n", addr, member, name, verdict)
	}
	for _, pod := range owner {
		if r.res.UDPVIPAnswers[pod] == 0 {
			return fmt.Errorf("no UDP flow to dns's VIP reached Pod %s", pod)
		}
	}
	if r.res.UDPVIPWrong+r.res.UDPVIPFailed > 0 {
		return fmt.Errorf("dns's VIP: %d UDP flows failed, %d reached another Pod than the member's", r.res.UDPVIPFailed, r.res.UDPVIPWrong)
	}
	return nil
}

// memberOf is the ip:port of the member of HAProxy server name.
func memberOf(server string, members []lbmodel.Member) string {
	for _, m := range members {
		if haproxy.ServerName(m) == server {
			return fmt.Sprintf("%s:%d", m.IP, m.Port)
		}
	}
	return "unknown server " + server
}

// nodeOf maps the running Pods of app to their nodes.
func (r *run) nodeOf(ctx context.Context, app string) (map[string]string, error) {
	pods, err := r.pods(ctx, app)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pods {
		out[p.Name] = p.Spec.NodeName
	}
	return out, nil
}

// showNodePortVIP puts a second VIP on the edge whose members are every
// node's nodeIP:NodePort of web-nodeport, the way a load balancer fed
// NodePorts works, and sends requests to it: each names the node HAProxy
// chose and the Pod that answered; a Pod on another node is a second hop
// through the kube-proxy stand-in.
func (r *run) showNodePortVIP(ctx context.Context, nodePort int32, nodeOf map[string]string) error {
	r.printf("\nThe same through a VIP: a second VIP on the edge whose members are every node's NodePort\n\n")
	cl := r.cluster + "-nodeport"
	p, err := r.bed.OpenProviderPool(ctx, cl, []netip.Prefix{nodePortVIP}, r.bed.ProviderSection(cl))
	if err != nil {
		return err
	}
	name := lbmodel.LoadBalancerName(cl, Namespace, "web-nodeport")
	pool := lbmodel.PoolName(name, lbmodel.TCP, 80)
	var members []lbmodel.Member
	node := map[string]string{}
	for _, n := range r.c.Nodes() {
		m := lbmodel.Member{IP: n.IP.String(), Port: nodePort, Enabled: true}
		members = append(members, m)
		node[haproxy.ServerName(m)] = n.Name
	}
	lb := &lbmodel.LoadBalancer{Name: name, Service: Namespace + "/web-nodeport", Listeners: []lbmodel.Listener{{
		Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: pool, Members: lbmodel.SortMembers(members)}}}}
	if _, err := p.Ensure(ctx, lb); err != nil {
		return fmt.Errorf("the NodePort VIP: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := r.bed.Edges[0].WaitUp(wctx, pool, len(members)); err != nil {
		return err
	}
	url := edgebed.URL(nodePortVIP.Addr().String(), 80)
	c := r.bed.ClientHTTP(5 * time.Second)
	for range NodePortVIPRequests {
		r.res.NodePortRequests++
		body, server, err := r.bed.GetVia(ctx, c, url, r.bed.Edges[0], pool)
		body = strings.TrimSpace(body)
		if err != nil {
			r.res.NodePortFailed++
			r.printf("  GET %s -> FAILED: %v\n", url, err)
			continue
		}
		hop := "one hop"
		if nodeOf[body] != node[server] {
			r.res.NodePortSecondHops++
			hop = "SECOND HOP to " + nodeOf[body]
		}
		r.printf("  GET %s -> member %s (%s) -> %-22s %s\n", url, memberOf(server, members), node[server], body, hop)
	}
	r.printf("web's VIP (NodePortLocal): %d requests, %d second hops; the NodePort VIP: %d requests, %d second hops, %d failed.\n",
		VIPRequests, r.res.VIPWrong, r.res.NodePortRequests, r.res.NodePortSecondHops, r.res.NodePortFailed)
	return r.showPersistence(ctx, p, lb, node, nodeOf)
}

// showPersistence sends requests from one client to web-sticky's VIP
// (sessionAffinity ClientIP: npl-lbsync gives its pool source persistence)
// and, with the same persistence put on the NodePort VIP (lb, through
// provider p), to that VIP: HAProxy keeps the client on one member of
// each, which is one Pod behind NodePortLocal and one node behind NodePort,
// where kube-proxy spreads the requests over the Pods again. node names
// each NodePort member's node by its server, nodeOf each Pod's.
func (r *run) showPersistence(ctx context.Context, p providers.Provider, lb *lbmodel.LoadBalancer, node, nodeOf map[string]string) error {
	r.printf("\nSession persistence (sessionAffinity: ClientIP on web-sticky) through both VIPs, from one client\n\n")
	sticky := lbmodel.LoadBalancerName(r.cluster, Namespace, "web-sticky")
	stickyPool := lbmodel.PoolName(sticky, lbmodel.TCP, 80)
	var vip string
	if err := waitUntil(ctx, 30*time.Second, func() (bool, error) {
		pools, vips, _, err := r.backend.Pools(sticky)
		if err != nil || len(vips) != 1 || len(pools[stickyPool]) != len(nodeOf) {
			return false, err
		}
		vip = vips[0]
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return r.bed.Edges[0].WaitUp(wctx, stickyPool, len(nodeOf)) == nil, nil
	}); err != nil {
		return fmt.Errorf("web-sticky's pool with its %d members on the edge: %w", len(nodeOf), err)
	}
	npPool := lb.Listeners[0].Pool.Name
	lb.Listeners[0].Pool.Policy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600}}
	if _, err := p.Ensure(ctx, lb); err != nil {
		return fmt.Errorf("source persistence on the NodePort VIP: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := r.bed.Edges[0].WaitUp(wctx, npPool, len(lb.Listeners[0].Pool.Members)); err != nil {
		return err
	}
	c := r.bed.ClientHTTP(5 * time.Second)
	send := func(url, pool string, describe func(server string) string) (members, pods map[string]int) {
		members, pods = map[string]int{}, map[string]int{}
		for range StickyRequests {
			body, server, err := r.bed.GetVia(ctx, c, url, r.bed.Edges[0], pool)
			if err != nil {
				r.res.StickyFailed++
				r.printf("  GET %s -> FAILED: %v\n", url, err)
				continue
			}
			members[describe(server)]++
			pods[strings.TrimSpace(body)]++
		}
		return members, pods
	}
	counts := func(m map[string]int) string {
		var parts []string
		for _, k := range sortedKeys(m) {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
		}
		return strings.Join(parts, ", ")
	}
	r.res.StickyRequests = StickyRequests
	nplURL := edgebed.URL(vip, 80)
	stickyMembers, _, _, err := r.backend.Pools(sticky)
	if err != nil {
		return err
	}
	members, pods := send(nplURL, stickyPool, func(server string) string { return memberOf(server, stickyMembers[stickyPool]) })
	r.res.StickyNPLPods = len(pods)
	r.printf("  NodePortLocal VIP %s (web-sticky): %d requests -> member %s -> Pod %s\n", vip, StickyRequests, counts(members), counts(pods))
	npURL := edgebed.URL(nodePortVIP.Addr().String(), 80)
	members, pods = send(npURL, npPool, func(server string) string {
		return memberOf(server, lb.Listeners[0].Pool.Members) + " (" + node[server] + ")"
	})
	r.res.StickyNodePortMembers, r.res.StickyNodePortPods = len(members), len(pods)
	r.printf("  NodePort VIP %s (same persistence): %d requests -> member %s -> Pods %s\n", nodePortVIP.Addr(), StickyRequests, counts(members), counts(pods))
	r.printf("session persistence: NodePortLocal VIP %d requests from one client reached %d Pod; NodePort VIP %d requests reached %d Pods\n",
		StickyRequests, r.res.StickyNPLPods, StickyRequests, r.res.StickyNodePortPods)
	if r.res.StickyFailed > 0 || r.res.StickyNPLPods != 1 {
		return fmt.Errorf("web-sticky's VIP: %d requests failed, one client reached %d Pods", r.res.StickyFailed, r.res.StickyNPLPods)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (r *run) showContrast(ctx context.Context) error {
	r.printf("\n4. NodePort vs NodePortLocal for the same web Pods: which nodes open a port?\n\n")
	var nodePort int32
	if err := waitUntil(ctx, 30*time.Second, func() (bool, error) {
		s, err := r.client.CoreV1().Services(Namespace).Get(ctx, "web-nodeport", metav1.GetOptions{})
		if err == nil && len(s.Spec.Ports) > 0 {
			nodePort = s.Spec.Ports[0].NodePort
		}
		return nodePort != 0, err
	}); err != nil {
		return fmt.Errorf("web-nodeport has no nodePort: %w", err)
	}
	members, _, err := r.members(ctx, "web", contract.ProtocolTCP)
	if err != nil {
		return err
	}
	pods, err := r.pods(ctx, "web")
	if err != nil {
		return err
	}
	nodeOf := map[string]string{}
	for _, p := range pods {
		nodeOf[p.Name] = p.Spec.NodeName
	}
	tw := tabwriter.NewWriter(r.out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tWEB PODS\tNODEPORT :%d\tNODEPORTLOCAL (web's node ports on this node)\n", nodePort)
	for _, n := range r.c.Nodes() {
		ip := n.IP.String()
		np := "closed"
		// The NodePort answer is random among the endpoints; ask until the
		// kube-proxy stand-in has programmed it (a few hundred ms).
		_ = waitUntil(ctx, 10*time.Second, func() (bool, error) {
			body, err := stack.HTTPGet(fmt.Sprintf("%s:%d", ip, nodePort))
			if err != nil {
				return false, nil
			}
			hop := "one hop"
			if nodeOf[body] != n.Name {
				hop = "second hop to " + nodeOf[body]
			}
			np = fmt.Sprintf("open -> %s (%s)", body, hop)
			r.res.NodePortOpen[n.Name] = true
			return true, nil
		})
		var ports []int
		for _, m := range members {
			ports = append(ports, int(m.Port))
		}
		slices.Sort(ports)
		var open []string
		for _, p := range slices.Compact(ports) {
			// Another app's node port may use the same number: only a web
			// Pod answering counts.
			if body, err := stack.HTTPGet(fmt.Sprintf("%s:%d", ip, p)); err == nil && nodeOf[body] != "" {
				open = append(open, fmt.Sprintf(":%d", p))
			}
		}
		npl := "none open (no backend here)"
		if len(open) > 0 {
			npl = "open " + strings.Join(open, " ")
			r.res.NPLOpen[n.Name] = true
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", n.Name, r.res.Backends[n.Name], np, npl)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	r.printf("A NodePort opens on every node and may take a second hop; NodePortLocal opens only where a backend runs.\n")
	if r.bed != nil {
		return r.showNodePortVIP(ctx, nodePort, nodeOf)
	}
	return nil
}

func (r *run) showScale(ctx context.Context) error {
	r.printf("\n5. Scaling web from 4 to 2 replicas\n\n")
	start := time.Now()
	patch := []byte(`{"spec":{"replicas":2}}`)
	if _, err := r.client.AppsV1().Deployments(Namespace).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	if err := r.waitConverged(ctx, "web", 2); err != nil {
		return err
	}
	r.res.ScaleConvergence = time.Since(start)
	members, _, err := r.members(ctx, "web", contract.ProtocolTCP)
	if err != nil {
		return err
	}
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, fmt.Sprintf("%s:%d", m.IP, m.Port))
	}
	r.printf("  the pool holds %s, %s after the scale (Pods deleted, ports released, pool updated)\n",
		strings.Join(addrs, " and "), r.res.ScaleConvergence.Round(time.Millisecond))
	return nil
}

// keep prints how to reach the running demo and waits until ctx ends.
func (r *run) keep(ctx context.Context) {
	if err := os.MkdirAll(r.opts.StateDir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(r.opts.StateDir, "pid"), []byte(fmt.Sprint(os.Getpid())), 0o644)
		_ = os.WriteFile(filepath.Join(r.opts.StateDir, "kubeconfig"), []byte(r.c.Kubeconfig()), 0o644)
		defer os.RemoveAll(r.opts.StateDir)
	}
	r.printf(`
The demo keeps running (Ctrl-C ends it and removes everything). Its network is private, so from another terminal:

  make demo-shell                              # a shell inside it, with KUBECONFIG set and ./bin on PATH
  kubectl get pods -n %[1]s -o wide      # (make demo-shell builds kubectl first)
  nplctl pools -n %[1]s -o wide --config %[2]s
  nplctl mappings -n %[1]s
  curl http://<nodeIP>:<nodePort>/             # any member from nplctl pools
`, Namespace, r.lbsync.ConfigPath)
	if r.bed != nil {
		r.printf(`  curl http://<VIP>/                           # web's VIP from nplctl pools, through HAProxy on the edge
  ip netns exec %s bash                # the edge host: HAProxy's admin socket is %s
`, r.bed.EdgeNetns, r.bed.Edges[0].AdminSocket())
	}
	<-ctx.Done()
}

// cleanup stops everything the demo started, each returning once its
// processes have exited; it says what it could not stop.
func (r *run) cleanup() error {
	var errs []error
	if r.lbsync != nil {
		errs = append(errs, r.lbsync.Stop())
	}
	stack.StopAgents(r.agents)
	switch {
	case r.bed != nil: // the haproxy provider's backend is the bed
		errs = append(errs, r.bed.Close())
	case r.backend != nil:
		r.backend.Close()
	}
	if r.c != nil {
		errs = append(errs, r.c.Close())
	}
	return errors.Join(errs...)
}
