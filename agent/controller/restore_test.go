package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeportlocal/npl/agent/controller"
	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/agent/kubeapi/kubeapitest"
	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/agent/portalloc/portalloctest"
	"github.com/nodeportlocal/npl/contract"
)

const (
	nodeName = "node-a"
	nodeIP   = "198.18.0.10"
)

// fakeDatapath records what the controller programs; every generation is
// written at once.
type fakeDatapath struct {
	mu      sync.Mutex
	gen     uint64
	last    datapath.Desired
	flushed []int
}

func (d *fakeDatapath) Update(desired datapath.Desired) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	d.last = desired
	return d.gen
}

func (d *fakeDatapath) Wait(context.Context, uint64) error { return nil }

func (d *fakeDatapath) FlushUDP(_ context.Context, nodePort int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flushed = append(d.flushed, nodePort)
	return nil
}

func (d *fakeDatapath) flushedPorts() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(slices.Values(d.flushed))
}

// testNode is the node the controller runs on, at nodeIP.
func testNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}},
	}
}

// runController runs a controller of cfg on nodeName (its InternalIP
// published) with one IPv4 datapath, until the test ends, and returns the
// datapath and the context it runs in.
func runController(t *testing.T, cfg controller.Config, client *fake.Clientset, alloc controller.Allocator) (*fakeDatapath, context.Context) {
	t.Helper()
	cfg.NodeName, cfg.NodeIPPreference = nodeName, []corev1.NodeAddressType{corev1.NodeInternalIP}
	dp := &fakeDatapath{}
	c := controller.New(cfg, kubeapitest.New(client), alloc, map[contract.Family]controller.Datapath{contract.FamilyIPv4: dp}, controller.NewMetrics(nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return dp, ctx
}

// oldPod is a running Pod whose annotation an older npl wrote: it lists the
// given mappings, formatted by the product's own contract.Format.
func oldPod(t *testing.T, name, ip string, app string, entries ...contract.Entry) *corev1.Pod {
	t.Helper()
	value, err := contract.Format(entries)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": app},
			Annotations: map[string]string{contract.PodKey: value}},
		Spec:   corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func entry(podPort, nodePort int, proto contract.Protocol) contract.Entry {
	return contract.Entry{PodPort: podPort, NodeIP: nodeIP, NodePort: nodePort, Protocol: proto, IPFamily: contract.FamilyIPv4}
}

func service(name, app string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": app}, Ports: ports},
	}
}

func svcPort(name string, proto corev1.Protocol, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: target, Protocol: proto, TargetPort: intstr.FromInt32(target)}
}

