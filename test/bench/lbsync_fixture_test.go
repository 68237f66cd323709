package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/mock"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// The npl-lbsync fixture: a NoKubelet cluster of 3 nodes with 1000
// LoadBalancer Services of our class, each selecting its own 10 Pods spread
// over the nodes. The benchmark writes the Pods' status (Running, Ready,
// podIP) and their nodeportlocal.antrea.io annotation itself, as the kubelet
// and npl-agent would. The Services are created already claimed, as
// npl-lbsync leaves them (finalizer, opt-in, VIP in the status, Synced
// condition), so that a benchmark run alone needs no first sync;
// BenchmarkLBSyncFirstStart removes the claims and measures that sync.
var (
	lbServices       = flag.Int("bench.services", 1000, "LoadBalancer Services of the npl-lbsync benchmarks")
	lbPodsPerService = flag.Int("bench.pods-per-service", 10, "Pods behind each Service of the npl-lbsync benchmarks")
)

const (
	lbNodes = 3
	// lbResync is the resyncPeriod of every npl-lbsync.
	lbResync   = 20 * time.Second
	portToggle = 10000
)

// serviceSet is Services of one class in one namespace and their Pods. Each
// Service asks for its own VIP, so that every run and every provider gives
// it the same one and a restart of npl-lbsync rewrites no status.
type serviceSet struct {
	ns       string
	class    string
	cluster  string // clusterName of the npl-lbsync that serves the class
	vips     netip.Prefix
	basePort int
	services int
	podsPer  int
	nodes    []benchNode
	// ports holds each Pod's current node port, by Pod index.
	ports  []int
	cursor int
}

func (s *serviceSet) pods() int { return s.services * s.podsPer }

func (s *serviceSet) serviceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

func (s *serviceSet) podName(g int) string {
	return fmt.Sprintf("%s-%02d", s.serviceName(g/s.podsPer), g%s.podsPer)
}

func (s *serviceSet) lbName(i int) string {
	return lbmodel.LoadBalancerName(s.cluster, s.ns, s.serviceName(i))
}

func (s *serviceSet) node(g int) benchNode { return s.nodes[g%len(s.nodes)] }

// benchNode is a node of a set: one of the cluster's, or a Node object alone
// (BenchmarkLBSyncScale).
type benchNode struct {
	Name string
	IP   netip.Addr
}

func clusterNodes(c *cluster.Cluster) []benchNode {
	var out []benchNode
	for _, n := range c.Nodes() {
		out = append(out, benchNode{Name: n.Name, IP: n.IP})
	}
	return out
}

func (s *serviceSet) vip(i int) netip.Addr {
	a := s.vips.Addr()
	for range i + 1 {
		a = a.Next()
	}
	return a
}

// annotationValue is Pod g's nodeportlocal.antrea.io annotation with its
// current node port.
func (s *serviceSet) annotationValue(g int) string {
	v, err := contract.Format([]contract.Entry{{
		PodPort: firstPodPort, NodeIP: s.node(g).IP.String(), NodePort: s.ports[g],
		Protocol: contract.ProtocolTCP, IPFamily: contract.FamilyIPv4,
	}})
	if err != nil {
		panic(err) // a fixed, valid entry
	}
	return v
}

// pod is Pod g, bound to its node, already annotated as npl-agent would.
func (s *serviceSet) pod(g int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.podName(g), Namespace: s.ns,
			Labels:      map[string]string{"app": s.serviceName(g / s.podsPer)},
			Annotations: map[string]string{contract.PodKey: s.annotationValue(g)},
		},
		Spec: corev1.PodSpec{
			NodeName: s.node(g).Name,
			Containers: []corev1.Container{{Name: "web", Image: "npl.io/test-server", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: firstPodPort, Protocol: corev1.ProtocolTCP},
			}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			// Nodes without a kubelet go Unknown: no eviction.
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
		},
	}
}

// podStatusPatch makes Pod g Running and Ready, as a kubelet would. No
// network runs the IP: npl-lbsync only reads it.
func (s *serviceSet) podStatusPatch(g int) []byte {
	ip := netip.AddrFrom4([4]byte{10, byte(64 + g>>16), byte(g >> 8), byte(g)}).String()
	now := metav1.Now()
	hostIP := s.node(g).IP.String()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"phase":  corev1.PodRunning,
		"hostIP": hostIP, "hostIPs": []corev1.HostIP{{IP: hostIP}},
		"podIP": ip, "podIPs": []corev1.PodIP{{IP: ip}},
		"startTime": now,
		"conditions": []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}})
	return patch
}

