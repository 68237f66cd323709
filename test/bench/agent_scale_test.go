package bench

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// The scale fixture: 10000 mappings on one node (100 Pods behind one
// Service of 100 ports), for the restart and memory figures of each
// datapath backend. It runs on a cluster of its own (two nodes, the Pods on
// the first), so the 1000-mapping fixture and its agent stay as they are.
const (
	scaleNamespace = "bench-scale"
	scalePods      = 100
	scalePorts     = 100
	scaleFirstPort = 8000
	scaleMappings  = scalePods * scalePorts
	// scalePortRange holds 10000 mappings below the cluster's NodePort range
	// (30000-32767) and the ephemeral range (32768-60999), as the agent asks.
	scalePortRange = "19000-29999"
)

type scaleFixture struct {
	e     *env
	node  *cluster.Node
	agent *stack.Agent
}

// scaleEnv returns the scale fixture, building it on first use.
func scaleEnv(b *testing.B) *scaleFixture {
	b.Helper()
	e := useCluster(b, "agent-scale", cluster.Options{Nodes: 2})
	if e.scale != nil {
		return e.scale
	}
	began := time.Now()
	f := &scaleFixture{e: e, node: e.c.Nodes()[0]}
	e.scale = f
	if err := f.setup(); err != nil {
		if cerr := closeEnv(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		b.Fatalf("scale fixture: %v", err)
	}
	b.Logf("scale fixture: %d Pods, %d mappings on %s, built in %s", scalePods, scaleMappings, f.node.Name,
		time.Since(began).Round(time.Millisecond))
	return f
}

func (f *scaleFixture) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := f.e.client
	if _, err := f.e.c.CreateNamespace(ctx, scaleNamespace); err != nil {
		return err
	}
	agents, err := stack.StartAgents(ctx, f.e.c, stack.AgentOptions{
		PortRange: scalePortRange, CheckInterval: time.Minute, Datapath: string(datapath.BackendIPTables),
		// 100 annotation patches of 100 entries: do not measure the client's rate limit.
		ExtraArgs: []string{"--kube-api-qps", "200", "--kube-api-burst", "400"},
	})
	if err != nil {
		return err
	}
	f.agent = agents[0]
	for _, a := range agents[1:] {
		_ = a.Stop() // the second node runs nothing of ours
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "scale", Namespace: scaleNamespace,
			Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "scale"}},
	}
	c := corev1.Container{Name: "web", Image: "npl.io/test-server"}
	for i := range scalePorts {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: "p" + strconv.Itoa(i), Port: int32(1000 + i), Protocol: corev1.ProtocolTCP,
			TargetPort: intstr.FromInt32(int32(scaleFirstPort + i)),
		})
		c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: int32(scaleFirstPort + i), Protocol: corev1.ProtocolTCP})
	}
	if _, err := client.CoreV1().Services(scaleNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service: %w", err)
	}
	if err := parallel(scalePods, 8, func(i int) error {
		_, err := client.CoreV1().Pods(scaleNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%03d", i), Namespace: scaleNamespace, Labels: svc.Spec.Selector},
			Spec: corev1.PodSpec{NodeName: f.node.Name, Containers: []corev1.Container{c},
				TerminationGracePeriodSeconds: ptr.To[int64](0)},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create pods: %w", err)
	}
	if _, err := f.e.c.WaitForPods(ctx, scaleNamespace, nil, scalePods, true); err != nil {
		return err
	}
	if err := pollUntil(3*time.Minute, time.Second, "every Pod annotated", func() (bool, error) {
		ann, err := f.annotations(ctx)
		return len(ann) == scalePods && countEntries(ann) == scaleMappings, err
	}); err != nil {
		return fmt.Errorf("%w\n%s", err, f.agent.Tail(20))
	}
	return pollUntil(time.Minute, 200*time.Millisecond, "10000 mappings", func() (bool, error) {
		n, err := f.mappings(ctx, datapath.BackendIPTables)
		return n == scaleMappings, err
	})
}

func (f *scaleFixture) close() error {
	if f.agent != nil {
		return f.agent.Stop()
	}
	return nil
}

func countEntries(ann map[string][]contract.Entry) int {
	n := 0
	for _, entries := range ann {
		n += len(entries)
	}
	return n
}

// annotations returns the parsed annotation of every Pod by name.
func (f *scaleFixture) annotations(ctx context.Context) (map[string][]contract.Entry, error) {
	return podAnnotations(ctx, f.e.client, scaleNamespace, "")
}

var nftMapElement = regexp.MustCompile(`(?m)tcp \. \d+(?: comment "[^"]*")? : `)

// mappings counts the node's DNAT mappings in backend's datapath, read with
// iptables-save or nft as an operator would.
func (f *scaleFixture) mappings(ctx context.Context, backend datapath.Backend) (int, error) {
	if backend == datapath.BackendNFTables {
		out, err := f.node.Command(ctx, "nft", "list", "map", "ip", datapath.TableName, "node-ports").CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "No such file or directory") {
				return 0, nil
			}
			return 0, fmt.Errorf("nft list map on %s: %w: %s", f.node.Name, err, out)
		}
		return len(nftMapElement.FindAllIndex(out, -1)), nil
	}
	out, err := f.node.Command(ctx, "iptables-save", "-t", "nat").Output()
	if err != nil {
		return 0, fmt.Errorf("iptables-save on %s: %w", f.node.Name, err)
	}
	return strings.Count(string(out), "-j DNAT --to-destination"), nil
}