// TestRestore_movesOneOfTwoMappingsThatShareANumber: an older npl kept
// one port table per protocol, so TCP and UDP could share a number, on one
// Pod port (DNS) or across Pods. On restart each shared number stays with
// its TCP mapping, the UDP mapping alone moves to a free port, every other
// node port stays, and the Pod gets a Warning Event naming both ports.
func TestRestore_movesOneOfTwoMappingsThatShareANumber(t *testing.T) {
	node := testNode()
	dns := oldPod(t, "dns", "198.19.0.5", "dns", entry(5353, 61000, "tcp"), entry(5353, 61000, "udp"))
	web := oldPod(t, "web", "198.19.0.6", "web", entry(8080, 61001, "tcp"))
	syslog := oldPod(t, "syslog", "198.19.0.7", "syslog", entry(514, 61001, "udp"))
	plain := oldPod(t, "plain", "198.19.0.8", "web", entry(8080, 61002, "tcp"))
	client := fake.NewClientset(node, dns, web, syslog, plain,
		service("dns", "dns", svcPort("dns-tcp", corev1.ProtocolTCP, 5353), svcPort("dns-udp", corev1.ProtocolUDP, 5353)),
		service("web", "web", svcPort("http", corev1.ProtocolTCP, 8080)),
		service("syslog", "syslog", svcPort("syslog", corev1.ProtocolUDP, 514)))

	reserver := portalloctest.NewReserver()
	rng := portalloc.Range{Start: 61000, End: 61009}
	alloc, err := portalloc.New(rng, reserver)
	if err != nil {
		t.Fatal(err)
	}
	dp, ctx := runController(t, controller.Config{PortRange: rng}, client, alloc)

	// The shared numbers stay with TCP; the two UDP mappings move, in Pod
	// order, to the first free ports; nothing else changes.
	want := map[string][]contract.Entry{
		"dns":    {entry(5353, 61000, "tcp"), entry(5353, 61003, "udp")},
		"web":    {entry(8080, 61001, "tcp")},
		"syslog": {entry(514, 61004, "udp")},
		"plain":  {entry(8080, 61002, "tcp")},
	}
	got := map[string][]contract.Entry{}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		for name := range want {
			p, err := client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got[name], err = contract.Parse(p.Annotations[contract.PodKey])
			if err != nil {
				return false, err
			}
		}
		return cmp.Equal(want, got), nil
	})
	if err != nil {
		t.Fatalf("annotations after restore (-want +got):\n%s", cmp.Diff(want, got))
	}
	wantHeld := []string{"IPv4/tcp/61000", "IPv4/tcp/61001", "IPv4/tcp/61002", "IPv4/udp/61003", "IPv4/udp/61004"}
	if diff := cmp.Diff(wantHeld, reserver.Held()); diff != "" {
		t.Errorf("reserved sockets (-want +got):\n%s", diff)
	}
	// The UDP flows to the numbers the UDP mappings left are flushed.
	if diff := cmp.Diff([]int{61000, 61001}, dp.flushedPorts()); diff != "" {
		t.Errorf("flushed UDP node ports (-want +got):\n%s", diff)
	}

	wantEvents := map[string]string{"dns": "from 61000 to 61003", "syslog": "from 61001 to 61004"}
	var events map[string]string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		events = map[string]string{}
		for _, ev := range evs.Items {
			if ev.Reason != "NodePortReallocated" {
				continue
			}
			if ev.Type != corev1.EventTypeWarning {
				return false, fmt.Errorf("event %q has type %s, want Warning", ev.Message, ev.Type)
			}
			for name, text := range wantEvents {
				if ev.InvolvedObject.Name == name && strings.Contains(ev.Message, text) {
					events[name] = text
				}
			}
			if _, ok := wantEvents[ev.InvolvedObject.Name]; !ok {
				return false, fmt.Errorf("unexpected NodePortReallocated event on %s: %s", ev.InvolvedObject.Name, ev.Message)
			}
		}
		return cmp.Equal(wantEvents, events), nil
	})
	if err != nil {
		t.Fatalf("NodePortReallocated Warning events: %v (found %v, want %v)", err, events, wantEvents)
	}
}

