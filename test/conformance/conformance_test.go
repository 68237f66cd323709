package conformance

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
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
	"github.com/nodeportlocal/npl/internal/gatewaycrds"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

func TestMain(m *testing.M) { cluster.RunMain(m) }

// reportPath, when set, is `make conformance`: the official report is
// written there (docs/conformance/), not to a temporary file.
var reportPath = flag.String("npl.report", "", "write the official conformance report to this file (make conformance)")

// coreFlag narrows the run to the core tests of TestedProfiles, a quicker
// run for debugging, whose report is not compared with the committed one.
var coreFlag = flag.Bool("npl.core", false, "run only the core tests of TestedProfiles (KnownFailures skipped), without comparing with the committed report")

// logsFlag, when set, keeps the logs of the cluster's components, of
// npl-lbsync and of the suite's backends in that directory.
var logsFlag = flag.String("npl.logs", "", "keep the logs of the control plane, npl-agent, npl-lbsync and the Pods' processes in this directory")

// profilesFlag, when set, narrows the run to some profiles, for debugging.
var profilesFlag = flag.String("npl.profiles", "", "run only these profiles (comma-separated, e.g. GATEWAY-TCP,GATEWAY-UDP) instead of Profiles (or TestedProfiles with -npl.core), without comparing with the committed report")

const (
	// GatewayClassName is the GatewayClass the suite's Gateways use.
	gatewayClassName = "npl"
	// controllerName is npl-lbsync's GatewayClass controller.
	controllerName = "npl.io/gateway-controller"
	// lbsyncCluster is npl-lbsync's clusterName: it prefixes the LB objects.
	lbsyncCluster = "conformance"
)

// TestGatewayAPIConformance runs the suite, in `make test` and in `make
// conformance` alike: every profile of Profiles whole (its core, and the
// extended features the GatewayClass announces), nothing skipped. It
// requires every core test to have run and each that failed to be among
// KnownFailures, and the results (per profile and level: the tests passed,
// failed and skipped, and the features claimed) to be those of the
// committed report, so that a change that breaks a feature, or adds one,
// brings the report along. `make conformance` writes the report to
// docs/conformance/ (-npl.report), to be committed; `make test` to a
// temporary file. -npl.core runs the core tests of TestedProfiles only
// (KnownFailures skipped), a quicker run for debugging.
func TestGatewayAPIConformance(t *testing.T) {
	began := time.Now()
	committedPath, err := committedReportPath()
	if err != nil {
		t.Fatal(err)
	}
	// Read first: make conformance writes the new report over it.
	committed, committedErr := readReport(committedPath)
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
	if err := installExperimentalChannel(ctx, c); err != nil {
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
	if *coreFlag {
		checkCoreRun(t, report, opts.ConformanceProfiles)
	} else {
		checkFullRun(t, report, opts.ConformanceProfiles)
	}
	if err := annotateReport(out, report); err != nil {
		t.Error(err)
	}
	switch partial := *coreFlag || *profilesFlag != "" || opts.RunTest != "" || (!*coreFlag && len(opts.SkipTests) > 0); {
	case partial:
		t.Logf("a partial run (-npl.core, -npl.profiles, -run-test or -skip-tests): not compared with the committed report %s", committedPath)
	case committedErr != nil && out == committedPath && errors.Is(committedErr, fs.ErrNotExist):
		t.Logf("no committed report for this suite version yet: %s is the first, to commit", committedPath)
	case committedErr != nil:
		t.Errorf("the committed report, which the results must equal: %v (make conformance writes it)", committedErr)
	default:
		if diff := resultChanges(committed, report); diff != "" {
			t.Errorf("the results differ from the committed report %s (-committed +this run):\n%s\n"+
				"A change that breaks a feature, or adds one, brings the report along: run make conformance and commit %s (this run's report: %s).",
				committedPath, diff, committedPath, out)
		}
	}
}

// committedReportPath is the report the repository holds for the suite
// version go.mod pins, docs/conformance/gateway-api-<version>-report.yaml:
// where `make conformance` writes it (the Makefile reads go.mod the same
// way).
func committedReportPath() (string, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "sigs.k8s.io/gateway-api/conformance" {
			return filepath.Join(root, "docs", "conformance", "gateway-api-"+f[1]+"-report.yaml"), nil
		}
	}
	return "", errors.New("go.mod requires no sigs.k8s.io/gateway-api/conformance")
}

