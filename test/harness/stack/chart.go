package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/test/harness/chartrender"
	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// The stack installs the chart's ServiceAccounts and RBAC as this release
// (rendered with charts/npl/ci/mock-values.yaml) and runs npl-agent and
// npl-lbsync with their tokens, so that a grant the binaries need and the
// chart lacks fails a test.
const (
	ChartRelease   = "npl"
	ChartNamespace = "npl-system"
)

// chartAccess is what the stack takes from the rendered chart.
type chartAccess struct {
	// agentKubeconfig and lbsyncKubeconfig authenticate as the
	// ServiceAccounts the chart's DaemonSet and Deployment run as.
	agentKubeconfig, lbsyncKubeconfig string
	// leaseName is the Lease the chart's Deployment elects its leader
	// with, in ChartNamespace.
	leaseName string
}

var chartAccesses struct {
	sync.Mutex
	of map[*cluster.Cluster]*chartAccess
}

// rbacResources are the kinds the stack applies, by kind.
var rbacResources = map[string]schema.GroupVersionResource{
	"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

// accessFor installs the chart's ServiceAccounts and RBAC on c, once per
// cluster, and returns the kubeconfigs of the ServiceAccounts.
func accessFor(ctx context.Context, c *cluster.Cluster) (*chartAccess, error) {
	chartAccesses.Lock()
	defer chartAccesses.Unlock()
	if a := chartAccesses.of[c]; a != nil {
		return a, nil
	}
	a, err := installChartAccess(ctx, c, nil)
	if err != nil {
		return nil, fmt.Errorf("install the chart's ServiceAccounts and RBAC: %w", err)
	}
	if chartAccesses.of == nil {
		chartAccesses.of = map[*cluster.Cluster]*chartAccess{}
	}
	chartAccesses.of[c] = a
	return a, nil
}

// GrantChartValues applies the chart's RBAC rendered with overrides (value
// paths such as "gatewayAPI.enabled") on top of mock-values.yaml, so that
// the binaries the stack starts on c get the grants those values give,
// exactly as the chart would. Call it before the first StartLBSync or
// StartAgents of c; the grants stay for the cluster's life.
func GrantChartValues(ctx context.Context, c *cluster.Cluster, overrides map[string]any) error {
	chartAccesses.Lock()
	defer chartAccesses.Unlock()
	a, err := installChartAccess(ctx, c, overrides)
	if err != nil {
		return fmt.Errorf("install the chart's ServiceAccounts and RBAC with %v: %w", overrides, err)
	}
	if chartAccesses.of == nil {
		chartAccesses.of = map[*cluster.Cluster]*chartAccess{}
	}
	chartAccesses.of[c] = a
	return nil
}

func installChartAccess(ctx context.Context, c *cluster.Cluster, overrides map[string]any) (*chartAccess, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "charts", "npl")
	ch, err := chartrender.Load(dir)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ReadValuesFile(filepath.Join(dir, "ci", "mock-values.yaml"))
	if err != nil {
		return nil, err
	}
	for path, v := range overrides {
		setValue(vals, path, v)
	}
	_, docs, err := chartrender.Render(engine.Engine{Strict: true}, ch, vals.AsMap(), ChartRelease, ChartNamespace)
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	if _, err := c.CreateNamespace(ctx, ChartNamespace); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	var agentSA, lbsyncSA string
	a := &chartAccess{}
	for _, d := range docs {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(d.YAML), &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Template, err)
		}
		if u.GetAnnotations()["helm.sh/hook"] != "" {
			continue // installed and run by Helm at uninstall only
		}
		switch u.GetKind() {
		case "DaemonSet", "Deployment":
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(d.YAML), nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Template, err)
			}
			switch w := obj.(type) {
			case *appsv1.DaemonSet:
				agentSA = w.Spec.Template.Spec.ServiceAccountName
			case *appsv1.Deployment:
				lbsyncSA = w.Spec.Template.Spec.ServiceAccountName
				a.leaseName = flagValue(w.Spec.Template.Spec.Containers, "--leader-elect-lease-name")
			}
			continue
		}
		gvr, ok := rbacResources[u.GetKind()]
		if !ok {
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := u.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		if _, err := ri.Apply(ctx, u.GetName(), &u, metav1.ApplyOptions{FieldManager: "npl-test-stack", Force: true}); err != nil {
			return nil, fmt.Errorf("apply %s %s (%s): %w", u.GetKind(), u.GetName(), d.Template, err)
		}
	}
	if agentSA == "" || lbsyncSA == "" || a.leaseName == "" {
		return nil, fmt.Errorf("the chart's DaemonSet and Deployment give ServiceAccounts %q and %q and Lease %q", agentSA, lbsyncSA, a.leaseName)
	}
	if a.agentKubeconfig, err = c.ServiceAccountKubeconfig(ctx, ChartNamespace, agentSA); err != nil {
		return nil, err
	}
	if a.lbsyncKubeconfig, err = c.ServiceAccountKubeconfig(ctx, ChartNamespace, lbsyncSA); err != nil {
		return nil, err
	}
	return a, nil
}

// flagValue returns the value of a --flag=value argument of the containers.
func flagValue(containers []corev1.Container, flag string) string {
	for _, c := range containers {
		for _, arg := range c.Args {
			if v, ok := strings.CutPrefix(arg, flag+"="); ok {
				return v
			}
		}
	}
	return ""
}

// setValue sets a dotted value path such as "gatewayAPI.enabled" in vals.
func setValue(vals chartutil.Values, path string, v any) {
	keys := strings.Split(path, ".")
	m := map[string]any(vals)
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}