// TestRestore_keepsTheRuleOfAPortOutsideTheRangeForTheGrace: restarted with
// a range that no longer holds a running Pod's node port, the agent
// publishes a new port in the range and keeps forwarding the old one to the
// Pod beside it (no annotation lists it) until RetiredPortGrace has passed,
// or until the Pod is gone; then only the new port is programmed.
func TestRestore_keepsTheRuleOfAPortOutsideTheRangeForTheGrace(t *testing.T) {
	node := testNode()
	web := oldPod(t, "web", "198.19.0.6", "web", entry(8080, 61500, "tcp"))
	gone := oldPod(t, "gone", "198.19.0.7", "web", entry(8080, 61501, "tcp"))
	client := fake.NewClientset(node, web, gone, service("web", "web", svcPort("http", corev1.ProtocolTCP, 8080)))
	rng := portalloc.Range{Start: 61000, End: 61009}
	reserver := portalloctest.NewReserver()
	alloc, err := portalloc.New(rng, reserver)
	if err != nil {
		t.Fatal(err)
	}
	dp, ctx := runController(t, controller.Config{PortRange: rng, RetiredPortGrace: 3 * time.Second}, client, alloc)
	// held lists the sockets held outside the range.
	held := func() []string {
		return slices.DeleteFunc(reserver.Held(), func(k string) bool {
			port, _ := strconv.Atoi(k[strings.LastIndex(k, "/")+1:])
			return rng.Contains(port)
		})
	}
	// programmed lists each Pod's programmed node ports, inRange for one
	// in the range (which one depends on the order the Pods are synced).
	const inRange = 0
	programmed := func() map[string][]int {
		dp.mu.Lock()
		defer dp.mu.Unlock()
		out := map[string][]int{}
		for _, m := range dp.last.Mappings {
			p := m.NodePort
			if rng.Contains(p) {
				p = inRange
			}
			out[m.Pod] = append(out[m.Pod], p)
			slices.Sort(out[m.Pod])
		}
		return out
	}
	poll := func(what string, want map[string][]int) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			return cmp.Equal(want, programmed()), nil
		}); err != nil {
			t.Fatalf("%s: node ports programmed %v, want %v", what, programmed(), want)
		}
	}

	// Both Pods get new ports in the range; the old ones stay programmed.
	poll("after the restart", map[string][]int{"ns/web": {inRange, 61500}, "ns/gone": {inRange, 61501}})
	// Their sockets hold the old ports while the rules are kept.
	if got, want := held(), []string{"IPv4/tcp/61500", "IPv4/tcp/61501"}; !slices.Equal(got, want) {
		t.Errorf("sockets held outside the range %v, want %v", got, want)
	}
	for _, name := range []string{"web", "gone"} {
		p, err := client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if es, err := contract.Parse(p.Annotations[contract.PodKey]); err != nil || len(es) != 1 || !rng.Contains(es[0].NodePort) {
			t.Errorf("%s's annotation %v (%v); want only its new node port, in %s", name, es, err, rng)
		}
	}
	// A Pod gone: its old port goes with it.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("the Pod deleted", map[string][]int{"ns/web": {inRange, 61500}})
	if got, want := held(), []string{"IPv4/tcp/61500"}; !slices.Equal(got, want) {
		t.Errorf("sockets held outside the range after the Pod went %v, want %v", got, want)
	}
	// The grace over: only the new port.
	poll("after the grace", map[string][]int{"ns/web": {inRange}})
	if got := held(); len(got) != 0 {
		t.Errorf("sockets held outside the range after the grace %v, want none", got)
	}
}

// TestRestore_keepsNoRuleOnAnOldPortAHostProcessTook: a node port outside
// the new range that a host process bound while the agent was down is the
// process's now: no rule is kept there (its traffic must not reach the
// Pod), and the Pod still gets its new port.
func TestRestore_keepsNoRuleOnAnOldPortAHostProcessTook(t *testing.T) {
	node := testNode()
	web := oldPod(t, "web", "198.19.0.6", "web", entry(8080, 61500, "tcp"))
	client := fake.NewClientset(node, web, service("web", "web", svcPort("http", corev1.ProtocolTCP, 8080)))
	rng := portalloc.Range{Start: 61000, End: 61009}
	reserver := portalloctest.NewReserver()
	reserver.SetBusy(contract.FamilyIPv4, contract.ProtocolTCP, 61500, true)
	alloc, err := portalloc.New(rng, reserver)
	if err != nil {
		t.Fatal(err)
	}
	dp, ctx := runController(t, controller.Config{PortRange: rng, RetiredPortGrace: time.Minute}, client, alloc)
	var ports []int
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		dp.mu.Lock()
		defer dp.mu.Unlock()
		ports = ports[:0]
		for _, m := range dp.last.Mappings {
			ports = append(ports, m.NodePort)
		}
		return len(ports) == 1 && rng.Contains(ports[0]), nil
	}); err != nil {
		t.Fatalf("node ports programmed %v, want only web's new one in %s (61500 is a host process's)", ports, rng)
	}
}
