package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// localCluster is the API server the tests create objects on. One node is
// enough: nothing is scheduled.
func localCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	return cluster.Shared(t, cluster.Options{Nodes: 1})
}

// creator creates rendered objects through the dynamic client.
type creator struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newCreator(t *testing.T, c *cluster.Cluster) *creator {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &creator{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client().Discovery()))}
}

// resource returns the client of an object's resource, or an error when the
// API server does not serve its kind.
func (c *creator) resource(o object) (dynamic.ResourceInterface, error) {
	gvk := o.u.GroupVersionKind()
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(mapping.Resource).Namespace(o.u.GetNamespace()), nil
	}
	return c.dyn.Resource(mapping.Resource), nil
}

func (c *creator) create(ctx context.Context, o object, dryRun bool) error {
	ri, err := c.resource(o)
	if err != nil {
		return err
	}
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Create(ctx, o.u, opts)
	return err
}

// TestChart_serverSideDryRunAcceptsEveryObject dry-runs every object of
// each CI value file, with the ServiceMonitors enabled, against the local
// API server, strictly: unknown fields are errors. The ServiceMonitor CRD
// (testdata/servicemonitor-crd.yaml) is installed first.
func TestChart_serverSideDryRunAcceptsEveryObject(t *testing.T) {
	c := localCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	installCRD(ctx, t, c, "testdata/servicemonitor-crd.yaml")
	cr := newCreator(t, c)
	for _, file := range ciValueFiles(t) {
		base := filepath.Base(file)
		t.Run(base, func(t *testing.T) {
			ns := "dry-" + strings.TrimSuffix(base, "-values.yaml")
			if _, err := c.CreateNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			r, err := renderRelease(t, readValues(t, file, map[string]any{"metrics.serviceMonitor.enabled": true}), "npl", ns)
			if err != nil {
				t.Fatal(err)
			}
			created := 0
			kinds := map[string]bool{}
			for _, o := range r.objects {
				if err := cr.create(ctx, o, true); err != nil {
					t.Errorf("%s: server-side dry-run: %v", o, err)
					continue
				}
				created++
				if !isHook(o) {
					kinds[o.u.GetKind()] = true
				}
			}
			if created < 10 {
				t.Errorf("only %d objects dry-run; the release has %d", created, len(r.objects))
			}
			// The API server validates the webhook's registration, and its
			// Secret as kubernetes.io/tls, beside the rest.
			if r.webhookEnabled() && !kinds["MutatingWebhookConfiguration"] {
				t.Errorf("the webhook is enabled, yet no MutatingWebhookConfiguration was dry-run")
			}
			if !kinds["ServiceMonitor"] {
				t.Errorf("metrics.serviceMonitor.enabled, yet no ServiceMonitor was dry-run")
			}
		})
	}
}

// installCRD creates the CustomResourceDefinition in file (or keeps the one
// an earlier test created) and waits until the API server serves its kind.
func installCRD(ctx context.Context, t *testing.T, c *cluster.Cluster, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD %s: %v", crd.GetName(), err)
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		// Discovery, which the RESTMapper reads, lags the condition.
		list, err := c.Client().Discovery().ServerResourcesForGroupVersion(group + "/v1")
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }), nil
	})
	if err != nil {
		t.Fatalf("CRD %s not served: %v", crd.GetName(), err)
	}
}

// access is one question to the authorizer.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.name != "" {
		s += " " + a.name
	}
	if a.namespace == "" {
		return s + " (cluster-wide)"
	}
	return s + " in " + a.namespace
}

