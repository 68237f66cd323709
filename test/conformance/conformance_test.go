package conformance

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/apis/v1alpha2"
	"sigs.k8s.io/gateway-api/apis/v1alpha3"
	"sigs.k8s.io/gateway-api/apis/v1beta1"
	xv1alpha1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	gwconformance "sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/tests"
	"sigs.k8s.io/gateway-api/conformance/utils/config"
	"sigs.k8s.io/gateway-api/conformance/utils/flags"
	"sigs.k8s.io/gateway-api/conformance/utils/roundtripper"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/internal/buildinfo"
	"github.com/nodeportlocal/npl/test/cluster"
	"github.com/nodeportlocal/npl/test/edge"
	"github.com/nodeportlocal/npl/test/stack"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

// reportPath, when set, is `make conformance`: the whole GATEWAY-HTTP
// profile (the extended features the GatewayClass claims), nothing
// skipped, the official report written there.
var reportPath = flag.String("npl.report", "", "run the whole GATEWAY-HTTP profile and write the official conformance report to this file")

const (
	// GatewayClassName is the GatewayClass the suite's Gateways use.
	gatewayClassName = "npl"
	// controllerName is npl-lbsync's GatewayClass controller.
	controllerName = "npl.io/gateway-controller"
	// lbsyncCluster is npl-lbsync's clusterName: it prefixes the LB objects.
	lbsyncCluster = "conformance"
	profile       = suite.GatewayHTTPConformanceProfileName
)

// TestGatewayAPIConformance runs the suite. In `make test` it runs the core
// GATEWAY-HTTP tests, skips KnownFailures, and requires the report to show
// every other core test passed and exactly KnownFailures skipped.
func TestGatewayAPIConformance(t *testing.T) {
	began := time.Now()
	binDir, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CheckEchoBasic(binDir); err != nil {
		t.Fatal(err)
	}
	nplBin, err := stack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	c, err := cluster.Start(ctx, cluster.Options{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close the cluster: %v", err)
		}
	})
	// The chart's grants for the Gateway API, HTTPS listeners' Secrets too.
	if err := stack.GrantChartValues(ctx, c, map[string]any{"gatewayAPI.enabled": true, "gatewayAPI.readTLSSecrets": true}); err != nil {
		t.Fatal(err)
	}
	agents, err := stack.StartAgents(ctx, c, stack.AgentOptions{})
	if err != nil {
		t.Fatalf("start agents: %v", err)
	}
	t.Cleanup(func() { stack.StopAgents(agents) })
	if err := c.InstallGatewayAPI(ctx); err != nil {
		t.Fatal(err)
	}
	bed, err := edge.Start(ctx, t.TempDir(), edge.ClusterOptions(nplBin, "conf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("npl-edge log tail:\n%s", tail(bed.EdgeLog(), 40))
		}
		if err := bed.Close(); err != nil {
			t.Errorf("close the edge bed: %v", err)
		}
	})
	if err := bed.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("clusterName: %s\ndrainSeconds: 5\n", lbsyncCluster) + bed.LBSyncConfig() + "gatewayAPI: {enabled: true}\n"
	lbsync, err := stack.StartLBSync(ctx, c, stack.LBSyncOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("npl-lbsync log tail:\n%s", lbsync.Tail(60))
		}
		_ = lbsync.Stop()
	})

	kube, err := newClient(c)
	if err != nil {
		t.Fatal(err)
	}
	gc := &gatewayv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayClassName},
		Spec:       gatewayv1.GatewayClassSpec{ControllerName: controllerName},
	}
	if err := kube.Create(ctx, gc); err != nil {
		t.Fatalf("create GatewayClass %s: %v", gatewayClassName, err)
	}
	if err := waitAccepted(ctx, kube); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster, agents, edge and npl-lbsync ready in %v", time.Since(began).Round(time.Second))

	out := *reportPath
	if out == "" {
		out = filepath.Join(t.TempDir(), "report.yaml")
	} else if out, err = filepath.Abs(out); err != nil {
		t.Fatal(err)
	}
	opts := options(t, c, kube, bed, out)
	suiteStart := time.Now()
	t.Run(string(profile), func(t *testing.T) { gwconformance.RunConformanceWithOptions(t, opts) })
	t.Logf("the suite ran in %v (all in all %v)", time.Since(suiteStart).Round(time.Second), time.Since(began).Round(time.Second))

	report, err := readReport(out)
	if err != nil {
		t.Fatal(err)
	}
	core, err := coreStatus(report)
	if err != nil {
		t.Fatal(err)
	}
	if *reportPath != "" {
		checkFullRun(t, core)
		return
	}
	if len(core.FailedTests) > 0 || core.Failed > 0 {
		t.Errorf("core tests failed: %v (a regression, or a test to add to KnownFailures with its reason)", core.FailedTests)
	}
	if diff := cmp.Diff(sorted(knownFailureNames()), sorted(core.SkippedTests)); diff != "" {
		t.Errorf("core tests skipped (-KnownFailures +report):\n%s", diff)
	}
	if core.Passed == 0 {
		t.Errorf("no core test passed: %+v", core.Statistics)
	}
	if err := annotateReport(out); err != nil {
		t.Error(err)
	}
	t.Logf("core: %d passed, %d skipped (KnownFailures), %d failed", core.Passed, core.Skipped, core.Failed)
}

