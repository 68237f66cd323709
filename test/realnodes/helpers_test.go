package realnodes

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/nodeportlocal/npl/test/harness/chartrender"
	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// startRealCluster starts a cluster of real nodes, closed when the test
// ends, within startTimeout after any other real-node cluster on the
// machine closed: the caller's own time starts when it returns.
func startRealCluster(tb testing.TB, opts cluster.Options) *cluster.Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	began := time.Now()
	opts.RealNodes = true
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%d real nodes Ready %s after the start (the wait for another real-node cluster included; logs: %s)",
		len(c.Nodes()), time.Since(began).Round(100*time.Millisecond), c.LogDir())
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("close the cluster: %v", err)
		}
	})
	return c
}

// startTimeout bounds a real-node cluster's start, once it may start.
const startTimeout = 5 * time.Minute

// helmInstall installs charts/npl as `helm install npl charts/npl -n
// npl-system --create-namespace` would, with vals.
func helmInstall(t testing.TB, ctx context.Context, c *cluster.Cluster, vals map[string]any) {
	t.Helper()
	install := action.NewInstall(helmConfig(t, c))
	install.ReleaseName, install.Namespace, install.CreateNamespace = releaseName, releaseNamespace, true
	install.Timeout = 2 * time.Minute
	rel, err := install.RunWithContext(ctx, loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install: release %s revision %d %s", rel.Name, rel.Version, rel.Info.Status)
}

// helmConfig is Helm's action configuration for the release's namespace.
func helmConfig(t testing.TB, c *cluster.Cluster) *action.Configuration {
	t.Helper()
	kubeconfig, ns := c.Kubeconfig(), releaseNamespace
	getter := &genericclioptions.ConfigFlags{KubeConfig: &kubeconfig, Namespace: &ns}
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// loadChart loads charts/npl.
func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := chartrender.Load(filepath.Join(root, "charts", "npl"))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// helmUpgrade upgrades the release to vals as `helm upgrade npl charts/npl
// -n npl-system` with those values would (without --wait).
func helmUpgrade(t testing.TB, ctx context.Context, c *cluster.Cluster, vals map[string]any) {
	t.Helper()
	upgrade := action.NewUpgrade(helmConfig(t, c))
	upgrade.Namespace, upgrade.Timeout = releaseNamespace, 2*time.Minute
	rel, err := upgrade.RunWithContext(ctx, releaseName, loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	t.Logf("helm upgrade: release %s revision %d %s", rel.Name, rel.Version, rel.Info.Status)
}

// helmUninstall uninstalls the release as `helm uninstall npl -n
// npl-system` would: Helm runs the pre-delete hooks and waits for their Jobs.
func helmUninstall(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	uninstall := action.NewUninstall(helmConfig(t, c))
	uninstall.Timeout = 4 * time.Minute
	resp, err := uninstall.Run(releaseName)
	if err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("helm uninstall: release %s %s", resp.Release.Name, resp.Release.Info.Status)
}

// eventually polls check until it passes, failing the test with the last
// error when ctx ends.
func eventually(t testing.TB, ctx context.Context, what string, check func(context.Context) error) {
	t.Helper()
	began := time.Now()
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 10*time.Second)
		last = check(attempt)
		cancel()
		if last == nil {
			t.Logf("%s after %s", what, time.Since(began).Round(100*time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not after %s: %v", what, time.Since(began).Round(time.Second), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// netipIn reports whether the address ip is in the prefix cidr.
func netipIn(ip, cidr string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && netip.MustParsePrefix(cidr).Contains(a)
}

// cutLast cuts s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
