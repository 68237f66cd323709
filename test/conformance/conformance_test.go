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
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

// reportPath, when set, is `make conformance`: every profile of Profiles
// whole (the extended features the GatewayClass claims), nothing skipped,
// the official report written there.
var reportPath = flag.String("npl.report", "", "run every profile (GATEWAY-HTTP, -TCP, -UDP, -TLS, -GRPC) whole and write the official conformance report to this file")

// logsFlag, when set, keeps the logs of the cluster's components, of
// npl-lbsync and of the suite's backends in that directory.
var logsFlag = flag.String("npl.logs", "", "keep the logs of the control plane, npl-agent, npl-lbsync and the Pods' processes in this directory")

// profilesFlag, when set, narrows the run to some profiles, for debugging.
var profilesFlag = flag.String("npl.profiles", "", "run only these profiles (comma-separated, e.g. GATEWAY-TCP,GATEWAY-UDP) instead of TestedProfiles (or Profiles with -npl.report)")

const (
	// GatewayClassName is the GatewayClass the suite's Gateways use.
	gatewayClassName = "npl"
	// controllerName is npl-lbsync's GatewayClass controller.
	controllerName = "npl.io/gateway-controller"
	// lbsyncCluster is npl-lbsync's clusterName: it prefixes the LB objects.
	lbsyncCluster = "conformance"
)

// TestGatewayAPIConformance runs the suite. In `make test` it runs the core
// tests of TestedProfiles, skips KnownFailures, and requires the report to
// show, for each of these profiles, every other core test passed and
// exactly its KnownFailures skipped. In `make conformance` it runs every
// profile of Profiles whole and writes the official report.
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

	c, err := cluster.Start(ctx, cluster.Options{Nodes: 2, LogDir: *logsFlag})
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
	bed, err := edgebed.Start(ctx, t.TempDir(), edgebed.ClusterOptions(nplBin, "conf"))
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
	cfg := fmt.Sprintf("clusterName: %s\ndrainSeconds: 5\n", lbsyncCluster) + bed.LBSyncConfig(lbsyncCluster) + "gatewayAPI: {enabled: true}\n"
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
	t.Run(profilesName(opts.ConformanceProfiles), func(t *testing.T) { gwconformance.RunConformanceWithOptions(t, opts) })
	t.Logf("the suite ran in %v (all in all %v)", time.Since(suiteStart).Round(time.Second), time.Since(began).Round(time.Second))

	report, err := readReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if *reportPath != "" {
		checkFullRun(t, report, opts.ConformanceProfiles)
	} else {
		checkCoreRun(t, report, opts.ConformanceProfiles)
	}
	if err := annotateReport(out, report); err != nil {
		t.Error(err)
	}
}

// checkCoreRun checks the report of a `make test` run (coreRunProblems)
// and logs each profile's core result.
func checkCoreRun(t *testing.T, report *confv1.ConformanceReport, profiles []suite.ConformanceProfileName) {
	t.Helper()
	for _, problem := range coreRunProblems(report, profiles) {
		t.Error(problem)
	}
	for _, p := range profiles {
		if core, err := coreStatus(report, p); err == nil {
			t.Logf("%s core: %d passed of the suite's %d, %d skipped (KnownFailures), %d failed", p, core.Passed,
				len(coreTestsOf(p)), core.Skipped, core.Failed)
		}
	}
}

// coreRunProblems are what is wrong in the report of a `make test` run:
// for each profile run (TestedProfiles), every core test the suite defines
// for it (coreTestsOf: tests.ConformanceTests whose features are all core
// features of the profile) must have passed but for its KnownFailures,
// which alone are skipped; none failed. A core test that did not run
// (skipped, or missing from the report) is a problem.
func coreRunProblems(report *confv1.ConformanceReport, profiles []suite.ConformanceProfileName) []string {
	var out []string
	for _, p := range profiles {
		core, err := coreStatus(report, p)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if len(core.FailedTests) > 0 || core.Failed > 0 {
			out = append(out, fmt.Sprintf("%s: core tests failed: %v (a regression, or a test to add to KnownFailures with its reason)", p, core.FailedTests))
		}
		known := knownFailuresOf(p)
		if diff := cmp.Diff(known, sorted(core.SkippedTests)); diff != "" || int(core.Skipped) != len(known) {
			out = append(out, fmt.Sprintf("%s: %d core tests skipped (-KnownFailures +report):\n%s", p, core.Skipped, diff))
		}
		if want := len(coreTestsOf(p)) - len(known); int(core.Passed) != want {
			out = append(out, fmt.Sprintf("%s: %d core tests passed, want %d (the suite's %d core tests of the profile but its %d KnownFailures): some did not run",
				p, core.Passed, want, len(coreTestsOf(p)), len(known)))
		}
	}
	return out
}

