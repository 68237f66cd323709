package chart

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeportlocal/npl/contract"
)

// buildLbsync builds npl-lbsync, which the uninstall Jobs run.
func buildLbsync(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "npl-lbsync")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/npl-lbsync")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/npl-lbsync: %v\n%s", err, out)
	}
	return bin
}

// runHookJob runs a rendered hook Job's container with npl-lbsync on the
// test machine, as the Job's ServiceAccount and with its POD_NAMESPACE. The
// mounted configuration is replaced by configPath and the timeout shortened.
func runHookJob(t *testing.T, bin, kubeconfig, configPath string, job object) {
	t.Helper()
	j := job.typed.(*batchv1.Job)
	c := j.Spec.Template.Spec.Containers[0]
	var args []string
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "--config="):
			a = "--config=" + configPath
		case strings.HasPrefix(a, "--timeout="):
			a = "--timeout=60s"
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+kubeconfig)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+j.Namespace)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: npl-lbsync %v: %v\n%s", job, args, err, out)
	}
	t.Logf("%s: %s", job, out)
}

func waitPods(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, sel *metav1.LabelSelector, want int) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	var got int
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
		if err != nil {
			return false, err
		}
		got = len(pods.Items)
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("pods %s in %s: %d; want %d: %v", s, ns, got, want, err)
	}
}