func allowed(ctx context.Context, client kubernetes.Interface, namespace, sa string, a access) (bool, error) {
	sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   fmt.Sprintf("system:serviceaccount:%s:%s", namespace, sa),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

func TestChart_RBACGrantsEachServiceAccountWhatItNeedsAndNoSecret(t *testing.T) {
	c := localCluster(t)
	cr := newCreator(t, c)
	client := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns, other = "npl-rbac", "npl-rbac-other"
	for _, n := range []string{ns, other} {
		if _, err := c.CreateNamespace(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// Release "rbac": its objects are rbac-npl-*, apart from the dry-run
	// test's npl-*.
	r, err := renderRelease(t, readValues(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), nil), "rbac", ns)
	if err != nil {
		t.Fatal(err)
	}
	rbacKinds := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true}
	for _, o := range r.objects {
		if !rbacKinds[o.u.GetKind()] {
			continue
		}
		if err := cr.create(ctx, o, false); err != nil {
			t.Fatalf("%s: create: %v", o, err)
		}
		if o.u.GetNamespace() == "" {
			t.Cleanup(func() {
				ri, _ := cr.resource(o)
				_ = ri.Delete(context.Background(), o.u.GetName(), metav1.DeleteOptions{})
			})
		}
	}

	const (
		agent, lbsync, uninstall = "rbac-npl-agent", "rbac-npl-lbsync", "rbac-npl-uninstall"
		lease                    = "rbac-npl-lbsync"
	)
	for _, tc := range []struct {
		sa    string
		allow []access
		deny  []access
	}{
		{
			sa: agent,
			allow: []access{
				{verb: "patch", resource: "pods", subresource: "status", namespace: "default"},
				{verb: "list", resource: "pods"},
				{verb: "watch", resource: "pods"},
				{verb: "watch", resource: "services"},
				{verb: "get", resource: "nodes", name: "node-1"},
				{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices"},
				{verb: "create", resource: "events", namespace: "default"},
				{verb: "create", group: "events.k8s.io", resource: "events", namespace: "default"},
			},
			deny: []access{
				{verb: "patch", resource: "pods", namespace: "default"},
				{verb: "update", resource: "pods", namespace: "default"},
				{verb: "delete", resource: "pods", namespace: "default"},
				{verb: "get", resource: "secrets", namespace: ns},
				{verb: "get", resource: "secrets", namespace: "default"},
				{verb: "list", resource: "secrets"},
				{verb: "patch", resource: "services", namespace: "default"},
				// The agent reads no Namespace; only npl-lbsync's webhook does.
				{verb: "list", resource: "namespaces"},
				{verb: "watch", resource: "namespaces"},
				{verb: "get", resource: "namespaces", name: "default"},
			},
		},
		{
			sa: lbsync,
			allow: []access{
				{verb: "update", resource: "services", subresource: "status", namespace: "default"},
				{verb: "patch", resource: "services", subresource: "status", namespace: "default"},
				{verb: "patch", resource: "services", namespace: "default"},
				{verb: "patch", resource: "pods", subresource: "status", namespace: "default"},
				{verb: "watch", resource: "pods"},
				{verb: "list", resource: "nodes"},
				{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices"},
				{verb: "watch", group: "networking.k8s.io", resource: "ingresses"},
				{verb: "patch", group: "networking.k8s.io", resource: "ingresses", namespace: "default"},
				{verb: "patch", group: "networking.k8s.io", resource: "ingresses", subresource: "status", namespace: "default"},
				{verb: "create", resource: "events", namespace: "default"},
				{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: ns},
				{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: lease},
				// The webhook's Namespace cache.
				{verb: "list", resource: "namespaces"},
				{verb: "watch", resource: "namespaces"},
				{verb: "get", resource: "namespaces", name: "default"},
				// LoadBalancerPolicies, and the status of each.
				{verb: "watch", group: "npl.io", resource: "loadbalancerpolicies"},
				{verb: "update", group: "npl.io", resource: "loadbalancerpolicies", subresource: "status", namespace: "default"},
			},
			deny: []access{
				{verb: "get", resource: "secrets", namespace: ns},
				{verb: "get", resource: "secrets", namespace: "default"},
				{verb: "get", resource: "secrets", namespace: "kube-system"},
				{verb: "list", resource: "secrets"},
				{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: other},
				{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system"},
				{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: "kube-controller-manager"},
				{verb: "create", resource: "services", namespace: "default"},
				{verb: "delete", resource: "services", namespace: "default"},
				{verb: "patch", resource: "pods", namespace: "default"},
				{verb: "update", group: "networking.k8s.io", resource: "ingresses", namespace: "default"},
				// A policy is the user's: its spec is never written.
				{verb: "update", group: "npl.io", resource: "loadbalancerpolicies", namespace: "default"},
				{verb: "patch", group: "npl.io", resource: "loadbalancerpolicies", subresource: "status", namespace: "default"},
				{verb: "delete", group: "npl.io", resource: "loadbalancerpolicies", namespace: "default"},
				// Namespaces are read only, and the webhook's certificate is
				// a mounted file, not a Secret it reads.
				{verb: "patch", resource: "namespaces", name: "default"},
				{verb: "update", resource: "namespaces", name: "default"},
				{verb: "create", resource: "namespaces"},
				{verb: "delete", resource: "namespaces", name: "default"},
				{verb: "get", resource: "secrets", namespace: ns, name: "rbac-npl-lbsync-webhook-tls"},
				{verb: "create", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations"},
				{verb: "patch", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "rbac-npl-lbsync-webhook"},
			},
		},
		{
			sa: uninstall,
			allow: []access{
				{verb: "patch", group: "apps", resource: "deployments", namespace: ns, name: lbsync},
				{verb: "delete", group: "apps", resource: "daemonsets", namespace: ns, name: agent},
				{verb: "get", group: "apps", resource: "daemonsets", namespace: ns, name: "rbac-npl-agent-cleanup"},
				{verb: "list", resource: "pods", namespace: ns},
				{verb: "list", resource: "services"},
				{verb: "patch", resource: "services", subresource: "status", namespace: "default"},
			},
			deny: []access{
				{verb: "patch", group: "apps", resource: "deployments", namespace: ns, name: "someone-else"},
				{verb: "patch", group: "apps", resource: "deployments", namespace: other, name: lbsync},
				{verb: "delete", group: "apps", resource: "daemonsets", namespace: ns, name: "rbac-npl-agent-cleanup"},
				{verb: "patch", group: "apps", resource: "daemonsets", namespace: ns, name: agent},
				{verb: "delete", group: "apps", resource: "deployments", namespace: ns, name: lbsync},
				{verb: "get", resource: "secrets", namespace: ns},
				{verb: "list", resource: "secrets"},
				{verb: "delete", resource: "services", namespace: "default"},
			},
		},
	} {
		t.Run(tc.sa, func(t *testing.T) {
			// The authorizer learns new bindings from a watch: wait until
			// the grants show before asking for the denials.
			for _, a := range tc.allow {
				var last error
				err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
					ok, err := allowed(ctx, client, ns, tc.sa, a)
					last = err
					return ok, nil
				})
				if err != nil {
					t.Errorf("%s may not %s (last error %v); want allowed", tc.sa, a, last)
				}
			}
			for _, a := range tc.deny {
				ok, err := allowed(ctx, client, ns, tc.sa, a)
				if err != nil {
					t.Errorf("%s: %v", a, err)
				} else if ok {
					t.Errorf("%s may %s; want denied", tc.sa, a)
				}
			}
		})
	}
}