// wipe removes backend's mappings by hand, as a reboot or a lost table
// would.
func (f *scaleFixture) wipe(ctx context.Context, backend datapath.Backend) error {
	args := []string{"iptables", "-w", "5", "-t", "nat", "-F", datapath.ChainNodePortLocal}
	if backend == datapath.BackendNFTables {
		args = []string{"nft", "delete", "table", "ip", datapath.TableName}
	}
	if out, err := f.node.Command(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// restart starts the stopped agent and returns when it is ready and when
// its datapath holds every mapping.
func (f *scaleFixture) restart(ctx context.Context, backend datapath.Backend) (ready, restored time.Duration, err error) {
	start := time.Now()
	if err := f.agent.Start(ctx); err != nil {
		return 0, 0, err
	}
	var readyErr, restoreErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		url := fmt.Sprintf("http://%s:%d/readyz", f.node.IP, stack.AgentHealthPort)
		at, err := waitOK(url, 60*time.Second)
		ready, readyErr = at.Sub(start), err
	})
	wg.Go(func() {
		restoreErr = pollUntil(60*time.Second, 20*time.Millisecond, fmt.Sprintf("%d mappings", scaleMappings), func() (bool, error) {
			n, err := f.mappings(ctx, backend)
			return n == scaleMappings, err
		})
		restored = time.Since(start)
	})
	wg.Wait()
	if err := errors.Join(readyErr, restoreErr); err != nil {
		return 0, 0, fmt.Errorf("%w\n%s", err, f.agent.Tail(20))
	}
	return ready, restored, nil
}

// BenchmarkAgentRestartAt10000Mappings restarts npl-agent with 10000
// mappings on its node, per datapath backend, after wiping its mappings (a
// flushed chain, a deleted table): process start to /readyz (ready-ms) and
// to every mapping back in the datapath (restore-ms, polled every 20 ms),
// node ports changed in the annotations (port-changes, want 0), and the
// agent's RSS once restored. Target for nftables: a complete map within 1 s.
func BenchmarkAgentRestartAt10000Mappings(b *testing.B) {
	f := scaleEnv(b)
	ctx := context.Background()
	for _, backend := range datapath.Backends {
		b.Run("backend="+string(backend), func(b *testing.B) {
			// Switch to the backend (untimed): the agent removes the other one.
			if err := f.agent.Stop(); err != nil {
				b.Fatal(err)
			}
			f.agent.SetDatapath(string(backend))
			if _, _, err := f.restart(ctx, backend); err != nil {
				b.Fatal(err)
			}
			var ready, restored []time.Duration
			changes := 0
			var rss float64
			for b.Loop() {
				b.StopTimer()
				before, err := f.annotations(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := f.agent.Stop(); err != nil {
					b.Fatal(err)
				}
				if err := f.wipe(ctx, backend); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				r, s, err := f.restart(ctx, backend)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				ready, restored = append(ready, r), append(restored, s)
				time.Sleep(2 * time.Second) // every Pod synced once
				after, err := f.annotations(ctx)
				if err != nil {
					b.Fatal(err)
				}
				changes += portChanges(before, after)
				m, err := f.agent.Metric("process_resident_memory_bytes")
				if err != nil {
					b.Fatal(err)
				}
				rss = max(rss, m)
				b.StartTimer()
			}
			b.ReportMetric(ms(median(ready)), "ready-ms")
			b.ReportMetric(ms(median(restored)), "restore-ms")
			b.ReportMetric(float64(changes)/float64(len(ready)), "port-changes")
			b.ReportMetric(rss/mib, "MiB-rss")
			b.ReportMetric(scaleMappings, "mappings")
		})
	}
}