// options are the suite's options: the core features only in `make test`,
// what the GatewayClass claims (at least the core) in `make conformance`.
func options(t *testing.T, c *cluster.Cluster, kube client.Client, bed *edgebed.Bed, report string) suite.ConformanceOptions {
	t.Helper()
	clientset := c.Client()
	opts := suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName:     gatewayClassName,
			CleanupBaseResources: true,
			CleanupTestResources: true,
			Mode:                 flags.DefaultMode,
			TimeoutConfig:        config.DefaultTimeoutConfig(),
			ConformanceProfiles:  TestedProfiles,
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
		opts.ConformanceProfiles = Profiles
		opts.SkipTests = nil
		opts.SupportedFeatures = claimedFeatures(t, kube)
	}
	if *profilesFlag != "" {
		opts.ConformanceProfiles = suite.ParseConformanceProfilesSlice(*profilesFlag)
		for _, p := range opts.ConformanceProfiles {
			if !slices.Contains(Profiles, p) {
				t.Fatalf("-npl.profiles: %s is none of %v", p, Profiles)
			}
		}
	}
	if *reportPath == "" {
		opts.SupportedFeatures = testFeatures(coreFeatures(opts.ConformanceProfiles...), claimedFeatures(t, kube))
		opts.SkipTests = append(opts.SkipTests, extendedTests(opts.SupportedFeatures, opts.ConformanceProfiles)...)
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

// profileOf is the suite's definition of a profile of Profiles.
func profileOf(name suite.ConformanceProfileName) suite.ConformanceProfile {
	for _, p := range []suite.ConformanceProfile{
		suite.GatewayHTTPConformanceProfile, suite.GatewayTCPConformanceProfile, suite.GatewayUDPConformanceProfile,
		suite.GatewayTLSConformanceProfile, suite.GatewayGRPCConformanceProfile,
	} {
		if p.Name == name {
			return p
		}
	}
	panic(fmt.Sprintf("no conformance profile %s", name))
}

// coreFeatures are the core features of the profiles, together.
func coreFeatures(profiles ...suite.ConformanceProfileName) []features.FeatureName {
	var out []features.FeatureName
	for _, p := range profiles {
		for _, f := range profileOf(p).CoreFeatures.UnsortedList() {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return sorted(out)
}

// coreTestOf reports whether the suite counts the test named name as a
// core test of profile p: every feature it needs is a core feature of p.
func coreTestOf(p suite.ConformanceProfileName, name string) bool {
	i := slices.IndexFunc(tests.ConformanceTests, func(ct suite.ConformanceTest) bool { return ct.ShortName == name })
	if i < 0 {
		return false
	}
	core := profileOf(p).CoreFeatures
	for _, f := range tests.ConformanceTests[i].Features {
		if !core.Has(f) {
			return false
		}
	}
	return true
}

// coreTestsOf are the names of the suite's tests that are core tests of p
// (coreTestOf), sorted: those a run of p's core features runs and its
// report counts as core.
func coreTestsOf(p suite.ConformanceProfileName) []string {
	out := []string{}
	for _, ct := range tests.ConformanceTests {
		if coreTestOf(p, ct.ShortName) {
			out = append(out, ct.ShortName)
		}
	}
	return sorted(out)
}

// knownFailuresOf are the names of KnownFailures that are core tests of p,
// sorted: what a `make test` report lists as p's skipped core tests.
func knownFailuresOf(p suite.ConformanceProfileName) []string {
	out := []string{}
	for _, name := range knownFailureNames() {
		if coreTestOf(p, name) {
			out = append(out, name)
		}
	}
	return out
}

// profilesName names a run of the profiles: GATEWAY-HTTP,GATEWAY-TCP,...
func profilesName(profiles []suite.ConformanceProfileName) string {
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = string(p)
	}
	return strings.Join(names, ",")
}

// coreSwitches are the features the GatewayClass may announce that change
// what core tests expect: TLSRouteListenerTerminateNotSupported wants a
// terminating TLS listener refused unless TLSRouteModeTerminate is
// supported, TLSRouteListenerMixedTerminationNotSupported likewise with
// TLSRouteModeMixed.
var coreSwitches = []features.FeatureName{features.SupportTLSRouteModeTerminate, features.SupportTLSRouteModeMixed}

// testFeatures are the features of a `make test` run: the core ones, and
// of coreSwitches those the GatewayClass claims, when a core feature of the
// run needs them (TLSRoute). The extended tests they would run are skipped
// (extendedTests).
func testFeatures(core, claimed []features.FeatureName) []features.FeatureName {
	out := slices.Clone(core)
	if !slices.Contains(core, features.SupportTLSRoute) {
		return sorted(out)
	}
	for _, f := range coreSwitches {
		if slices.Contains(claimed, f) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return sorted(out)
}

// extendedTests are the tests that the features supported run and that are
// core tests of none of the profiles: the extended tests a `make test` run
// skips, sorted.
func extendedTests(supported []features.FeatureName, profiles []suite.ConformanceProfileName) []string {
	var out []string
	for _, ct := range tests.ConformanceTests {
		runs := !slices.ContainsFunc(ct.Features, func(f features.FeatureName) bool { return !slices.Contains(supported, f) })
		if runs && !slices.ContainsFunc(profiles, func(p suite.ConformanceProfileName) bool { return coreTestOf(p, ct.ShortName) }) {
			out = append(out, ct.ShortName)
		}
	}
	return sorted(out)
}

// claimedFeatures are the core features of Profiles and those the
// GatewayClass announces in status.supportedFeatures.
func claimedFeatures(t *testing.T, kube client.Client) []features.FeatureName {
	t.Helper()
	var gc gatewayv1.GatewayClass
	if err := kube.Get(context.Background(), client.ObjectKey{Name: gatewayClassName}, &gc); err != nil {
		t.Fatal(err)
	}
	out := coreFeatures(Profiles...)
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

// coreStatus is the core result of profile p.
func coreStatus(r *confv1.ConformanceReport, p suite.ConformanceProfileName) (confv1.Status, error) {
	for _, pr := range r.ProfileReports {
		if pr.Name == string(p) {
			return pr.Core, nil
		}
	}
	return confv1.Status{}, fmt.Errorf("the report has no %s profile: none of its tests ran", p)
}

// checkFullRun compares a `make conformance` run with KnownFailures, profile
// by profile: a core failure not listed is an error; a listed test that
// passed may leave the list.
func checkFullRun(t *testing.T, report *confv1.ConformanceReport, profiles []suite.ConformanceProfileName) {
	t.Helper()
	failed := map[string]bool{}
	for _, p := range profiles {
		core, err := coreStatus(report, p)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, name := range core.FailedTests {
			failed[name] = true
			if _, ok := KnownFailures[name]; !ok {
				t.Errorf("%s: core test %s failed and is not in KnownFailures", p, name)
			}
		}
		t.Logf("%s core: %d passed, %d failed: %v", p, core.Passed, core.Failed, core.FailedTests)
	}
	for _, name := range knownFailureNames() {
		if !failed[name] && slices.ContainsFunc(profiles, func(p suite.ConformanceProfileName) bool { return coreTestOf(p, name) }) {
			t.Errorf("core test %s passed: remove it from KnownFailures", name)
		}
	}
}

// annotateReport writes, above the report as YAML comments, the reason of
// each core test it lists as skipped or failed that KnownFailures names,
// so that the report says why it is partial.
func annotateReport(path string, report *confv1.ConformanceReport) error {
	var names []string
	for _, pr := range report.ProfileReports {
		for _, n := range slices.Concat(pr.Core.SkippedTests, pr.Core.FailedTests) {
			if _, ok := KnownFailures[n]; ok && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var head bytes.Buffer
	head.WriteString("# Core tests skipped (make test) or failed (make conformance), and why (test/conformance KnownFailures):\n")
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

// TestKnownFailures_areCoreTestsOfAProfileWithAReason keeps the list
// honest without a cluster: every entry names a test of the suite that the
// core of a profile of Profiles runs, and says why it fails; the tested
// profiles are profiles of Profiles.
func TestKnownFailures_areCoreTestsOfAProfileWithAReason(t *testing.T) {
	for _, name := range knownFailureNames() {
		if strings.TrimSpace(KnownFailures[name]) == "" {
			t.Errorf("KnownFailures[%s] has no reason", name)
		}
		if !slices.ContainsFunc(tests.ConformanceTests, func(ct suite.ConformanceTest) bool { return ct.ShortName == name }) {
			t.Errorf("KnownFailures names %s, which is no test of the suite", name)
			continue
		}
		if !slices.ContainsFunc(Profiles, func(p suite.ConformanceProfileName) bool { return coreTestOf(p, name) }) {
			t.Errorf("KnownFailures names %s, which is a core test of none of %v", name, Profiles)
		}
	}
	for _, p := range TestedProfiles {
		if !slices.Contains(Profiles, p) {
			t.Errorf("TestedProfiles has %s, which is not in Profiles", p)
		}
	}
}

// TestCoreTestOf_followsTheSuitesProfiles: a test counts as a core test of
// a profile when all its features are core features of it, as the suite's
// report counts it.
func TestCoreTestOf_followsTheSuitesProfiles(t *testing.T) {
	for _, tc := range []struct {
		p    suite.ConformanceProfileName
		test string
		want bool
	}{
		{suite.GatewayHTTPConformanceProfileName, "HTTPRouteSimpleSameNamespace", true},
		{suite.GatewayTCPConformanceProfileName, "HTTPRouteSimpleSameNamespace", false},
		{suite.GatewayTCPConformanceProfileName, "GatewayInvalidRouteKind", true}, // Gateway only: every profile
		{suite.GatewayGRPCConformanceProfileName, "GatewayInvalidRouteKind", true},
		{suite.GatewayUDPConformanceProfileName, "UDPRoute", true},
		{suite.GatewayTLSConformanceProfileName, "UDPRoute", false},
		{suite.GatewayHTTPConformanceProfileName, "HTTPRouteQueryParamMatching", false}, // extended
		{suite.GatewayHTTPConformanceProfileName, "NoSuchTest", false},
	} {
		if got := coreTestOf(tc.p, tc.test); got != tc.want {
			t.Errorf("coreTestOf(%s, %s) = %t, want %t", tc.p, tc.test, got, tc.want)
		}
	}
}

// TestAnnotateReport_writesEachReasonAboveTheReport: the reasons of the
// skipped and failed tests KnownFailures names go above the official report
// as comments, which leave it the same report.
func TestAnnotateReport_writesEachReasonAboveTheReport(t *testing.T) {
	saved := KnownFailures
	t.Cleanup(func() { KnownFailures = saved })
	KnownFailures = map[string]string{"HTTPRouteWeight": "why\nnot", "UDPRoute": "because", "TLSRouteSimpleSameNamespace": "not run"}
	path := filepath.Join(t.TempDir(), "report.yaml")
	report := confv1.ConformanceReport{ProfileReports: []confv1.ProfileReport{
		{Name: string(suite.GatewayHTTPConformanceProfileName), Core: confv1.Status{SkippedTests: []string{"HTTPRouteWeight"}}},
		{Name: string(suite.GatewayUDPConformanceProfileName), Core: confv1.Status{FailedTests: []string{"UDPRoute", "UDPRouteWeightedRouting"}}},
	}}
	b, err := yaml.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := annotateReport(path, &report); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(got), "\n"+string(b[:1]))
	if want := "# Core tests skipped (make test) or failed (make conformance), and why (test/conformance KnownFailures):\n" +
		"#   HTTPRouteWeight: why not\n#   UDPRoute: because"; head != want {
		t.Errorf("report starts with\n%s\nwant\n%s", head, want)
	}
	back, err := readReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&report, back); diff != "" {
		t.Errorf("the annotated report reads back different (-want +got):\n%s", diff)
	}
}

// TestTestFeatures_addsClaimedCoreSwitchesOnlyWithTLSRoute: a `make test`
// run supports the core features, and TLSRouteModeTerminate or
// TLSRouteModeMixed only when the GatewayClass claims it and TLSRoute is
// run; no other claimed feature.
func TestTestFeatures_addsClaimedCoreSwitchesOnlyWithTLSRoute(t *testing.T) {
	claimed := []features.FeatureName{features.SupportHTTPRouteQueryParamMatching, features.SupportTLSRouteModeTerminate}
	tls := coreFeatures(suite.GatewayTLSConformanceProfileName)
	if diff := cmp.Diff(sorted(append(slices.Clone(tls), features.SupportTLSRouteModeTerminate)), testFeatures(tls, claimed)); diff != "" {
		t.Errorf("TLS core (-want +got):\n%s", diff)
	}
	http := coreFeatures(suite.GatewayHTTPConformanceProfileName)
	if diff := cmp.Diff(http, testFeatures(http, claimed)); diff != "" {
		t.Errorf("HTTP core (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tls, testFeatures(tls, nil)); diff != "" {
		t.Errorf("TLS core, nothing claimed (-want +got):\n%s", diff)
	}
}

// TestExtendedTests_areWhatTheFeaturesRunBeyondTheCore: with the TLS core
// and TLSRouteModeTerminate supported, the terminating TLSRoute tests run
// and are extended; no core test of the profile is among them.
func TestExtendedTests_areWhatTheFeaturesRunBeyondTheCore(t *testing.T) {
	tls := []suite.ConformanceProfileName{suite.GatewayTLSConformanceProfileName}
	got := extendedTests(append(coreFeatures(tls...), features.SupportTLSRouteModeTerminate), tls)
	for _, name := range []string{"TLSRouteTerminateSimpleSameNamespace", "TLSRouteListenerMixedTerminationNotSupported"} {
		if !slices.Contains(got, name) {
			t.Errorf("extendedTests = %v, want %s among them", got, name)
		}
	}
	for _, name := range got {
		if coreTestOf(suite.GatewayTLSConformanceProfileName, name) {
			t.Errorf("extendedTests has %s, a core test of GATEWAY-TLS", name)
		}
	}
	if got := extendedTests(coreFeatures(tls...), tls); len(got) != 0 {
		t.Errorf("extendedTests of the core alone = %v, want none", got)
	}
}

// TestCoreRunProblems_everyCoreTestOfTheSuiteMustPass: a `make test`
// report passes when every core test the suite defines for a profile
// passed but KnownFailures, which alone are skipped; one core test fewer
// (not run), an unlisted skip or a failure is a problem.
func TestCoreRunProblems_everyCoreTestOfTheSuiteMustPass(t *testing.T) {
	saved := KnownFailures
	t.Cleanup(func() { KnownFailures = saved })
	KnownFailures = map[string]string{"UDPRoute": "because"}
	udp, http := suite.GatewayUDPConformanceProfileName, suite.GatewayHTTPConformanceProfileName
	profiles := []suite.ConformanceProfileName{http, udp}
	nHTTP, nUDP := uint32(len(coreTestsOf(http))), uint32(len(coreTestsOf(udp)))
	if nHTTP < 10 || nUDP < 2 || !slices.Contains(coreTestsOf(udp), "UDPRoute") {
		t.Fatalf("core tests of the suite: %d of %s, %v of %s", nHTTP, http, coreTestsOf(udp), udp)
	}
	report := func(httpPassed, udpPassed uint32, udpSkipped []string, udpFailed []string) *confv1.ConformanceReport {
		return &confv1.ConformanceReport{ProfileReports: []confv1.ProfileReport{
			{Name: string(http), Core: confv1.Status{Statistics: confv1.Statistics{Passed: httpPassed}}},
			{Name: string(udp), Core: confv1.Status{Statistics: confv1.Statistics{Passed: udpPassed, Skipped: uint32(len(udpSkipped)),
				Failed: uint32(len(udpFailed))}, SkippedTests: udpSkipped, FailedTests: udpFailed}},
		}}
	}
	for _, tc := range []struct {
		name   string
		report *confv1.ConformanceReport
		want   int
	}{
		{"every core test but KnownFailures passed", report(nHTTP, nUDP-1, []string{"UDPRoute"}, nil), 0},
		{"an HTTP core test did not run", report(nHTTP-1, nUDP-1, []string{"UDPRoute"}, nil), 1},
		{"a UDP core test skipped beside KnownFailures", report(nHTTP, nUDP-2, []string{"UDPRoute", "UDPRouteWeightedRouting"}, nil), 2},
		{"a UDP core test failed", report(nHTTP, nUDP-2, []string{"UDPRoute"}, []string{"UDPRouteWeightedRouting"}), 2},
		{"KnownFailures passed instead of skipped", report(nHTTP, nUDP, nil, nil), 2},
		{"no UDP profile", &confv1.ConformanceReport{ProfileReports: report(nHTTP, 0, nil, nil).ProfileReports[:1]}, 1},
	} {
		if got := coreRunProblems(tc.report, profiles); len(got) != tc.want {
			t.Errorf("%s: problems %q, want %d", tc.name, got, tc.want)
		}
	}
}