// TestUninstall_hooksStopTheWorkloadsAndCleanServicesAsTheirServiceAccount
// installs a release on the local cluster (its Pods run as the cluster's
// stand-in kubelet runs them), then runs the pre-delete hook Jobs' commands
// in weight order with the hooks' own ServiceAccount: RBAC must let them do
// their job, and afterwards no npl mark is left on Services.
func TestUninstall_hooksStopTheWorkloadsAndCleanServicesAsTheirServiceAccount(t *testing.T) {
	c := localCluster(t)
	cr := newCreator(t, c)
	client := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bin := buildLbsync(t)

	const ns = "npl-uninstall"
	if _, err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	r, err := renderRelease(t, readValues(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), map[string]any{
		"ingressClass.create": false, "lbsync.replicas": 2,
	}), "un", ns)
	if err != nil {
		t.Fatal(err)
	}
	// Install: every object but the hooks, as `helm install` does.
	var hooks []object
	for _, o := range r.objects {
		if o.u.GetAnnotations()["helm.sh/hook"] != "" {
			hooks = append(hooks, o)
			continue
		}
		if err := cr.create(ctx, o, false); err != nil {
			t.Fatalf("install %s: %v", o, err)
		}
		if o.u.GetNamespace() == "" {
			t.Cleanup(func() {
				ri, _ := cr.resource(o)
				_ = ri.Delete(context.Background(), o.u.GetName(), metav1.DeleteOptions{})
			})
		}
	}
	deploy := r.one(t, "Deployment", "un-npl-lbsync").typed.(*appsv1.Deployment)
	agent := r.one(t, "DaemonSet", "un-npl-agent").typed.(*appsv1.DaemonSet)
	waitPods(ctx, t, client, ns, deploy.Spec.Selector, 2)
	waitPods(ctx, t, client, ns, agent.Spec.Selector, len(c.Nodes()))

	// Services as npl-lbsync leaves them, and one it does not serve.
	class, other := "npl.io/lb", "other.io/lb"
	svc := func(name string, cls *string, ann map[string]string, finalizers []string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann, Finalizers: finalizers},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: cls,
				Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 80}}},
		}
	}
	services := []*corev1.Service{
		svc("ours", &class, map[string]string{contract.ServiceEnabledKey: "true", contract.AutoAnnotatedKey: "true"},
			[]string{contract.CleanupFinalizer}),
		svc("foreign", &other, nil, nil),
	}
	for _, s := range services {
		created, err := client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.200.1"}}
		created.Status.Conditions = []metav1.Condition{{Type: contract.SyncedConditionType, Status: metav1.ConditionTrue,
			Reason: "Synced", LastTransitionTime: metav1.Now()}}
		if s.Name == "foreign" {
			created.Status.Conditions = nil
		}
		if _, err := client.CoreV1().Services(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// Whatever happened, let the Service go.
		_, _ = client.CoreV1().Services(ns).Patch(context.Background(), "ours", "application/merge-patch+json",
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})

	// The configuration the Job mounts.
	cm := r.one(t, "ConfigMap", "un-npl-lbsync-config").typed.(*corev1.ConfigMap)
	configPath := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, configPath, []byte(cm.Data["config.yaml"]))

	// The readiness-gate webhook is registered while the release runs.
	mwcs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if mwc, err := mwcs.Get(ctx, "un-npl-lbsync-webhook", metav1.GetOptions{}); err != nil || len(mwc.Webhooks) != 1 {
		t.Fatalf("webhook configuration after install: %v; want one webhook", err)
	}

	// Uninstall: the hooks in weight order (Helm sorts them so).
	kubeconfig, err := c.UserKubeconfig("system:serviceaccount:"+ns+":un-npl-uninstall", "system:serviceaccounts", "system:serviceaccounts:"+ns)
	if err != nil {
		t.Fatal(err)
	}
	var weights []int
	for _, o := range hooks {
		weights = append(weights, hookWeight(t, o))
	}
	slices.Sort(weights)
	stopWeight := hookWeight(t, r.one(t, "Job", "un-npl-uninstall"))
	for _, w := range slices.Compact(weights) {
		if w == stopWeight {
			// Before step 1 stops npl-lbsync, its webhook is gone, so
			// no Pod creation calls a webhook without endpoints.
			switch mwc, err := mwcs.Get(ctx, "un-npl-lbsync-webhook", metav1.GetOptions{}); {
			case apierrors.IsNotFound(err):
			case err != nil:
				t.Errorf("webhook configuration before step 1: %v", err)
			case len(mwc.Webhooks) != 0:
				t.Errorf("webhook configuration before step 1: %d webhooks; want none", len(mwc.Webhooks))
			}
		}
		for _, o := range hooks {
			if hookWeight(t, o) != w {
				continue
			}
			if o.u.GetKind() == "Job" {
				runHookJob(t, bin, kubeconfig, configPath, o)
				continue
			}
			// As Helm does with before-hook-creation: the object of the
			// hook's kind and name goes first, whoever made it.
			if strings.Contains(o.u.GetAnnotations()["helm.sh/hook-delete-policy"], "before-hook-creation") {
				ri, err := cr.resource(o)
				if err != nil {
					t.Fatal(err)
				}
				if err := ri.Delete(ctx, o.u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Fatalf("hook %s: delete before creation: %v", o, err)
				}
			}
			if err := cr.create(ctx, o, false); err != nil {
				t.Fatalf("hook %s: %v", o, err)
			}
			if o.u.GetNamespace() == "" {
				t.Cleanup(func() {
					ri, _ := cr.resource(o)
					_ = ri.Delete(context.Background(), o.u.GetName(), metav1.DeleteOptions{})
				})
			}
		}
		if w == -10 {
			// Step 1 stopped both workloads before it cleaned.
			got, err := client.AppsV1().Deployments(ns).Get(ctx, deploy.Name, metav1.GetOptions{})
			if err != nil || got.Spec.Replicas == nil || *got.Spec.Replicas != 0 {
				t.Errorf("npl-lbsync after step 1: %v, %v; want scaled to 0", got.Spec.Replicas, err)
			}
			for _, sel := range []*metav1.LabelSelector{deploy.Spec.Selector, agent.Spec.Selector} {
				s, _ := metav1.LabelSelectorAsSelector(sel)
				if pods, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: s.String()}); len(pods.Items) != 0 {
					t.Errorf("pods %s still there after step 1: %d", s, len(pods.Items))
				}
			}
		}
	}

	// No mark of ours is left; the other controller's Service is untouched.
	type marks struct {
		Annotations map[string]string
		Finalizers  []string
		Ingress     []corev1.LoadBalancerIngress
		Conditions  int
	}
	for name, want := range map[string]marks{
		"ours":    {},
		"foreign": {Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.200.1"}}},
	} {
		got, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := marks{Annotations: got.Annotations, Finalizers: got.Finalizers, Ingress: got.Status.LoadBalancer.Ingress, Conditions: len(got.Status.Conditions)}
		if diff := cmp.Diff(want, m, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(corev1.LoadBalancerIngress{}, "IPMode")); diff != "" {
			t.Errorf("service %s after uninstall (-want +got):\n%s", name, diff)
		}
	}
	// Step 3 returned, so the cleanup DaemonSet ran on every node.
	cleanupDS, err := client.AppsV1().DaemonSets(ns).Get(ctx, "un-npl-agent-cleanup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := cleanupDS.Status.NumberReady; int(n) != len(c.Nodes()) {
		t.Errorf("cleanup DaemonSet ready on %d nodes; want all %d", n, len(c.Nodes()))
	}
}
