package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// The cluster-scale fixture: 5000 Nodes, 5000 LoadBalancer Services of 10
// Pods each (50000 Pods), written through the API of a NoKubelet cluster of
// its own as the npl-lbsync fixture is, its Nodes objects alone (no
// namespace, no kubelet: npl-lbsync reads only their addresses). Each Pod
// sits on the Node of its index modulo the Nodes, annotated with a node
// port of that Node's address. The sizes are flags (after -args), for a
// machine where the full size takes too long.
var (
	scaleNodes       = flag.Int("bench.scale-nodes", 5000, "Nodes of BenchmarkLBSyncScale")
	scaleLBServices  = flag.Int("bench.scale-services", 5000, "LoadBalancer Services of BenchmarkLBSyncScale")
	scalePodsPerLB   = flag.Int("bench.scale-pods-per-service", 10, "Pods behind each Service of BenchmarkLBSyncScale")
	scaleNodeAddress = netip.MustParseAddr("10.128.0.0")
)

// lbScaleEnv returns the cluster-scale fixture, building it on first use.
func lbScaleEnv(b *testing.B) *lbFixture {
	b.Helper()
	e := useCluster(b, "lbsync-scale", cluster.Options{Nodes: 1, NoKubelet: true})
	if e.lb != nil {
		return e.lb
	}
	began := time.Now()
	nodes := make([]benchNode, *scaleNodes)
	a := scaleNodeAddress
	for i := range nodes {
		a = a.Next()
		nodes[i] = benchNode{Name: fmt.Sprintf("sim-%05d", i), IP: a}
	}
	f := &lbFixture{e: e, main: &serviceSet{ns: "bench-scale-lb", class: "npl.io/lb", cluster: "scale",
		vips: netip.MustParsePrefix("198.18.224.0/19"), basePort: 40000,
		services: *scaleLBServices, podsPer: *scalePodsPerLB, nodes: nodes}}
	e.lb = f
	err := addServiceCIDR(e)
	if err == nil {
		err = createNodes(e, nodes)
	}
	if err == nil {
		err = f.setup(b)
	}
	if err != nil {
		if cerr := closeEnv(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		b.Fatalf("cluster-scale fixture: %v", err)
	}
	b.Logf("cluster-scale fixture: %d Nodes, built in %s", len(nodes), time.Since(began).Round(time.Millisecond))
	return f
}

// addServiceCIDR gives the cluster's Services a second range, 10.112.0.0/16:
// its own (--service-cluster-ip-range) holds 4094 ClusterIPs, and an
// allocator near full slows every create down.
func addServiceCIDR(e *env) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cidrs := e.client.NetworkingV1().ServiceCIDRs()
	if _, err := cidrs.Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "bench-scale"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.112.0.0/16"}}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ServiceCIDR: %w", err)
	}
	return pollUntil(time.Minute, 200*time.Millisecond, "the ServiceCIDR ready", func() (bool, error) {
		c, err := cidrs.Get(ctx, "bench-scale", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(c.Status.Conditions, networkingv1.ServiceCIDRConditionReady), nil
	})
}

// createNodes creates the Node objects (status included: a Node's create
// takes it) and waits until the node lifecycle controller is done with
// them: with no kubelet to renew their Leases, it marks each Ready Unknown
// and taints it once its startup grace period passed (60 s), 2 writes per
// Node that would otherwise land in the measures. The Pods tolerate the
// taints; npl-lbsync reads only the Nodes' addresses in NodePortLocal mode.
func createNodes(e *env, nodes []benchNode) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(len(nodes))*20*time.Millisecond)
	defer cancel()
	client := e.client.CoreV1().Nodes()
	if err := parallel(len(nodes), 32, func(i int) error {
		n := nodes[i]
		_, err := client.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: n.IP.String()}, {Type: corev1.NodeHostName, Address: n.Name},
			}},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create nodes: %w", err)
	}
	return pollUntil(4*time.Minute+time.Duration(len(nodes))*20*time.Millisecond, 5*time.Second, "the node lifecycle controller done with the Nodes", func() (bool, error) {
		list, err := client.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		done := 0
		for _, n := range list.Items {
			if strings.HasPrefix(n.Name, "sim-") && len(n.Status.Conditions) > 0 && len(n.Spec.Taints) > 0 {
				done++
			}
		}
		return done == len(nodes), nil
	})
}