// options are the suite's options: the core features only in `make test`,
// what the GatewayClass claims (at least the core) in `make conformance`.
func options(t *testing.T, c *cluster.Cluster, kube client.Client, bed *edge.Bed, report string) suite.ConformanceOptions {
	t.Helper()
	clientset := c.Client()
	opts := suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName:     gatewayClassName,
			CleanupBaseResources: true,
			CleanupTestResources: true,
			Mode:                 flags.DefaultMode,
			TimeoutConfig:        config.DefaultTimeoutConfig(),
			ConformanceProfiles:  []suite.ConformanceProfileName{profile},
			SupportedFeatures:    coreFeatures(),
			SkipTests:            knownFailureNames(),
			ReportOutputPath:     report,
			Implementation: confv1.Implementation{
				Organization: "nodeportlocal",
				Project:      "npl",
				URL:          "https://github.com/nodeportlocal/npl",
				Version:      buildinfo.Version,
				Contact:      []string{"https://github.com/nodeportlocal/npl/issues"},
			},
		},
		Client:        kube,
		ClientOptions: client.Options{Scheme: kube.Scheme()},
		Clientset:     clientset,
		RestConfig:    c.RESTConfig(),
		ManifestFS:    []fs.FS{&gwconformance.Manifests},
	}
	if *reportPath != "" {
		opts.SkipTests = nil
		opts.SupportedFeatures = claimedFeatures(t, kube)
	}
	// Explicit suite flags (-run-test, -debug, ...) override, for debugging.
	flags.ApplyAll(&opts.ConfigurableOptions)
	opts.RoundTripper = &roundtripper.DefaultRoundTripper{
		Debug:         opts.Debug,
		TimeoutConfig: opts.TimeoutConfig,
		// The requests start in the bed's client namespace, outside the
		// cluster, from which the VIPs are routed to the edge.
		CustomDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return bed.ClientDial(ctx, network, addr, opts.TimeoutConfig.RequestTimeout)
		},
	}
	return opts
}

// newClient is a controller-runtime client of the cluster that knows the
// Gateway API types the suite reads and writes.
func newClient(c *cluster.Cluster) (client.Client, error) {
	ctrllog.SetLogger(klog.Background())
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		gatewayv1.Install, v1beta1.Install, v1alpha2.Install, v1alpha3.Install, xv1alpha1.Install,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return client.New(c.RESTConfig(), client.Options{Scheme: scheme})
}

