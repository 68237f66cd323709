package realnodes

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// podClient acts with the ServiceAccount token mounted into the Pod.
func podClient(t *testing.T, ctx context.Context, c *cluster.Cluster, namespace, name string) kubernetes.Interface {
	t.Helper()
	token, err := c.PodToken(ctx, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(&rest.Config{
		Host: c.APIServerURL(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAPEM()},
	})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// checkLeastPrivilege checks, with the agent's and npl-lbsync's own tokens,
// that the agent can patch a Pod's status (where it writes the annotation)
// but not the Pod itself, and that neither lists Secrets (with
// ingressClass.readTLSSecrets npl-lbsync may get a TLS Secret an Ingress
// names, never list them).
func checkLeastPrivilege(t *testing.T, ctx context.Context, c *cluster.Cluster, agentPod, lbsyncPod, workloadNS, workloadPod string) {
	t.Helper()
	agent := podClient(t, ctx, c, releaseNamespace, agentPod)
	lbsync := podClient(t, ctx, c, releaseNamespace, lbsyncPod)
	patch := []byte(`{"metadata":{"annotations":{"test.npl.io/least-privilege":"probe"}}}`)

	pods := agent.CoreV1().Pods(workloadNS)
	if _, err := pods.Patch(ctx, workloadPod, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("the agent's token cannot patch pods/status: %v", err)
	}
	expectForbidden := func(who, what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s's token %s: %v; want Forbidden", who, what, err)
		}
	}
	_, err := pods.Patch(ctx, workloadPod, types.MergePatchType, patch, metav1.PatchOptions{})
	expectForbidden("the agent", "patching a Pod", err)
	for who, client := range map[string]kubernetes.Interface{"the agent": agent, "npl-lbsync": lbsync} {
		for _, ns := range []string{workloadNS, releaseNamespace} {
			_, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			expectForbidden(who, fmt.Sprintf("listing Secrets in %s", ns), err)
		}
	}
}