// BenchmarkLBSyncScale runs npl-lbsync (mock provider) on the
// cluster-scale fixture. Each iteration, as BenchmarkLBSyncFirstStart: the
// claims removed, npl-lbsync started, the time to the last pool applied
// (pools-s) and to /readyz (ready-s), the writes per Service; then, as
// BenchmarkLBSyncConvergence, 200 Pod annotation changes at 20/s, each
// timed from its write to the mock's write of its load balancer
// (member-p50/p99/max-ms, target p99 ≤ 250 ms). Heap: in use once the
// changes are applied (MiB-heap; B/pod over a synced npl-lbsync with no
// Pods, as BenchmarkLBSyncHeap). Watch traffic: what the process read
// (/proc/PID/io rchar: its lists and watches, TLS included) from its start
// to /readyz (start-MiB-read) and per change in the steady state
// (KiB-read/change).
func BenchmarkLBSyncScale(b *testing.B) {
	f := lbScaleEnv(b)
	ctx := context.Background()
	var pools, ready, latencies []time.Duration
	var writes int
	var startRead, steadyRead, heap, rss float64
	var changes int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		l, p, r, w := f.restart(ctx, b, true)
		pools, ready, writes = append(pools, p), append(ready, r), writes+w
		read0, err := readBytes(l)
		if err != nil {
			b.Fatal(err)
		}
		startRead += read0
		log, err := newWriteLog(l.LogPath)
		if err != nil {
			b.Fatal(err)
		}
		batch, err := f.main.changeBatch(ctx, f.e.client, changesPerOp, changeRate)
		if err != nil {
			b.Fatal(err)
		}
		lat, err := log.waitApplied(batch, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		latencies, changes = append(latencies, lat...), changes+len(batch)
		read1, err := readBytes(l)
		if err != nil {
			b.Fatal(err)
		}
		steadyRead += read1 - read0
		if heap, err = heapInUse(l); err != nil {
			b.Fatal(err)
		}
		r1, err := l.Metric("process_resident_memory_bytes")
		if err != nil {
			b.Fatal(err)
		}
		rss = max(rss, r1)
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(median(pools).Seconds(), "pools-s")
	b.ReportMetric(median(ready).Seconds(), "ready-s")
	b.ReportMetric(float64(writes)/(n*float64(f.main.services)), "writes/service")
	reportLatency(b, "member", latencies)
	b.ReportMetric(heap/mib, "MiB-heap")
	b.ReportMetric((heap-f.baseline)/float64(f.main.pods()), "B/pod")
	b.ReportMetric(rss/mib, "MiB-rss")
	b.ReportMetric(startRead/n/mib, "start-MiB-read")
	b.ReportMetric(steadyRead/float64(changes)/1024, "KiB-read/change")
	b.ReportMetric(float64(len(f.main.nodes)), "nodes")
	b.ReportMetric(float64(f.main.services), "services")
	b.ReportMetric(float64(f.main.pods()), "pods")
}

// readBytes returns what l's process has read so far (rchar of
// /proc/PID/io), the process found by its configuration file.
func readBytes(l *stack.LBSync) (float64, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	for _, path := range procs {
		cmdline, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(cmdline), l.ConfigPath) || !strings.Contains(string(cmdline), "npl-lbsync") {
			continue
		}
		io, err := os.ReadFile(filepath.Join(filepath.Dir(path), "io"))
		if err != nil {
			return 0, err
		}
		for line := range strings.SplitSeq(string(io), "\n") {
			if v, ok := strings.CutPrefix(line, "rchar: "); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, fmt.Errorf("no process of %s found", l.Name)
}
