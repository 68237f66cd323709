package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/stack"
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

// TestNplctl_reportsDriftUntilResyncRepairsIt: a member removed and an extra
// one added by hand on the BIG-IP are reported by `nplctl pools --check`
// (exit 1, naming them); npl-lbsync's periodic resync repairs the pool and
// --check passes again.
func TestNplctl_reportsDriftUntilResyncRepairsIt(t *testing.T) {
	e := setup(t)
	l, backend := e.startLBSync(t, "npl-lbsync-drift", "bigip", netip.MustParsePrefix("198.18.120.0/28"),
		"clusterName: e2e-drift\nloadBalancerClass: npl.io/drift\nresyncPeriod: 5s\n")
	ns := e.namespace(t)
	for i := range 2 {
		e.createPod(t, webPod(ns, fmt.Sprintf("web-%d", i), []string{node0, node1}[i], web))
	}
	class := "npl.io/drift"
	e.createService(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: web,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	})
	args := []string{"pools", "--kubeconfig", e.c.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check", "-o", "json"}
	var report inspect.Report
	waitFor(t, 30*time.Second, "nplctl pools --check in sync", func() (bool, error) {
		out, _, code := nplctl(t, args...)
		report = inspect.Report{}
		_ = json.Unmarshal([]byte(out), &report)
		return code == 0 && len(report.Pools) == 1 && len(report.Pools[0].Expected) == 2, nil
	})
	pool := report.Pools[0]

	// Drift by hand: drop the first member, add a stranger.
	stranger := providers.Member{IP: "198.18.0.99", Port: 61999, Enabled: true}
	kept := providers.Member{IP: pool.Expected[1].IP, Port: pool.Expected[1].Port, Enabled: true}
	setter, ok := backend.(interface {
		SetMembers(string, []providers.Member) error
	})
	if !ok {
		t.Fatal("the BIG-IP backend cannot set members")
	}
	if err := setter.SetMembers(pool.Name, []providers.Member{kept, stranger}); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := nplctl(t, args...)
	if code != 1 {
		t.Fatalf("nplctl pools --check exit %d after drift, want 1\n%s%s", code, out, stderr)
	}
	missing := fmt.Sprintf("%s:%d", pool.Expected[0].IP, pool.Expected[0].Port)
	if !strings.Contains(stderr, "drift") || !strings.Contains(stderr, "missing "+missing) || !strings.Contains(stderr, "extra 198.18.0.99:61999") {
		t.Errorf("--check does not name the differing members:\n%s", stderr)
	}
	table, _, _ := nplctl(t, "pools", "--kubeconfig", e.c.Kubeconfig(), "--config", l.ConfigPath, "-n", ns)
	if !strings.Contains(table, "drift") {
		t.Errorf("the table does not show the drift:\n%s", table)
	}

	// The periodic resync (5 s here) compares with the load balancer and repairs it.
	waitFor(t, 30*time.Second, "the resync repairs the pool", func() (bool, error) {
		_, _, code := nplctl(t, args...)
		return code == 0, nil
	})
}