// waitAccepted waits until npl-lbsync accepts the GatewayClass: the suite's
// features are read from its status.
func waitAccepted(ctx context.Context, kube client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var gc gatewayv1.GatewayClass
		err := kube.Get(ctx, client.ObjectKey{Name: gatewayClassName}, &gc)
		if err == nil && metaConditionTrue(gc.Status.Conditions, string(gatewayv1.GatewayClassConditionStatusAccepted)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("GatewayClass %s (controllerName %s) not Accepted within a minute: npl-lbsync does not serve the Gateway API (gatewayAPI.enabled)", gatewayClassName, controllerName)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func metaConditionTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// coreFeatures are the core features of the GATEWAY-HTTP profile.
func coreFeatures() []features.FeatureName {
	return sorted(suite.GatewayHTTPConformanceProfile.CoreFeatures.UnsortedList())
}

// claimedFeatures are the core features and those the GatewayClass
// announces in status.supportedFeatures.
func claimedFeatures(t *testing.T, kube client.Client) []features.FeatureName {
	t.Helper()
	var gc gatewayv1.GatewayClass
	if err := kube.Get(context.Background(), client.ObjectKey{Name: gatewayClassName}, &gc); err != nil {
		t.Fatal(err)
	}
	out := coreFeatures()
	for _, f := range gc.Status.SupportedFeatures {
		if name := features.FeatureName(f.Name); !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return sorted(out)
}

func sorted[T ~string](in []T) []T {
	out := slices.Clone(in)
	slices.Sort(out)
	if out == nil {
		out = []T{}
	}
	return out
}

func readReport(path string) (*confv1.ConformanceReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the conformance report: %w", err)
	}
	var r confv1.ConformanceReport
	if err := yaml.UnmarshalStrict(b, &r); err != nil {
		return nil, fmt.Errorf("parse the conformance report %s: %w", path, err)
	}
	return &r, nil
}

// coreStatus is the core result of the GATEWAY-HTTP profile.
func coreStatus(r *confv1.ConformanceReport) (confv1.Status, error) {
	for _, p := range r.ProfileReports {
		if p.Name == string(profile) {
			return p.Core, nil
		}
	}
	return confv1.Status{}, fmt.Errorf("the report has no %s profile", profile)
}

// checkFullRun compares a `make conformance` run with KnownFailures: a
// core failure not listed is an error; a listed test that passed may leave
// the list.
func checkFullRun(t *testing.T, core confv1.Status) {
	t.Helper()
	for _, name := range core.FailedTests {
		if _, ok := KnownFailures[name]; !ok {
			t.Errorf("core test %s failed and is not in KnownFailures", name)
		}
	}
	for _, name := range knownFailureNames() {
		if !slices.Contains(core.FailedTests, name) && !slices.Contains(core.SkippedTests, name) {
			t.Logf("core test %s passed: remove it from KnownFailures", name)
		}
	}
	t.Logf("core: %d passed, %d failed: %v", core.Passed, core.Failed, core.FailedTests)
}

// annotateReport writes the reason of each skipped test above the report,
// as YAML comments, so that the report says why it is partial.
func annotateReport(path string) error {
	names := knownFailureNames()
	if len(names) == 0 {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var head bytes.Buffer
	head.WriteString("# Core tests skipped, and why (test/conformance KnownFailures):\n")
	for _, n := range names {
		fmt.Fprintf(&head, "#   %s: %s\n", n, strings.ReplaceAll(KnownFailures[n], "\n", " "))
	}
	return os.WriteFile(path, append(head.Bytes(), b...), 0o644)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestKnownFailures_areCoreTestsOfTheProfileWithAReason keeps the list
// honest without a cluster: every entry names a test of the suite that the
// core profile runs, and says why it fails.
func TestKnownFailures_areCoreTestsOfTheProfileWithAReason(t *testing.T) {
	core := coreFeatures()
	for _, name := range knownFailureNames() {
		if strings.TrimSpace(KnownFailures[name]) == "" {
			t.Errorf("KnownFailures[%s] has no reason", name)
		}
		i := slices.IndexFunc(tests.ConformanceTests, func(ct suite.ConformanceTest) bool { return ct.ShortName == name })
		if i < 0 {
			t.Errorf("KnownFailures names %s, which is no test of the suite", name)
			continue
		}
		for _, f := range tests.ConformanceTests[i].Features {
			if !slices.Contains(core, f) {
				t.Errorf("KnownFailures names %s, which needs %s, not a core feature of %s", name, f, profile)
			}
		}
	}
}

// TestAnnotateReport_writesEachReasonAboveTheReport: the reasons of the
// skipped tests go above the official report as comments, which leave it
// the same report.
func TestAnnotateReport_writesEachReasonAboveTheReport(t *testing.T) {
	saved := KnownFailures
	t.Cleanup(func() { KnownFailures = saved })
	KnownFailures = map[string]string{"HTTPRouteWeight": "why\nnot"}
	path := filepath.Join(t.TempDir(), "report.yaml")
	report := confv1.ConformanceReport{ProfileReports: []confv1.ProfileReport{{Name: string(profile),
		Core: confv1.Status{SkippedTests: []string{"HTTPRouteWeight"}}}}}
	b, err := yaml.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := annotateReport(path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(got), "# Core tests skipped, and why (test/conformance KnownFailures):\n#   HTTPRouteWeight: why not\n") {
		t.Errorf("report starts with %q", strings.SplitN(string(got), "apiVersion", 2)[0])
	}
	back, err := readReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&report, back); diff != "" {
		t.Errorf("the annotated report reads back different (-want +got):\n%s", diff)
	}
}