// service is Service i: LoadBalancer of the set's class, one TCP port, its
// own requested VIP, no node ports. claimed gives it what npl-lbsync writes
// when it claims it.
func (s *serviceSet) service(i int, claimed bool) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.serviceName(i), Namespace: s.ns,
			Annotations: map[string]string{contract.LoadBalancerIPKey: s.vip(i).String()}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:             ptr.To(s.class),
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Selector:                      map[string]string{"app": s.serviceName(i)},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromString("http")}},
		},
	}
	if claimed {
		svc.Finalizers = []string{contract.CleanupFinalizer}
		svc.Annotations[contract.ClaimedByKey] = s.cluster
		svc.Annotations[contract.ServiceEnabledKey] = "true"
		svc.Annotations[contract.AutoAnnotatedKey] = "true"
	}
	return svc
}

// claimedStatusPatch is the status npl-lbsync writes once Service i is
// synced. Should its condition message ever differ from npl-lbsync's, the
// first run rewrites it, and the runs after it write nothing again.
func (s *serviceSet) claimedStatusPatch(i int) []byte {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"loadBalancer": corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: s.vip(i).String()}}},
		"conditions": []metav1.Condition{{
			Type: contract.SyncedConditionType, Status: metav1.ConditionTrue, Reason: "Synced",
			Message: "1 listener(s)",
			// The apiserver keeps no generation for Services: 0.
			LastTransitionTime: metav1.Now(),
		}},
	}})
	return patch
}

// create creates the set's namespace, Pods (with status) and Services, and
// waits until the EndpointSlice controller has caught up, so that it does
// not load the apiserver during the runs.
func (s *serviceSet) create(ctx context.Context, c *cluster.Cluster, client kubernetes.Interface, claimed bool) (string, error) {
	began := time.Now()
	if _, err := c.CreateNamespace(ctx, s.ns); err != nil {
		return "", err
	}
	s.ports = make([]int, s.pods())
	for g := range s.ports {
		s.ports[g] = s.basePort + g/len(s.nodes)
	}
	pods := client.CoreV1().Pods(s.ns)
	if err := parallel(s.pods(), 32, func(g int) error {
		_, err := pods.Create(ctx, s.pod(g), metav1.CreateOptions{})
		return err
	}); err != nil {
		return "", fmt.Errorf("create pods: %w", err)
	}
	created := time.Since(began)
	if err := parallel(s.pods(), 32, func(g int) error {
		_, err := pods.Patch(ctx, s.podName(g), types.MergePatchType, s.podStatusPatch(g), metav1.PatchOptions{}, "status")
		return err
	}); err != nil {
		return "", fmt.Errorf("write pod status: %w", err)
	}
	statuses := time.Since(began) - created
	svcs := client.CoreV1().Services(s.ns)
	if err := parallel(s.services, 16, func(i int) error {
		if _, err := svcs.Create(ctx, s.service(i, claimed), metav1.CreateOptions{}); err != nil {
			return err
		}
		if claimed {
			_, err := svcs.Patch(ctx, s.serviceName(i), types.MergePatchType, s.claimedStatusPatch(i), metav1.PatchOptions{}, "status")
			return err
		}
		return nil
	}); err != nil {
		return "", fmt.Errorf("create services: %w", err)
	}
	if err := pollUntil(3*time.Minute+time.Duration(s.pods())*5*time.Millisecond, time.Second, "an EndpointSlice per Service in "+s.ns, func() (bool, error) {
		list, err := client.DiscoveryV1().EndpointSlices(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(list.Items) >= s.services && readyEndpoints(list.Items) == s.pods(), nil
	}); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %d Pods created in %s, their status written in %s, all ready with %d Services in %s", s.ns,
		s.pods(), created.Round(time.Millisecond), statuses.Round(time.Millisecond), s.services, time.Since(began).Round(time.Millisecond)), nil
}

func readyEndpoints(slices []discoveryv1.EndpointSlice) int {
	n := 0
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				n++
			}
		}
	}
	return n
}

