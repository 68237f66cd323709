package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// nplctl runs bin/nplctl and returns its stdout, stderr and exit code.
func nplctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	bin, err := stack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "nplctl"), args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return out.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("run nplctl: %v", err)
	return "", "", -1
}

// TestNplctl_reportsDriftUntilResyncRepairsIt: the pool holds exactly the
// members the test knows from its Pods (each Ready Pod's node IP and node
// port from the annotation npl-agent wrote; a Pod the test keeps not Ready
// is left out), both in what `nplctl pools` expects and in what the BIG-IP
// has. A member removed and an extra one added by hand on the BIG-IP are
// reported by `nplctl pools --check` (exit 1, naming them); npl-lbsync's
// periodic resync repairs the pool and --check passes again.
func TestNplctl_reportsDriftUntilResyncRepairsIt(t *testing.T) {
	e := setup(t)
	l, backend := e.startLBSync(t, "npl-lbsync-drift", "bigip", netip.MustParsePrefix("198.18.120.0/28"),
		"clusterName: e2e-drift\nloadBalancerClass: npl.io/drift\nresyncPeriod: 5s\n")
	ns := e.namespace(t)
	for i, node := range []string{node0, node1, node2} {
		e.createPod(t, webPod(ns, fmt.Sprintf("web-%d", i), node, web, func(p *corev1.Pod) {
			if i == 2 { // mapped by npl-agent, but never Ready: not a member
				p.Annotations = map[string]string{cluster.AnnotationReady: "false"}
			}
		}))
	}
	class := "npl.io/drift"
	e.createService(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: web,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	})

	// The members the test expects, from its own Pods: port 8080/TCP of
	// web-0 and web-1, which become Ready; web-2 stays not Ready.
	want := map[inspect.Member]string{}
	for i := range 3 {
		name := fmt.Sprintf("web-%d", i)
		var m inspect.Member
		for _, en := range e.waitEntries(t, ns, name, 1) {
			if en.PodPort == 8080 && en.Protocol == "tcp" {
				m = inspect.Member{IP: en.NodeIP, Port: int32(en.NodePort), Enabled: true}
			}
		}
		if m.IP == "" {
			t.Fatalf("pod %s has no mapping of 8080/tcp", name)
		}
		ready := i < 2
		waitFor(t, 30*time.Second, fmt.Sprintf("pod %s Ready=%v", name, ready), func() (bool, error) {
			p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning && podutils.IsPodReady(p) == ready, err
		})
		if ready {
			want[m] = name
		}
	}

	args := []string{"pools", "--kubeconfig", e.c.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check", "-o", "json"}
	var pool inspect.Pool
	var code int
	// poolIs runs nplctl and reports whether the one pool's expected members
	// are the test's, and its actual members are actual.
	poolIs := func(actual map[inspect.Member]string) (bool, error) {
		out, stderr, c := nplctl(t, args...)
		code = c
		var report inspect.Report
		if err := json.Unmarshal([]byte(out), &report); err != nil {
			return false, fmt.Errorf("nplctl output %q (%s): %w", out, stderr, err)
		}
		if len(report.Pools) != 1 {
			return false, fmt.Errorf("%d pools, want 1", len(report.Pools))
		}
		pool = report.Pools[0]
		if d := memberSetDiff(want, pool.Expected); d != "" {
			return false, fmt.Errorf("expected members: %s", d)
		}
		if d := memberSetDiff(actual, pool.Actual); d != "" {
			return false, fmt.Errorf("actual members: %s", d)
		}
		return true, nil
	}
	waitFor(t, 30*time.Second, "the BIG-IP pool with the Ready Pods' members", func() (bool, error) {
		return poolIs(want)
	})
	if code != 0 || pool.State != inspect.StateInSync {
		t.Errorf("nplctl pools --check exit %d, state %q with the expected members in place, want 0 and %s", code, pool.State, inspect.StateInSync)
	}

	// Drift by hand: drop web-0's member, keep web-1's, add a stranger.
	var dropped, kept inspect.Member
	for m, name := range want {
		if name == "web-0" {
			dropped = m
		} else {
			kept = m
		}
	}
	stranger := inspect.Member{IP: "198.18.0.99", Port: 61999, Enabled: true}
	setter, ok := backend.(interface {
		SetMembers(string, []lbmodel.Member) error
	})
	if !ok {
		t.Fatal("the BIG-IP backend cannot set members")
	}
	if err := setter.SetMembers(pool.Name, []lbmodel.Member{
		{IP: kept.IP, Port: kept.Port, Enabled: true}, {IP: stranger.IP, Port: stranger.Port, Enabled: true},
	}); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := nplctl(t, args...)
	if code != 1 {
		t.Fatalf("nplctl pools --check exit %d after drift, want 1\n%s%s", code, out, stderr)
	}
	missing := fmt.Sprintf("%s:%d", dropped.IP, dropped.Port)
	if !strings.Contains(stderr, "drift") || !strings.Contains(stderr, "missing "+missing) || !strings.Contains(stderr, "extra 198.18.0.99:61999") {
		t.Errorf("--check does not name the differing members (missing %s, extra 198.18.0.99:61999):\n%s", missing, stderr)
	}
	table, _, _ := nplctl(t, "pools", "--kubeconfig", e.c.Kubeconfig(), "--config", l.ConfigPath, "-n", ns)
	if !strings.Contains(table, "drift") {
		t.Errorf("the table does not show the drift:\n%s", table)
	}

	// The periodic resync (5 s here) compares with the load balancer and repairs it.
	waitFor(t, 30*time.Second, "the resync puts the Ready Pods' members back", func() (bool, error) {
		return poolIs(want)
	})
	if code != 0 {
		t.Errorf("nplctl pools --check exit %d after the repair, want 0", code)
	}
}

// memberSetDiff compares members as a set with the test's own; "" when equal.
func memberSetDiff(want map[inspect.Member]string, got []inspect.Member) string {
	have := map[inspect.Member]bool{}
	var extra, missing []string
	for _, m := range got {
		if have[m] {
			extra = append(extra, fmt.Sprintf("%v twice", m))
		}
		have[m] = true
		if _, ok := want[m]; !ok {
			extra = append(extra, fmt.Sprint(m))
		}
	}
	for m, pod := range want {
		if !have[m] {
			missing = append(missing, fmt.Sprintf("%v (pod %s)", m, pod))
		}
	}
	if len(extra) == 0 && len(missing) == 0 {
		return ""
	}
	slices.Sort(extra)
	slices.Sort(missing)
	return fmt.Sprintf("missing %v, unexpected %v", missing, extra)
}
