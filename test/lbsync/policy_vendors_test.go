package lbsync

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// policyObjects lists, as "kind name", the monitors and persistence
// profiles of a cluster that a backend's simulator holds: npl's own, which
// its traffic policies make.
func policyObjects(t *testing.T, backend stack.Backend, cluster string) []string {
	t.Helper()
	var out []string
	switch b := backend.(type) {
	case interface{ Objects(string) []map[string]any }: // avi
		for _, kind := range []string{"healthmonitor", "applicationpersistenceprofile"} {
			for _, o := range b.Objects(kind) {
				if name, _ := o["name"].(string); strings.HasPrefix(name, cluster+"--") {
					out = append(out, kind+" "+name)
				}
			}
		}
	case interface{ Sim() *bigipsim.Server }:
		st := b.Sim().Dump()
		for _, d := range append(st.Monitors, st.Persistence...) {
			out = append(out, d.Type+" "+d.FullPath)
		}
	default:
		t.Fatalf("backend %s holds no policy objects", backend.Name())
	}
	slices.Sort(out)
	return out
}

// TestLBSync_policyOnAviAndBIGIP: a Service with sessionAffinity ClientIP
// and a LoadBalancerPolicy's health check (every 7 s: neither load
// balancer's built-in monitor), served by npl-lbsync on the Avi
// and BIG-IP simulators: the pool's persistence profile and monitor are
// npl's own objects of the cluster, and nplctl pools finds the policy the
// provider reports in sync; without the policy and the affinity they are
// gone; with the Service deleted, none is left.
func TestLBSync_policyOnAviAndBIGIP(t *testing.T) {
	e := lbsyncbed.Setup(t)
	ip := e.NodeIP(0)
	for i, provider := range []string{"avi", "bigip"} {
		t.Run(provider, func(t *testing.T) {
			ns := e.Namespace(t)
			ctx := lbsyncbed.Context(t, 2*time.Minute)
			vips := fmt.Sprintf("198.18.%d.0/28", 122+i)
			backend, err := stack.StartBackend(provider, t.TempDir(), netip.MustParsePrefix(vips))
			if err != nil {
				t.Fatal(err)
			}
			stack.CloseAtEnd(t, backend)
			class := "npl.io/pol-" + provider
			cluster := lbsyncbed.ClusterName + "-pol-" + provider
			l := e.StartSyncer(t, "npl-lbsync-pol-"+provider, cluster,
				lbsyncbed.ConfigWith(cluster, "NodePortLocal", class, vips, backend.ProviderConfig()), false)

			e.Pod(t, ns, "a", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
			svc := lbsyncbed.LBService(ns, "web", &class)
			svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			e.CreateService(t, svc)
			if err := e.CreatePolicy(t, policyFor(ns, "check", "web", v1alpha1.TrafficPolicy{
				HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckTCP, IntervalSeconds: ptr.To[int32](7)}})); err != nil {
				t.Fatal(err)
			}
			lbsyncbed.WaitFor(t, 60*time.Second, "the persistence profile and the monitor", func() (bool, error) {
				return len(policyObjects(t, backend, cluster)) == 2, nil
			})
			e.WaitPolicyCondition(t, ns, "check", "Service", "web", metav1.ConditionTrue, "Accepted")
			lbsyncbed.WaitFor(t, 30*time.Second, "the Service synced without warnings", func() (bool, error) {
				c := lbsyncbed.Condition(e.Service(t, ns, "web"))
				return c != nil && c.Reason == "Synced", nil
			})

			// The provider reports the policy it applied: nplctl finds it in
			// sync.
			report, stderr, code := lbsyncbed.NplctlPools(t, "--kubeconfig", e.Cluster.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check")
			want := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 10800},
				HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 7}}
			if code != 0 || len(report.Pools) != 1 || report.Pools[0].State != inspect.StateInSync ||
				inspect.PolicyDrift(want, report.Pools[0].ActualPolicy) != nil {
				t.Errorf("nplctl pools --check: exit %d, %+v\n%s", code, report.Pools, stderr)
			}

			// Neither the policy nor the affinity: nothing uses the objects.
			if err := e.Policies(t).Namespace(ns).Delete(ctx, "check", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			e.UpdateService(t, ns, "web", func(s *corev1.Service) {
				s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
			})
			lbsyncbed.WaitFor(t, 60*time.Second, "the policy objects gone with the policy", func() (bool, error) {
				return len(policyObjects(t, backend, cluster)) == 0, nil
			})

			// Back, then the Service deleted: none left.
			e.UpdateService(t, ns, "web", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP })
			lbsyncbed.WaitFor(t, 60*time.Second, "the persistence profile back", func() (bool, error) {
				return len(policyObjects(t, backend, cluster)) == 1, nil
			})
			if err := e.Client.CoreV1().Services(ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			lbsyncbed.WaitFor(t, 60*time.Second, "no policy object and no pool left", func() (bool, error) {
				_, _, exists, err := backend.Pools(lbmodel.LoadBalancerName(cluster, ns, "web"))
				return err == nil && !exists && len(policyObjects(t, backend, cluster)) == 0, err
			})
		})
	}
}