// resetClaims makes every Service of the set look as if no npl-lbsync had
// ever seen it: no finalizer, claim or opt-in annotation, status or
// condition.
func (s *serviceSet) resetClaims(ctx context.Context, client kubernetes.Interface) error {
	meta := fmt.Appendf(nil, `{"metadata":{"finalizers":null,"annotations":{%q:null,%q:null,%q:null}}}`,
		contract.ClaimedByKey, contract.ServiceEnabledKey, contract.AutoAnnotatedKey)
	status := []byte(`{"status":{"loadBalancer":{"ingress":null},"conditions":null}}`)
	svcs := client.CoreV1().Services(s.ns)
	return parallel(s.services, 16, func(i int) error {
		if _, err := svcs.Patch(ctx, s.serviceName(i), types.MergePatchType, meta, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("reset service %s/%s: %w", s.ns, s.serviceName(i), err)
		}
		if _, err := svcs.Patch(ctx, s.serviceName(i), types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("reset status of service %s/%s: %w", s.ns, s.serviceName(i), err)
		}
		return nil
	})
}

// countWrites starts counting the changes of the set's Services (a watch
// from now on) and returns the function that stops and returns the count,
// after a second for the last events to arrive.
func (s *serviceSet) countWrites(ctx context.Context, client kubernetes.Interface) (func() int, error) {
	list, err := client.CoreV1().Services(s.ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, err
	}
	w, err := client.CoreV1().Services(s.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, err
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified {
				n.Add(1)
			}
		}
	}()
	return func() int {
		time.Sleep(time.Second)
		w.Stop()
		<-done
		return int(n.Load())
	}, nil
}

// completeLBs counts the set's load balancers in a mock state that have one
// listener whose pool holds every Pod of their Service, enabled.
func (s *serviceSet) completeLBs(st mock.State) int {
	n := 0
	for _, lb := range st.LoadBalancers {
		if !lbmodel.OwnedBy(s.cluster, lb.Name) || len(lb.Listeners) != 1 {
			continue
		}
		enabled := 0
		for _, m := range lb.Listeners[0].Pool.Members {
			if m.Enabled {
				enabled++
			}
		}
		if enabled == s.podsPer {
			n++
		}
	}
	return n
}

// members returns Service i's expected members, "ip:port", sorted.
func (s *serviceSet) members(i int) []string {
	var out []string
	for k := range s.podsPer {
		g := i*s.podsPer + k
		out = append(out, fmt.Sprintf("%s:%d", s.node(g).IP, s.ports[g]))
	}
	slices.Sort(out)
	return out
}

func memberStrings(members []lbmodel.Member) []string {
	out := make([]string, 0, len(members))
	for _, m := range members {
		out = append(out, fmt.Sprintf("%s:%d", m.IP, m.Port))
	}
	slices.Sort(out)
	return out
}

// change is one annotation write: a new node port for one Pod.
type change struct {
	svc int
	lb  string
	at  time.Time // just before the patch was sent
}

