package chart

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeportlocal/npl/contract"
)

// TestChart_annotationPolicyLetsOnlyTheNodesAgentWriteIt creates the
// chart's agent ServiceAccount, its RBAC and its ValidatingAdmissionPolicy
// on the local API server and writes a Pod's nodeportlocal.antrea.io
// annotation as each party would: npl-agent with a token bound to a Pod on
// the Pod's node may (through pods/status, as it does), with one bound to
// another node's Pod or with an unbound token may not; a namespace user may
// neither patch it nor create a Pod that carries it, and may still change
// the rest of a Pod. The local cluster's stand-in kubelet does not run the
// agent, so its tokens are minted here with the TokenRequest API, bound to
// Pods on two Node objects made for the test, as a kubelet mints them; the
// chart installed on real nodes (test/realnodes) runs the agent under the
// policy with the tokens the real kubelet projects.
func TestChart_annotationPolicyLetsOnlyTheNodesAgentWriteIt(t *testing.T) {
	c := localCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := c.Client()
	const ns = "npl-policy"
	if _, err := c.CreateNamespace(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	r, err := renderRelease(t, readValues(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), nil), "npl", ns)
	if err != nil {
		t.Fatal(err)
	}
	cr := newCreator(t, c)
	var agentSA string
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, o := range r.find(kind) {
			if !strings.Contains(o.u.GetName(), "-agent") || strings.Contains(o.u.GetName(), "cleanup") {
				continue
			}
			if kind == "ServiceAccount" {
				agentSA = o.u.GetName()
			}
			if err := cr.create(ctx, o, false); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("create %s: %v", o, err)
			}
			t.Cleanup(func() {
				if ri, err := cr.resource(o); err == nil {
					_ = ri.Delete(context.Background(), o.u.GetName(), metav1.DeleteOptions{})
				}
			})
		}
	}
	if len(r.find("ValidatingAdmissionPolicy")) != 1 || len(r.find("ValidatingAdmissionPolicyBinding")) != 1 || agentSA == "" {
		t.Fatalf("the release renders no agent ServiceAccount, policy or binding: %v", r.objects)
	}

	// Two nodes, a Pod of the agent on the first and a workload Pod on each.
	for _, n := range []string{"npl-policy-a", "npl-policy-b"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	pod := func(name, node, sa string, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "c", Image: "npl.io/test-server"}}}}
	}
	agentPod, err := client.CoreV1().Pods(ns).Create(ctx, pod("agent-a", "npl-policy-a", agentSA, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{pod("web-a", "npl-policy-a", "", nil), pod("web-b", "npl-policy-b", "", nil)} {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	token := func(bound *corev1.Pod) (kubernetes.Interface, string) {
		t.Helper()
		req := &authenticationv1.TokenRequest{}
		if bound != nil {
			req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: bound.Name, UID: bound.UID}
		}
		tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, agentSA, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(c.RESTConfig())
		cfg.BearerToken = tr.Status.Token
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs, tr.Status.Token
	}
	onNodeA, boundToken := token(agentPod)
	unbound, _ := token(nil)
	if review, err := client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: boundToken}}, metav1.CreateOptions{}); err != nil ||
		!review.Status.Authenticated || len(review.Status.User.Extra["authentication.kubernetes.io/node-name"]) == 0 {
		t.Fatalf("the token bound to a Pod on npl-policy-a carries no node name (ServiceAccountTokenPodNodeInfo): %+v, %v", review.Status, err)
	}

	entry := func(port int) string {
		v, err := contract.Format([]contract.Entry{{PodPort: 8080, NodeIP: "198.18.0.11", NodePort: port, Protocol: contract.ProtocolTCP,
			IPFamily: contract.FamilyIPv4}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	annotate := func(cs kubernetes.Interface, name string, value any, subresource ...string) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{contract.PodKey: value}}})
		_, err := cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, subresource...)
		return err
	}
	// The policy takes effect once the API server has loaded it: until
	// then each write changes the annotation.
	port := 61000
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		port++
		return annotate(client, "web-a", entry(port)) != nil, nil
	}); err != nil {
		t.Fatal("the policy never refused the cluster admin's write of the annotation")
	}

	for _, c := range []struct {
		name    string
		do      func() error
		refused string // "" when allowed
	}{
		{"the agent of the Pod's node writes it", func() error { return annotate(onNodeA, "web-a", entry(61001), "status") }, ""},
		{"and removes it", func() error { return annotate(onNodeA, "web-a", nil, "status") }, ""},
		{"the agent of another node", func() error { return annotate(onNodeA, "web-b", entry(61002), "status") },
			"this Pod runs on npl-policy-b, the token of the request is bound to npl-policy-a"},
		{"the agent's ServiceAccount without a node", func() error { return annotate(unbound, "web-a", entry(61003), "status") },
			"the token of the request is bound to no node"},
		{"a user patches it", func() error { return annotate(client, "web-b", entry(61004)) }, "only npl-agent"},
		{"a user creates a Pod that carries it", func() error {
			_, err := client.CoreV1().Pods(ns).Create(ctx, pod("forged", "npl-policy-b", "", map[string]string{contract.PodKey: entry(22)}),
				metav1.CreateOptions{})
			return err
		}, "only npl-agent"},
		{"a user changes the rest of a Pod", func() error {
			_, err := client.CoreV1().Pods(ns).Patch(ctx, "web-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"},"annotations":{"other":"z"}}}`),
				metav1.PatchOptions{})
			return err
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.refused != "" && (err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("got %v; want a refusal saying %q", err, c.refused)
			}
		})
	}
}