// profileResults are what a report says npl does in one profile: the
// statistics of each level, the tests that failed and were skipped (of
// either level), and the extended features it claimed. They are what the
// committed report must agree with; the date and the version it was made
// with are not.
type profileResults struct {
	Core, Extended    confv1.Statistics
	Failed, Skipped   []string
	SupportedFeatures []string
}

// resultsOf are the results of a report, by profile.
func resultsOf(r *confv1.ConformanceReport) map[string]profileResults {
	out := map[string]profileResults{}
	for _, pr := range r.ProfileReports {
		res := profileResults{Core: pr.Core.Statistics,
			Failed: sorted(pr.Core.FailedTests), Skipped: sorted(pr.Core.SkippedTests), SupportedFeatures: []string{}}
		if ext := pr.Extended; ext != nil {
			res.Extended = ext.Statistics
			res.Failed = sorted(append(res.Failed, ext.FailedTests...))
			res.Skipped = sorted(append(res.Skipped, ext.SkippedTests...))
			res.SupportedFeatures = sorted(ext.SupportedFeatures)
		}
		out[pr.Name] = res
	}
	return out
}

// resultChanges is how the results of report differ from those of
// committed (cmp.Diff, -committed +report); empty when they agree.
func resultChanges(committed, report *confv1.ConformanceReport) string {
	return cmp.Diff(resultsOf(committed), resultsOf(report))
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

// options are the suite's options: every profile of Profiles with what the
// GatewayClass claims (at least the core), nothing skipped; with -npl.core
// the core features of TestedProfiles only, KnownFailures skipped.
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
			// GatewayStaticAddresses: an address of the bed's VIP range
			// that no other Gateway takes (vipPool hands out the lowest
			// free one), and one beyond it, which npl-lbsync refuses
			// (VIPNotAllowed: not in vipPool).
			UsableNetworkAddresses:   []gatewayv1.GatewaySpecAddress{ipAddress(lastOf(edgebed.VIPRange).Prev())},
			UnusableNetworkAddresses: []gatewayv1.GatewaySpecAddress{ipAddress(lastOf(edgebed.VIPRange).Next())},
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
	if !*coreFlag {
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
	if *coreFlag {
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

// lastOf is the last address of p (IPv4: its broadcast address).
func lastOf(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As16()
	host := a[:]
	if p.Addr().Is4() {
		host = a[12:]
	}
	bits := p.Bits()
	for i := range host {
		for b := range 8 {
			if i*8+b >= bits {
				host[i] |= 0x80 >> b
			}
		}
	}
	if p.Addr().Is4() {
		return netip.AddrFrom4([4]byte(host))
	}
	return netip.AddrFrom16(a)
}

func ipAddress(a netip.Addr) gatewayv1.GatewaySpecAddress {
	return gatewayv1.GatewaySpecAddress{Type: ptrTo(gatewayv1.IPAddressType), Value: a.String()}
}

func ptrTo[T any](v T) *T { return &v }

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

// installExperimentalChannel installs the experimental channel's CRD of
// each kind of the standard channel: the suite runs the tests of the
// experimental features npl announces (HTTPRoute's retry, which the
// standard CRD drops) only with their fields, and refuses to run on CRDs
// of two channels, so every kind is the experimental one's (the report's
// gatewayAPIChannel).
func installExperimentalChannel(ctx context.Context, c *cluster.Cluster) error {
	standard, err := gatewaycrds.Standard(ctx)
	if err != nil {
		return err
	}
	names := make([]string, len(standard))
	for i, f := range standard {
		names[i] = f.Name
	}
	return c.InstallExperimentalGatewayCRDs(ctx, names...)
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

// checkFullRun compares a run of whole profiles with KnownFailures, profile
// by profile: a core failure not listed is an error, and so is a core test
// that did not run (the suite's core tests of the profile, coreTestsOf, are
// each passed or failed); a listed test that passed may leave the list.
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
		if ran, want := int(core.Passed)+len(core.FailedTests), len(coreTestsOf(p)); ran != want || core.Skipped > 0 {
			t.Errorf("%s: %d core tests passed or failed and %d skipped, of the suite's %d: some did not run", p, ran, core.Skipped, want)
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

// TestResultChanges_seeWhatNplDoesNotWhenOrWhichBuildRan: the committed
// report (the one for the suite version go.mod pins) is there and reads;
// the same results on another date from another build are no change, an
// extended feature dropped or a test failed is one, named in the diff.
func TestResultChanges_seeWhatNplDoesNotWhenOrWhichBuildRan(t *testing.T) {
	path, err := committedReportPath()
	if err != nil {
		t.Fatal(err)
	}
	committed, err := readReport(path)
	if err != nil {
		t.Fatalf("the committed report: %v (make conformance writes it)", err)
	}
	if len(committed.ProfileReports) != len(Profiles) {
		t.Errorf("the committed report has %d profiles; want one for each of %v", len(committed.ProfileReports), Profiles)
	}
	variant := func(change func(r *confv1.ConformanceReport)) *confv1.ConformanceReport {
		b, err := yaml.Marshal(committed)
		if err != nil {
			t.Fatal(err)
		}
		var r confv1.ConformanceReport
		if err := yaml.UnmarshalStrict(b, &r); err != nil {
			t.Fatal(err)
		}
		change(&r)
		return &r
	}
	later := variant(func(r *confv1.ConformanceReport) {
		r.Date, r.Version = "2030-01-01T00:00:00Z", "v9.9.9-1-gabcdef0"
	})
	if diff := resultChanges(committed, later); diff != "" {
		t.Errorf("another date and build changed the results:\n%s", diff)
	}
	var dropped string
	lost := variant(func(r *confv1.ConformanceReport) {
		ext := r.ProfileReports[0].Extended
		if ext == nil || len(ext.SupportedFeatures) == 0 {
			t.Fatalf("the committed report's %s claims no extended feature", r.ProfileReports[0].Name)
		}
		dropped = ext.SupportedFeatures[0]
		ext.SupportedFeatures, ext.UnsupportedFeatures = ext.SupportedFeatures[1:], append(ext.UnsupportedFeatures, dropped)
		ext.Passed--
	})
	if diff := resultChanges(committed, lost); !strings.Contains(diff, dropped) {
		t.Errorf("an extended feature (%s) dropped: diff %q; want it named", dropped, diff)
	}
	failed := variant(func(r *confv1.ConformanceReport) {
		r.ProfileReports[0].Core.Passed--
		r.ProfileReports[0].Core.Failed++
		r.ProfileReports[0].Core.FailedTests = []string{"HTTPRouteSimpleSameNamespace"}
	})
	if diff := resultChanges(committed, failed); !strings.Contains(diff, "HTTPRouteSimpleSameNamespace") {
		t.Errorf("a core test failed: diff %q; want it named", diff)
	}
}

// TestLastOf_isThePrefixsLastAddress: the static addresses of the run
// come from the bed's VIP range, the usable one just below its last
// address, the unusable one just beyond.
func TestLastOf_isThePrefixsLastAddress(t *testing.T) {
	for in, want := range map[string]string{
		"198.18.200.0/24": "198.18.200.255", "198.18.200.7/30": "198.18.200.7", "10.0.0.0/8": "10.255.255.255",
		"fd00:198:200::/120": "fd00:198:200::ff", "fd00::1/128": "fd00::1",
	} {
		if got := lastOf(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("lastOf(%s) = %s, want %s", in, got, want)
		}
	}
}