// nextChange gives the next Pod (round robin over the Services, so that two
// changes of one load balancer are far apart) a new node port, and returns
// the change and the patch that makes it.
func (s *serviceSet) nextChange(ctx context.Context, client kubernetes.Interface) (change, func() error) {
	i := s.cursor % s.services
	g := i*s.podsPer + (s.cursor/s.services)%s.podsPer
	s.cursor++
	if s.ports[g] >= s.basePort+portToggle {
		s.ports[g] -= portToggle
	} else {
		s.ports[g] += portToggle
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{contract.PodKey: s.annotationValue(g)}}})
	return change{svc: i, lb: s.lbName(i)}, func() error {
		_, err := client.CoreV1().Pods(s.ns).Patch(ctx, s.podName(g), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
}

// changeBatch makes n changes at rate per second, each patch sent on time
// whatever the latency of the previous ones.
func (s *serviceSet) changeBatch(ctx context.Context, client kubernetes.Interface, n, rate int) ([]change, error) {
	ticker := time.NewTicker(time.Second / time.Duration(rate))
	defer ticker.Stop()
	var (
		out  []change
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		if i > 0 {
			<-ticker.C
		}
		ch, send := s.nextChange(ctx, client)
		ch.at = time.Now()
		out = append(out, ch)
		wg.Go(func() {
			if err := send(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// lbFixture is the cluster side of the npl-lbsync benchmarks and the
// npl-lbsync that serves it with the in-memory mock provider, when one runs.
type lbFixture struct {
	e    *env
	main *serviceSet

	syncer *stack.LBSync // nil when stopped
	runs   int

	// baseline and baselineGC10 are the heap in use of a synced npl-lbsync
	// with no Pod, with the default GOGC and with GOGC=10.
	baseline, baselineGC10 float64
	// heapGC10 is that of one serving the main set with GOGC=10; 0 until
	// BenchmarkLBSyncHeap measures it.
	heapGC10 float64
	// policies are the LoadBalancerPolicies of BenchmarkLBSyncPolicyChange,
	// once created.
	policies *policySet
}

// lbEnv returns the npl-lbsync fixture, building it on first use.
func lbEnv(b *testing.B) *lbFixture {
	b.Helper()
	e := useCluster(b, "lbsync", cluster.Options{Nodes: lbNodes, NoKubelet: true})
	if e.lb != nil {
		return e.lb
	}
	f := &lbFixture{e: e, main: &serviceSet{ns: "bench-lb", class: "npl.io/lb", cluster: "bench",
		vips: netip.MustParsePrefix("198.18.160.0/22"), basePort: 40000,
		services: *lbServices, podsPer: *lbPodsPerService, nodes: clusterNodes(e.c)}}
	e.lb = f
	if err := f.setup(b); err != nil {
		if cerr := closeEnv(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		b.Fatalf("npl-lbsync fixture: %v", err)
	}
	return f
}

func (f *lbFixture) setup(b *testing.B) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+time.Duration(f.main.pods())*10*time.Millisecond)
	defer cancel()
	// npl-lbsync applies LoadBalancerPolicies when their CRD is served at
	// its start, as the chart installs it.
	if err := f.e.c.InstallLoadBalancerPolicyCRD(ctx); err != nil {
		return err
	}
	// The heap baselines: a synced npl-lbsync with no Pod and no Service.
	for _, gogc := range []string{"", "10"} {
		l, err := f.startSyncer(ctx, f.main, mockProvider, gogc)
		if err != nil {
			return err
		}
		var h float64
		if _, err = waitSynced(l, 2*time.Minute); err == nil {
			h, err = heapInUse(l)
		}
		_ = l.Stop()
		if err != nil {
			return err
		}
		if gogc == "" {
			f.baseline = h
		} else {
			f.baselineGC10 = h
		}
	}
	msg, err := f.main.create(ctx, f.e.c, f.e.client, true)
	if err != nil {
		return err
	}
	b.Log("npl-lbsync fixture: " + msg)
	return nil
}

func (f *lbFixture) close() error { return f.stopSyncer() }

const mockProvider = "provider:\n  name: mock\n  mock: {}\n"

// startSyncer starts an npl-lbsync for a set, with its own log file, and
// returns as soon as the process runs: leader election is on, as in
// production, so StartLBSync does not wait for the first sync and the
// caller times it. gogc, when set, is the GOGC of the process. With
// $NPL_BENCH_HEAP_PROFILE set, it serves /debug/pprof/ (--profiling), for
// BenchmarkLBSyncHeap to save a heap profile.
func (f *lbFixture) startSyncer(ctx context.Context, set *serviceSet, provider, gogc string) (*stack.LBSync, error) {
	f.runs++
	cfg := fmt.Sprintf("clusterName: %s\nserviceType: NodePortLocal\nloadBalancerClass: %s\nvipPool: [%q]\nresyncPeriod: %s\nnodePortRange: %d-%d\n%s",
		set.cluster, set.class, set.vips, lbResync, set.basePort, set.basePort+2*portToggle-1, provider)
	if gogc != "" {
		// The child inherits the environment at Start; nothing else starts
		// a process meanwhile (benchmarks run one at a time).
		prev, had := os.LookupEnv("GOGC")
		os.Setenv("GOGC", gogc)
		defer func() {
			if had {
				os.Setenv("GOGC", prev)
			} else {
				os.Unsetenv("GOGC")
			}
		}()
	}
	var args []string
	if os.Getenv(heapProfileEnv) != "" {
		args = append(args, "--profiling")
	}
	return stack.StartLBSync(ctx, f.e.c, stack.LBSyncOptions{
		Name: fmt.Sprintf("npl-lbsync-%02d", f.runs), Config: cfg, LeaderElect: true, ExtraArgs: args,
	})
}

func (f *lbFixture) stopSyncer() error {
	if f.syncer == nil {
		return nil
	}
	err := f.syncer.Stop()
	f.syncer = nil
	return err
}

// ensureSyncer makes sure an npl-lbsync serves the Services with the mock
// and has applied every pool.
func (f *lbFixture) ensureSyncer(b *testing.B) *stack.LBSync {
	b.Helper()
	if f.syncer != nil && f.syncer.Running() {
		return f.syncer
	}
	_ = f.stopSyncer()
	l, err := f.startSyncer(context.Background(), f.main, mockProvider, "")
	if err != nil {
		b.Fatal(err)
	}
	f.syncer = l
	if _, err := waitSynced(l, 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	if _, err := waitPools(l, f.main, time.Minute); err != nil {
		b.Fatal(err)
	}
	return l
}

// waitSynced waits until l leads and its /readyz answers 200 (the first
// sync of every Service is done) and returns when.
func waitSynced(l *stack.LBSync, timeout time.Duration) (time.Time, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	var at time.Time
	err := pollUntil(timeout, 50*time.Millisecond, l.Name+" leading and ready", func() (bool, error) {
		if !l.Running() {
			return false, fmt.Errorf("%s exited", l.Name)
		}
		if v, err := l.Metric("npl_lbsync_leader"); err != nil || v != 1 {
			return false, err
		}
		resp, err := client.Get("http://" + l.HealthAddr + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		at = time.Now()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, l.Tail(20))
	}
	return at, err
}

// waitPools polls the mock until it holds every load balancer of the set
// with all its members, and returns when.
func waitPools(l *stack.LBSync, set *serviceSet, timeout time.Duration) (time.Time, error) {
	var at time.Time
	last := 0
	err := pollUntil(timeout, 250*time.Millisecond, "every pool applied", func() (bool, error) {
		if !l.Running() {
			return false, fmt.Errorf("%s exited:\n%s", l.Name, l.Tail(20))
		}
		st, err := l.MockState()
		if err != nil {
			return false, err
		}
		at, last = time.Now(), set.completeLBs(st)
		return last == set.services, nil
	})
	if err != nil {
		err = fmt.Errorf("%w (%d of %d complete)", err, last, set.services)
	}
	return at, err
}

// heapProfileEnv names the file BenchmarkLBSyncHeap saves the heap profile
// of npl-lbsync to, when set (go tool pprof -sample_index=inuse_space).
const heapProfileEnv = "NPL_BENCH_HEAP_PROFILE"

// saveHeapProfile saves l's heap profile, after a collection (gc=1), to
// the file $NPL_BENCH_HEAP_PROFILE names, if it is set.
func saveHeapProfile(l *stack.LBSync) error {
	path := os.Getenv(heapProfileEnv)
	if path == "" {
		return nil
	}
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Get("http://" + l.MetricsAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return os.WriteFile(path, body, 0o644)
}

// heapInUse is the lowest go_memstats_heap_inuse_bytes of a few samples.
func heapInUse(l *stack.LBSync) (float64, error) {
	low := 0.0
	for i := range 5 {
		if i > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		v, err := l.Metric("go_memstats_heap_inuse_bytes")
		if err != nil {
			return 0, err
		}
		if i == 0 || v < low {
			low = v
		}
	}
	return low, nil
}

// writeLog reads the "Mock load balancer written" lines an npl-lbsync logs
// at -v=2, from an offset of its log file on.
type writeLog struct {
	path   string
	offset int64
	writes map[string][]time.Time // by load balancer name
}

func newWriteLog(path string) (*writeLog, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	return &writeLog{path: path, offset: fi.Size(), writes: map[string][]time.Time{}}, nil
}

// klogLine matches a klog text header and the mock's write message.
var klogLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ \S+\] "Mock load balancer written".*? loadBalancer="([^"]+)"`)

// read parses the complete lines appended since the last read.
func (w *writeLog) read() error {
	file, err := os.Open(w.path)
	if err != nil {
		return err
	}
	defer file.Close()
	if _, err := file.Seek(w.offset, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(file, 1<<16)
	year := time.Now().Year()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil // an incomplete last line is read again next time
		}
		w.offset += int64(len(line))
		m := klogLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		// klog writes local time without the year.
		t, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
		if err != nil {
			return fmt.Errorf("klog time %q: %w", m[1], err)
		}
		w.writes[m[2]] = append(w.writes[m[2]], t.AddDate(year, 0, 0))
	}
}

// last returns the time of the last write read, zero when there is none.
func (w *writeLog) last() time.Time {
	var last time.Time
	for _, times := range w.writes {
		for _, t := range times {
			if t.After(last) {
				last = t
			}
		}
	}
	return last
}

// applied returns, for a change, the first write of its load balancer at or
// after it.
func (w *writeLog) applied(c change) (time.Time, bool) {
	for _, t := range w.writes[c.lb] {
		if !t.Before(c.at.Truncate(time.Microsecond)) {
			return t, true
		}
	}
	return time.Time{}, false
}

// waitApplied waits until every change has a write after it and returns
// each change's latency.
func (w *writeLog) waitApplied(changes []change, timeout time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	err := pollUntil(timeout, 100*time.Millisecond, "every change written to the mock", func() (bool, error) {
		if err := w.read(); err != nil {
			return false, err
		}
		lat = lat[:0]
		for _, c := range changes {
			t, ok := w.applied(c)
			if !ok {
				return false, nil
			}
			lat = append(lat, t.Sub(c.at))
		}
		return true, nil
	})
	return lat, err
}

// watchWrites makes sure an npl-lbsync serves the main set, and returns
// it, the log of its writes from now on and the mock's state now.
func (f *lbFixture) watchWrites(b *testing.B) (*stack.LBSync, *writeLog, mock.State) {
	b.Helper()
	l := f.ensureSyncer(b)
	log, err := newWriteLog(l.LogPath)
	if err != nil {
		b.Fatal(err)
	}
	st, err := l.MockState()
	if err != nil {
		b.Fatal(err)
	}
	return l, log, st
}

// measureBatches runs b.N batches of changes (one an iteration, timed),
// each waited for until the mock has written it (from the log), and
// returns every change's latency and the changes.
func measureBatches(b *testing.B, log *writeLog, batch func() ([]change, error)) ([]time.Duration, []change) {
	b.Helper()
	var latencies []time.Duration
	var all []change
	b.ResetTimer()
	for range b.N {
		changes, err := batch()
		if err != nil {
			b.Fatal(err)
		}
		lat, err := log.waitApplied(changes, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, lat...)
		all = append(all, changes...)
	}
	b.StopTimer()
	return latencies, all
}

// checkMock checks that the load balancers of the changes hold their Pods'
// current node ports in a mock state, as their enabled members: a moved
// member's old node port stays, disabled, while it drains.
func (s *serviceSet) checkMock(st mock.State, changes []change) error {
	for _, c := range changes {
		lb, ok := stack.FindLoadBalancer(st, c.lb)
		if !ok || len(lb.Listeners) != 1 {
			return fmt.Errorf("load balancer %s missing from the mock", c.lb)
		}
		var enabled []lbmodel.Member
		for _, m := range lb.Listeners[0].Pool.Members {
			if m.Enabled {
				enabled = append(enabled, m)
			}
		}
		got, want := memberStrings(enabled), s.members(c.svc)
		if !slices.Equal(got, want) {
			return fmt.Errorf("load balancer %s: members %s, want %s", c.lb, strings.Join(got, " "), strings.Join(want, " "))
		}
	}
	return nil
}

// checkBackend checks that Service i's pool on a simulator holds its Pods'
// current members.
func (s *serviceSet) checkBackend(backend stack.Backend, i int) error {
	lb := s.lbName(i)
	pools, _, ok, err := backend.Pools(lb)
	if err != nil {
		return err
	}
	if !ok || len(pools) != 1 {
		return fmt.Errorf("load balancer %s: %d pools on %s (found %t)", lb, len(pools), backend.Name(), ok)
	}
	var got []string
	for _, members := range pools {
		got = memberStrings(members)
	}
	if want := s.members(i); !slices.Equal(got, want) {
		return fmt.Errorf("load balancer %s on %s: members %s, want %s", lb, backend.Name(), strings.Join(got, " "), strings.Join(want, " "))
	}
	return nil
}
