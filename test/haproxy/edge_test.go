package haproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

const testCluster = "c1"

var bridgeIP = netip.MustParseAddr("198.18.2.1")

// newBed starts a bed on a bridge of its own with npl-edge running, and
// backends in the test namespace.
func newBed(t testing.TB) (*edgebed.Bed, *edgebed.Backends) {
	t.Helper()
	return newBedWith(t, netip.Addr{})
}

// newBedWith is newBed with a second edge address for AddEdge.
func newBedWith(t testing.TB, secondEdge netip.Addr) (*edgebed.Bed, *edgebed.Backends) {
	t.Helper()
	return newBedOptions(t, edgebed.Options{SecondEdgeIP: secondEdge})
}

// newBedOptions is newBed with the second edge address, npl-edge's --udp
// and the attached HAProxy of o.
func newBedOptions(t testing.TB, o edgebed.Options) (*edgebed.Bed, *edgebed.Backends) {
	t.Helper()
	bin, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if d := os.Getenv("NPL_BIN_DIR"); d != "" {
		bin = d
	}
	ctx := context.Background()
	b, err := edgebed.Start(ctx, t.TempDir(), edgebed.Options{
		BridgeIP: bridgeIP, EdgeIP: netip.MustParseAddr("198.18.2.2"), ClientIP: netip.MustParseAddr("198.18.2.3"),
		SecondEdgeIP: o.SecondEdgeIP, BinDir: bin, Name: "t", UDP: o.UDP, Attach: o.Attach, HostNoChroot: o.HostNoChroot,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range b.Edges {
				t.Logf("npl-edge %s log:\n%s", e.URL, tail(e.EdgeLog(), 60))
			}
		}
		if err := b.Close(); err != nil {
			t.Errorf("close the bed: %v", err)
		}
	})
	if err := b.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	bs := &edgebed.Backends{IP: bridgeIP}
	t.Cleanup(bs.Close)
	return b, bs
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startBackends starts n backends named <prefix>-<i> and returns them as
// enabled members.
func startBackends(t *testing.T, bs *edgebed.Backends, prefix string, n int) []lbmodel.Member {
	t.Helper()
	var ms []lbmodel.Member
	for i := range n {
		port, err := bs.StartBackend(fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, lbmodel.Member{IP: bs.IP.String(), Port: port, Enabled: true})
	}
	return ms
}

// model is the load balancer of Service ns/svc with one TCP listener.
func model(svc string, port int32, members []lbmodel.Member) *lbmodel.LoadBalancer {
	name := lbmodel.LoadBalancerName(testCluster, "ns", svc)
	return &lbmodel.LoadBalancer{Name: name, Service: "ns/" + svc, Listeners: []lbmodel.Listener{{
		Port: port, Protocol: lbmodel.TCP,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, port), Members: slices.Clone(members)},
	}}}
}

func openProvider(t *testing.T, b *edgebed.Bed, section []byte) providers.Provider {
	t.Helper()
	p, err := b.OpenProvider(context.Background(), testCluster, section)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func status(t *testing.T, b *edgebed.Bed) api.Status {
	t.Helper()
	st, err := b.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// answers sends n requests to url from the client namespace, each counted:
// it fails the test on any failed request and returns who answered.
func answers(t *testing.T, b *edgebed.Bed, url string, n int) map[string]int {
	t.Helper()
	c := b.ClientHTTP(3 * time.Second)
	got := map[string]int{}
	for i := range n {
		name, err := edgebed.Get(context.Background(), c, url)
		if err != nil {
			t.Fatalf("request %d/%d to %s: %v", i+1, n, url, err)
		}
		got[name]++
	}
	return got
}

// stopStream stops s and fails the test when s had reached its bound
// before: its counts would cover less than the test claims. It logs the
// requests Stop cut short.
func stopStream(t testing.TB, s *edgebed.Stream) {
	t.Helper()
	err := s.Stop()
	t.Logf("request stream stopped: %d ok, %d failed, %d in flight at Stop (not counted)", s.OK, s.Failed, s.InFlight)
	if err != nil {
		t.Fatal(err)
	}
}

func names(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// waitAnswers waits until requests to url are answered by exactly the
// backends want (health checks take a moment to mark new members up).
func waitAnswers(t *testing.T, b *edgebed.Bed, url string, want []string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(10 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		got = names(answers(t, b, url, 3*len(want)))
		if slices.Equal(got, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("requests to %s answered by %v, want %v", url, got, want)
}

func listOne(t *testing.T, p providers.Provider, name string) lbmodel.LoadBalancer {
	t.Helper()
	lbs, err := p.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, lb := range lbs {
		if lb.Name == name {
			return lb
		}
	}
	t.Fatalf("List has no %s: %+v", name, lbs)
	return lbmodel.LoadBalancer{}
}

func TestProvider_roundTrip(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	members := startBackends(t, bs, "web", 3)

	lb := model("web", 80, members)
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if want := []string{"198.18.200.1"}; !slices.Equal(st.VIPs, want) || len(st.Warnings) != 0 {
		t.Fatalf("Ensure status = %+v, want VIPs %v and no warning", st, want)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	got := answers(t, b, url, 60)
	if want := []string{"web-0", "web-1", "web-2"}; !slices.Equal(names(got), want) {
		t.Fatalf("60 requests answered by %v, want every member %v", got, want)
	}
	t.Logf("60 requests through the VIP, 0 failed: %v", got)

	// List reads back exactly what was applied.
	want := *lb.Clone()
	want.VIPs = st.VIPs
	want.Listeners[0].Pool.Members = lbmodel.SortMembers(want.Listeners[0].Pool.Members)
	if diff := cmp.Diff(want, listOne(t, p, lb.Name)); diff != "" {
		t.Fatalf("List (-applied +listed):\n%s", diff)
	}

	// The same model again writes nothing.
	before := status(t, b)
	if _, err := p.Ensure(ctx, lb); err != nil {
		t.Fatal(err)
	}
	after := status(t, b)
	if after.Writes != before.Writes || after.Reloads != before.Reloads || after.RuntimeCommands != before.RuntimeCommands {
		t.Fatalf("an unchanged Ensure changed the edge: before %+v, after %+v", before, after)
	}

	// Members added, removed and drained: runtime API only, no reload.
	added := startBackends(t, bs, "new", 1)[0]
	changed := model("web", 80, []lbmodel.Member{
		{IP: members[1].IP, Port: members[1].Port, Enabled: false}, members[2], added,
	})
	if _, err := p.Ensure(ctx, changed); err != nil {
		t.Fatalf("Ensure with member changes: %v", err)
	}
	after = status(t, b)
	if after.Reloads != before.Reloads || after.WorkerPID != before.WorkerPID || after.MasterPID != before.MasterPID {
		t.Fatalf("member changes reloaded HAProxy: before %+v, after %+v", before, after)
	}
	if after.RuntimeCommands == before.RuntimeCommands {
		t.Fatal("member changes made no runtime command")
	}
	t.Logf("member add/drain/remove: %d runtime commands, 0 reloads, worker %d kept", after.RuntimeCommands-before.RuntimeCommands, after.WorkerPID)
	waitAnswers(t, b, url, []string{"web-2", "new-0"})
	wantChanged := *changed.Clone()
	wantChanged.VIPs = st.VIPs
	wantChanged.Listeners[0].Pool.Members = lbmodel.SortMembers(wantChanged.Listeners[0].Pool.Members)
	if diff := cmp.Diff(wantChanged, listOne(t, p, lb.Name)); diff != "" {
		t.Fatalf("List after member changes (-applied +listed):\n%s", diff)
	}

	// Delete removes it (a reload: the listener goes).
	if err := p.Delete(ctx, lb.Name, lbmodel.L4); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	lbs, err := p.List(ctx)
	if err != nil || len(lbs) != 0 {
		t.Fatalf("List after Delete = %v, %v; want nothing", lbs, err)
	}
	if _, err := edgebed.Get(ctx, b.ClientHTTP(time.Second), url); err == nil {
		t.Fatal("the deleted VIP still answers")
	}
}

func TestEdge_reloadUnderLoadFailsNoRequest(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	st, err := p.Ensure(ctx, model("web", 80, startBackends(t, bs, "web", 3)))
	if err != nil {
		t.Fatal(err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	waitAnswers(t, b, url, []string{"web-0", "web-1", "web-2"})
	before := status(t, b)

	const reloads = 8
	stream := edgebed.StartStream(ctx, b.ClientHTTP(3*time.Second), url, 4, 60*time.Second)
	other := startBackends(t, bs, "other", 1)
	if err := reloadByNewServices(ctx, p, reloads, other); err != nil {
		_ = stream.Stop()
		t.Fatal(err)
	}
	stopStream(t, stream)
	after := status(t, b)
	if got := after.Reloads - before.Reloads; got != reloads {
		t.Errorf("%d reloads, want %d", got, reloads)
	}
	if after.MasterPID != before.MasterPID {
		t.Errorf("HAProxy's master changed (%d -> %d): restarted rather than reloaded", before.MasterPID, after.MasterPID)
	}
	t.Logf("%d reloads under a stream of requests: %d ok, %d failed, answered by %v", reloads, stream.OK, stream.Failed, stream.Answered)
	if stream.Failed != 0 || stream.OK < 100 {
		t.Fatalf("%d requests failed (want 0) of %d; errors: %v", stream.Failed, stream.OK+stream.Failed, stream.Errors)
	}
}

func TestEdge_rejectedConfigurationKeepsTheOldOne(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	st, err := p.Ensure(ctx, model("web", 80, startBackends(t, bs, "web", 2)))
	if err != nil {
		t.Fatal(err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	waitAnswers(t, b, url, []string{"web-0", "web-1"})
	before := status(t, b)

	// HAProxy refuses a certificate whose key is another's; the model
	// cannot tell (a name HAProxy refuses, such as one with "{", the model
	// refuses itself).
	certPEM, _ := selfSigned(t)
	_, otherKey := selfSigned(t)
	badName := lbmodel.IngressLoadBalancerName(testCluster, "ns", "bad")
	badPool := lbmodel.IngressPoolName(badName, "ns", "bad", "80")
	bad := &lbmodel.LoadBalancer{Name: badName, Ingress: "ns/bad", Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 8443, Protocol: lbmodel.HTTPS}},
		Pools:     []lbmodel.Pool{{Name: badPool, Members: startBackends(t, bs, "bad", 1)}},
		HTTP: &lbmodel.HTTPRoutes{DefaultPool: badPool, TLS: []lbmodel.TLSCert{{Secret: "ns/bad", CertPEM: certPEM, KeyPEM: otherKey,
			Fingerprint: lbmodel.CertFingerprint(certPEM)}}}}
	_, err = p.Ensure(ctx, bad)
	if err == nil {
		t.Fatal("Ensure of a configuration HAProxy refuses succeeded")
	}
	proxy := lbmodel.ListenerName(badName, lbmodel.HTTPS, 8443)
	for _, want := range []string{"edge " + b.EdgeURL, "rejected by HAProxy", "load balancer " + badName + " (proxy " + proxy + ")"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Logf("refused: %v", err)
	after := status(t, b)
	if after.Reloads != before.Reloads || after.WorkerPID != before.WorkerPID {
		t.Errorf("a refused configuration reloaded HAProxy: before %+v, after %+v", before, after)
	}
	answers(t, b, url, 20)
	lbs, err := p.List(ctx)
	if err != nil || len(lbs) != 1 {
		t.Fatalf("List after the refusal = %v, %v; want the one good load balancer", lbs, err)
	}
}

func TestEdge_refusesClientsWithoutAValidCertificate(t *testing.T) {
	b, _ := newBed(t)
	ctx := context.Background()
	for _, c := range []struct{ name, cert, key, want string }{
		{"no client certificate", "", "", "certificate required"},
		{"a certificate of another CA", b.Certs.RogueClientCert, b.Certs.RogueKey, "unknown certificate authority"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hc, err := b.APIClient(c.cert, c.key)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.EdgeURL+api.LoadBalancersPath(testCluster), nil)
			resp, err := hc.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("the edge answered HTTP %d to a client with %s", resp.StatusCode, c.name)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	t.Run("an edge certificate the provider's CA does not sign", func(t *testing.T) {
		sec := strings.Replace(string(b.ProviderSection(testCluster)), b.Certs.CA, b.Certs.RogueCA, 1)
		p := openProvider(t, b, []byte(sec))
		_, err := p.Ensure(ctx, model("web", 80, nil))
		if err == nil || !strings.Contains(err.Error(), "edge "+b.EdgeURL) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Fatalf("Ensure against an edge that does not verify = %v; want an error naming the edge and the certificate", err)
		}
		t.Logf("refused: %v", err)
	})
}

// A client of the CA may change the clusters its certificate names only:
// any client could change any cluster's load balancers before
// (REFERENCE 17). The provider of cluster c2 with c1's certificate is
// answered 403 on every call, and c1's load balancer is untouched.
func TestEdge_anotherClustersCertificateIsForbidden(t *testing.T) {
	b, bs := newBed(t)
	ctx := context.Background()
	c1 := openProvider(t, b, b.ProviderSection(testCluster))
	st, err := c1.Ensure(ctx, model("web", 80, startBackends(t, bs, "web", 1)))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := b.OpenProvider(ctx, "c2", b.ProviderSection(testCluster))
	if err != nil {
		t.Fatal(err)
	}
	other := model("web", 80, nil)
	other.Name, other.Listeners[0].Pool.Name = "c2--ns_web", "c2--ns_web-TCP-80"
	other.RequestedVIP = st.VIPs[0]
	_, err = c2.Ensure(ctx, other)
	for _, want := range []string{"HTTP 403", "does not name cluster c2", "npl://cluster/c2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Ensure of cluster c2 with c1's certificate: %v, want it to say %q", err, want)
		}
	}
	if _, err := c2.List(ctx); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Errorf("List of cluster c2 with c1's certificate: %v, want 403", err)
	}
	if err := c2.Delete(ctx, "c2--ns_web", lbmodel.L4); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Errorf("Delete of cluster c2 with c1's certificate: %v, want 403", err)
	}
	// Reading the edge's status needs no cluster.
	if _, err := b.Status(ctx); err != nil {
		t.Errorf("status: %v", err)
	}
	if lbs, err := c1.List(ctx); err != nil || len(lbs) != 1 {
		t.Errorf("c1's load balancers after c2's attempts: %v, %v", lbs, err)
	}
	answers(t, b, edgebed.URL(st.VIPs[0], 80), 4)
}

// What a client sends the edge API is checked again there with the
// model's own rules, whatever the client: a Service string with a newline
// and directives (an external check run as root, REFERENCE 17), a name
// with one, a pool of another cluster's names are refused 400 and reach no
// configuration; a body over the limit is 413.
func TestEdge_refusesInjectedBytes(t *testing.T) {
	b, bs := newBed(t)
	ctx := context.Background()
	certFile, keyFile, err := b.Certs.ClientFor(testCluster)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := b.APIClient(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	members := startBackends(t, bs, "web", 1)
	put := func(lb *lbmodel.LoadBalancer, raw []byte) (int, string) {
		t.Helper()
		body := raw
		if lb != nil {
			req := api.LoadBalancerRequest{LoadBalancer: api.FromModel(lb)}
			req.VIPs = []string{"198.18.200.9"}
			body, _ = json.Marshal(req)
		}
		name := "c1--ns_web"
		if lb != nil {
			name = lb.Name
		}
		r, _ := http.NewRequestWithContext(ctx, http.MethodPut, b.EdgeURL+api.LoadBalancerPath(testCluster, name), bytes.NewReader(body))
		resp, err := hc.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	before := status(t, b)
	service := model("web", 80, members)
	service.Service = "ns/web\n    option external-check\n    external-check command /bin/touch"
	name := model("web", 80, members)
	name.Name = "c1--ns_web\nfrontend evil"
	pool := model("web", 80, members)
	pool.Listeners[0].Pool.Name = "c1--ns_web-TCP-80 if TRUE"
	foreign := model("web", 80, members)
	foreign.Listeners[0].Pool.Name = "c2--ns_web-TCP-80"
	for _, c := range []struct {
		what string
		lb   *lbmodel.LoadBalancer
		want string
	}{
		{"a Service with directives", service, "is not namespace/name of Kubernetes names"},
		{"a name with a new section", name, "holds a character other than"},
		{"a pool name with a condition", pool, "holds a character other than"},
		{"a pool of another cluster", foreign, "does not start with the cluster name"},
	} {
		if code, msg := put(c.lb, nil); code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("%s: HTTP %d %q, want 400 saying %q", c.what, code, msg, c.want)
		}
	}
	huge := append(append([]byte(`{"name":"`), bytes.Repeat([]byte("a"), 9<<20)...), `"}`...)
	if code, msg := put(nil, huge); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "limit of 8388608 bytes") {
		t.Errorf("a body of 9 MiB: HTTP %d %q, want 413 naming the limit", code, msg)
	}
	if after := status(t, b); after.Reloads != before.Reloads || after.Writes != before.Writes {
		t.Errorf("a refused request changed the edge: %+v -> %+v", before, after)
	}
	cfg, err := os.ReadFile(filepath.Join(b.Edges[0].Dir, "edge-state", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(cfg, []byte("external-check")) || bytes.Contains(cfg, []byte("evil")) {
		t.Errorf("the configuration holds what was refused:\n%s", cfg)
	}
}

func TestProvider_unreachableEdgeFailsAndDeletesNothing(t *testing.T) {
	b, bs := newBed(t)
	ctx := context.Background()
	good := openProvider(t, b, b.ProviderSection(testCluster))
	members := startBackends(t, bs, "web", 2)
	lb := model("web", 80, members)
	st, err := good.Ensure(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	waitAnswers(t, b, url, []string{"web-0", "web-1"})
	listed := listOne(t, good, lb.Name)

	const lost = "https://198.18.2.99:8443"
	both := openProvider(t, b, b.ProviderSection(testCluster, b.EdgeURL, lost))
	_, err = both.Ensure(ctx, lb)
	if err == nil || !strings.Contains(err.Error(), "edge "+lost) {
		t.Fatalf("Ensure with an unreachable edge = %v; want an error naming %s", err, lost)
	}
	if strings.Contains(err.Error(), "edge "+b.EdgeURL) {
		t.Errorf("the error blames the reachable edge too: %v", err)
	}
	t.Logf("Ensure: %v", err)
	if _, err := both.List(ctx); err == nil || !strings.Contains(err.Error(), lost) {
		t.Fatalf("List with an unreachable edge = %v; want an error naming it (so that nothing is collected on a partial view)", err)
	}
	// Nothing was removed from the edge that answers.
	if diff := cmp.Diff(listed, listOne(t, good, lb.Name)); diff != "" {
		t.Fatalf("after the failure (-before +after):\n%s", diff)
	}
	waitAnswers(t, b, url, []string{"web-0", "web-1"})
}

func TestEdge_killedHAProxyIsRestoredWithItsState(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	members := startBackends(t, bs, "web", 3)
	members[0].Enabled = false // draining: a runtime state the configuration cannot hold
	lb := model("web", 80, members)
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	waitAnswers(t, b, url, []string{"web-1", "web-2"})
	before := listOne(t, p, lb.Name)
	old := status(t, b)

	if err := syscall.Kill(old.MasterPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(old.WorkerPID, syscall.SIGKILL)
	killed := time.Now()
	c := b.ClientHTTP(time.Second)
	var restored time.Duration
	for time.Since(killed) < 20*time.Second {
		if _, err := edgebed.Get(ctx, c, url); err == nil {
			if st, err := b.Status(ctx); err == nil && st.MasterPID != old.MasterPID && st.MasterPID != 0 {
				restored = time.Since(killed)
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if restored == 0 {
		t.Fatal("service not restored 20s after HAProxy was killed")
	}
	t.Logf("HAProxy killed (SIGKILL): service restored by a new HAProxy in %v", restored.Round(time.Millisecond))
	waitAnswers(t, b, url, []string{"web-1", "web-2"})
	if diff := cmp.Diff(before, listOne(t, p, lb.Name)); diff != "" {
		t.Fatalf("state after the restart (-before +after):\n%s", diff)
	}
	if st := status(t, b); st.Starts != old.Starts+1 {
		t.Errorf("starts %d, want %d", st.Starts, old.Starts+1)
	}
	// Started disabled (maintenance), the member is drained again.
	if s, err := serverState(ctx, b.Edges[0], lb.Listeners[0].Pool.Name, haproxy.ServerName(members[0])); err != nil || !s.Draining() {
		t.Errorf("after the restart the draining member's server is %+v, %v; want it draining, not in maintenance", s, err)
	}
}

func TestEdge_restartedEdgeServesItsDesiredState(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	lb := model("web", 80, startBackends(t, bs, "web", 2))
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	before := listOne(t, p, lb.Name)
	b.StopEdge()
	if _, err := p.List(ctx); err == nil {
		t.Fatal("List succeeded with the edge stopped")
	} else if !strings.Contains(err.Error(), "edge "+b.EdgeURL) {
		t.Errorf("List error %q does not name the edge", err)
	}
	if err := b.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, listOne(t, p, lb.Name)); diff != "" {
		t.Fatalf("after the edge restarted (-before +after):\n%s", diff)
	}
	waitAnswers(t, b, edgebed.URL(st.VIPs[0], 80), []string{"web-0", "web-1"})
}

// TestProvider_twoEdges: the provider keeps two edges identical; with one
// stopped the other serves the VIPs (moved to it, as VRRP would), a change
// fails naming the stopped edge while the running one has it; back with
// its last state, the lagging edge shows in List (drift for nplctl pools),
// and the next Ensure brings it level (List their copy again).
func TestProvider_twoEdges(t *testing.T) {
	b, bs := newBedWith(t, netip.MustParseAddr("198.18.2.4"))
	ctx := context.Background()
	a := b.Edges[0]
	e2, err := b.AddEdge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	p := openProvider(t, b, b.ProviderSection(testCluster, a.URL, e2.URL))
	onA := openProvider(t, b, b.ProviderSection(testCluster, a.URL))
	onB := openProvider(t, b, b.ProviderSection(testCluster, e2.URL))
	members := startBackends(t, bs, "web", 2)
	lb := model("web", 80, members)
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	if diff := cmp.Diff(listOne(t, onA, lb.Name), listOne(t, onB, lb.Name)); diff != "" {
		t.Fatalf("the edges differ (-A +B):\n%s", diff)
	}
	waitAnswers(t, b, url, []string{"web-0", "web-1"})

	// Edge A stops; the VIPs move to B, which serves them.
	a.StopEdge()
	if err := b.RouteVIPsTo(ctx, e2); err != nil {
		t.Fatal(err)
	}
	waitAnswers(t, b, url, []string{"web-0", "web-1"})
	t.Log("edge A stopped: edge B serves the VIP")

	// A change while A is down: applied on B, the error names A only.
	added := startBackends(t, bs, "new", 1)
	changed := model("web", 80, append(slices.Clone(members), added...))
	_, err = p.Ensure(ctx, changed)
	if err == nil || !strings.Contains(err.Error(), "edge "+a.URL) || strings.Contains(err.Error(), "edge "+e2.URL) {
		t.Fatalf("Ensure with edge A down = %v; want an error naming %s only", err, a.URL)
	}
	t.Logf("Ensure with edge A down: %v", err)
	waitAnswers(t, b, url, []string{"web-0", "web-1", "new-0"})

	// A is back with its own last state; the retried Ensure levels it.
	if err := a.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listOne(t, onA, lb.Name); len(got.Listeners[0].Pool.Members) != 2 {
		t.Fatalf("edge A restarted with %d members, want its last state (2)", len(got.Listeners[0].Pool.Members))
	}
	// A lags: List through both edges shows it (the member A lacks, both
	// enabled and disabled), and nplctl's comparison says drift, though B
	// serves the model exactly.
	expected := changed.Clone()
	expected.Listeners[0].Pool.Members = lbmodel.SortMembers(expected.Listeners[0].Pool.Members)
	bFirst := openProvider(t, b, b.ProviderSection(testCluster, e2.URL, a.URL))
	for _, lister := range []struct {
		order string
		p     providers.Provider
	}{{"A, B", p}, {"B, A", bFirst}} {
		lagging := listOne(t, lister.p, lb.Name)
		if r := inspect.Compare([]*lbmodel.LoadBalancer{expected}, []lbmodel.LoadBalancer{lagging}); len(r.Pools) != 1 || r.Pools[0].State != inspect.StateDrift {
			t.Fatalf("edges %s, A lagging: List gave %+v: compared %+v, want drift", lister.order, lagging.Listeners[0].Pool.Members, r.Pools)
		}
		t.Logf("edges %s, A lagging: List lists %v", lister.order, lagging.Listeners[0].Pool.Members)
	}
	if _, err := p.Ensure(ctx, changed); err != nil {
		t.Fatalf("Ensure with both edges up: %v", err)
	}
	if diff := cmp.Diff(listOne(t, onA, lb.Name), listOne(t, onB, lb.Name)); diff != "" {
		t.Fatalf("the edges differ after the retry (-A +B):\n%s", diff)
	}
	if diff := cmp.Diff(listOne(t, onA, lb.Name), listOne(t, p, lb.Name)); diff != "" {
		t.Fatalf("List through both edges, alike, is not their copy (-A +both):\n%s", diff)
	}
	if err := b.RouteVIPsTo(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitAnswers(t, b, url, []string{"web-0", "web-1", "new-0"})
}

// TestEdge_reloadHAProxyCannotDoKeepsTheOldConfiguration: a configuration
// that passes haproxy -c but that HAProxy cannot load (its address and
// port are taken: here npl-edge's own API) fails the reload; the old
// worker keeps serving, the error says so, and the next change works.
func TestEdge_reloadHAProxyCannotDoKeepsTheOldConfiguration(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	st, err := p.Ensure(ctx, model("web", 80, startBackends(t, bs, "web", 2)))
	if err != nil {
		t.Fatal(err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	waitAnswers(t, b, url, []string{"web-0", "web-1"})
	before := status(t, b)

	taken := model("taken", 8443, startBackends(t, bs, "taken", 1))
	taken.RequestedVIP = b.EdgeIP.String() // npl-edge's API listens on EdgeIP:8443
	_, err = p.Ensure(ctx, taken)
	if err == nil || !strings.Contains(err.Error(), "rejected by HAProxy: load balancer "+taken.Name+" (proxy "+taken.Listeners[0].Pool.Name+")") ||
		!strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("Ensure of a listener HAProxy cannot bind = %v; want a rejection naming the load balancer and the reason", err)
	}
	t.Logf("refused: %v", err)
	after := status(t, b)
	if after.WorkerPID != before.WorkerPID || after.MasterPID != before.MasterPID {
		t.Errorf("the worker changed (%+v -> %+v): the old one should keep serving", before, after)
	}
	answers(t, b, url, 20)
	if lbs, err := p.List(ctx); err != nil || len(lbs) != 1 {
		t.Fatalf("List after the failed reload = %v, %v; want the one load balancer that serves", lbs, err)
	}
	// The next change reloads fine.
	if _, err := p.Ensure(ctx, model("next", 81, startBackends(t, bs, "next", 1))); err != nil {
		t.Fatalf("Ensure after the failed reload: %v", err)
	}
	waitAnswers(t, b, edgebed.URL("198.18.200.2", 81), []string{"next-0"})
	answers(t, b, url, 20)
}

// reloadByNewServices adds n Services (svc0, svc1, … on port 8080 with
// members), 150 ms apart: each a new VIP and frontend, a reload. It returns
// 300 ms after the last, the first Ensure's error if one fails.
func reloadByNewServices(ctx context.Context, p providers.Provider, n int, members []lbmodel.Member) error {
	for i := range n {
		time.Sleep(150 * time.Millisecond)
		if _, err := p.Ensure(ctx, model(fmt.Sprintf("svc%d", i), 8080, members)); err != nil {
			return fmt.Errorf("Ensure svc%d: %w", i, err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	return nil
}

// getHost sends one request for host and path to url's VIP from the client
// namespace and returns who answered.
func getHost(ctx context.Context, c *http.Client, vipURL, host, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(vipURL, "/")+path, nil)
	if err != nil {
		return "", err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	if _, err := io.Copy(&sb, resp.Body); err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return sb.String(), nil
}

// TestProvider_l7HostAndPathRules: an L7 load balancer (an Ingress) is an
// HTTP frontend whose rules send each request, by Host and path, to the
// pool Kubernetes prescribes; List reads the rules and pools back exactly;
// a member change of an L7 pool needs no reload; an HTTPS listener
// terminates TLS with the Secret's certificate, kept across a restart of
// the edge.
func TestProvider_l7HostAndPathRules(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	name := lbmodel.IngressLoadBalancerName(testCluster, "ns", "ing")
	apiPool := lbmodel.IngressPoolName(name, "ns", "api", "80")
	web := lbmodel.IngressPoolName(name, "ns", "web", "80")
	other := lbmodel.IngressPoolName(name, "ns", "other", "80")
	lb := &lbmodel.LoadBalancer{Name: name, Ingress: "ns/ing", Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}},
		Pools: []lbmodel.Pool{
			{Name: apiPool, Members: startBackends(t, bs, "api", 1)},
			{Name: web, Members: startBackends(t, bs, "web", 2)},
			{Name: other, Members: startBackends(t, bs, "other", 1)},
		},
		HTTP: &lbmodel.HTTPRoutes{DefaultPool: other, Rules: []lbmodel.Rule{
			{Host: "shop.example.com", Path: "/api", PathType: lbmodel.PathPrefix, Pool: apiPool},
			{Host: "shop.example.com", Path: "/", PathType: lbmodel.PathPrefix, Pool: web},
			{Host: "*.example.net", Path: "/exact", PathType: lbmodel.PathExact, Pool: apiPool},
		}},
	}
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	c := b.ClientHTTP(3 * time.Second)
	for _, tc := range []struct{ host, path, want string }{
		{"shop.example.com", "/api", "api-0"},
		{"shop.example.com:80", "/api/v1", "api-0"},
		{"shop.example.com", "/apix", "web-"}, // Prefix is element-wise: /apix is not under /api
		{"shop.example.com", "/", "web-"},
		{"a.example.net", "/exact", "api-0"},
		{"a.example.net", "/exact/more", "other-0"}, // Exact only
		{"a.b.example.net", "/exact", "other-0"},    // the wildcard is one label
		{"unknown.example.org", "/", "other-0"},     // the default pool
	} {
		got, err := getHost(ctx, c, url, tc.host, tc.path)
		if err != nil || !strings.HasPrefix(got, tc.want) {
			t.Errorf("Host %s path %s: answered by %q (%v), want %s", tc.host, tc.path, got, err, tc.want)
		}
	}
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		t.Fatal(err)
	}
	want := *n
	want.VIPs = st.VIPs
	if diff := cmp.Diff(want, listOne(t, p, name)); diff != "" {
		t.Fatalf("List (-applied +listed):\n%s", diff)
	}

	// A member of an L7 pool goes: no reload.
	before := status(t, b)
	fewer := lb.Clone()
	fewer.Pools[1].Members = fewer.Pools[1].Members[:1]
	if _, err := p.Ensure(ctx, fewer); err != nil {
		t.Fatal(err)
	}
	if after := status(t, b); after.Reloads != before.Reloads || after.WorkerPID != before.WorkerPID {
		t.Errorf("a member change of an L7 pool reloaded HAProxy: %+v -> %+v", before, after)
	}
	for range 6 {
		if got, err := getHost(ctx, c, url, "shop.example.com", "/"); err != nil || got != "web-0" {
			t.Fatalf("after web-1 left: answered by %q (%v), want web-0", got, err)
		}
	}

	// HTTPS: TLS terminated on the VIP with the Secret's certificate,
	// read back without its key; HTTP still served.
	withTLS := fewer.Clone()
	withTLS.Listeners = append(withTLS.Listeners, lbmodel.Listener{Port: 443, Protocol: lbmodel.HTTPS})
	certPEM, keyPEM := selfSigned(t)
	withTLS.HTTP.TLS = []lbmodel.TLSCert{{Secret: "ns/tls", Hosts: []string{"shop.example.com"}, CertPEM: certPEM, KeyPEM: keyPEM,
		Fingerprint: lbmodel.CertFingerprint(certPEM)}}
	st, err = p.Ensure(ctx, withTLS)
	if err != nil {
		t.Fatalf("Ensure with TLS: %v", err)
	}
	if len(st.Warnings) != 0 {
		t.Fatalf("warnings %q; want none", st.Warnings)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	tc := b.ClientHTTP(3 * time.Second)
	tc.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: "shop.example.com", MinVersion: tls.VersionTLS12}
	httpsURL := "https://" + net.JoinHostPort(st.VIPs[0], "443")
	if got, err := getHost(ctx, tc, httpsURL, "shop.example.com", "/api"); err != nil || got != "api-0" {
		t.Fatalf("HTTPS request for shop.example.com/api: %q (%v), want api-0", got, err)
	}
	if got, err := getHost(ctx, c, url, "shop.example.com", "/api"); err != nil || got != "api-0" {
		t.Fatalf("HTTP after the TLS change: %q (%v)", got, err)
	}
	n, err = lbmodel.Normalize(withTLS)
	if err != nil {
		t.Fatal(err)
	}
	want = *n
	want.VIPs = st.VIPs
	want.HTTP.TLS[0] = want.HTTP.TLS[0].WithoutKeys()
	if diff := cmp.Diff(want, listOne(t, p, name)); diff != "" {
		t.Fatalf("List with TLS (-applied +listed):\n%s", diff)
	}
	// The edge keeps the key for a restart of its own, and serves it again.
	b.StopEdge()
	if err := b.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := getHost(ctx, tc, httpsURL, "shop.example.com", "/"); err != nil || got != "web-0" {
		t.Fatalf("HTTPS after the edge restarted: %q (%v), want web-0", got, err)
	}
	// The key is in one file of mode 0600, not in the log nor the state.
	state, err := os.ReadFile(filepath.Join(b.Edges[0].Dir, "edge-state", "desired.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.EdgeLog(), "PRIVATE KEY") || strings.Contains(string(state), "PRIVATE KEY") {
		t.Error("the private key is in the edge's log or desired.json")
	}
	keyFile := filepath.Join(b.Edges[0].Dir, "edge-state", "tls", lbmodel.CertFingerprint(certPEM)+".pem")
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("certificate file %s: %v, mode %v; want 0600", keyFile, err, fi)
	}
	if err := p.Delete(ctx, name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if lbs, err := p.List(ctx); err != nil || len(lbs) != 0 {
		t.Fatalf("List after Delete = %v, %v", lbs, err)
	}
}

func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "shop.example.com"},
		DNSNames: []string{"shop.example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestEdge_resyncRepairsRuntimeDrift: a member drained and another deleted
// by hand on HAProxy's admin socket are put back by the edge's periodic
// resync (1 s in the bed), with no reload.
func TestEdge_resyncRepairsRuntimeDrift(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	members := startBackends(t, bs, "web", 2)
	lb := model("web", 80, members)
	if _, err := p.Ensure(ctx, lb); err != nil {
		t.Fatal(err)
	}
	want := listOne(t, p, lb.Name)
	before := status(t, b)
	admin := filepath.Join(b.Edges[0].Dir, "edge-state", "admin.sock")
	pool := lb.Listeners[0].Pool.Name
	for _, cmd := range []string{
		"set server " + pool + "/" + haproxy.ServerName(members[0]) + " state drain",
		"set server " + pool + "/" + haproxy.ServerName(members[1]) + " state maint",
		"del server " + pool + "/" + haproxy.ServerName(members[1]),
	} {
		if err := haproxy.Run(ctx, admin, cmd, "Server deleted"); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
	// The repair is the edge's runtime commands (the drift may be gone
	// before a List could see it: the resync runs every second).
	waitForCond(t, 10*time.Second, "the resync to repair the drift", func() (bool, error) {
		st, err := b.Status(ctx)
		return err == nil && st.RuntimeCommands >= before.RuntimeCommands+3 && cmp.Equal(want, listOne(t, p, lb.Name)), err
	})
	if after := status(t, b); after.Reloads != before.Reloads || after.WorkerPID != before.WorkerPID {
		t.Errorf("the repair reloaded HAProxy: %+v -> %+v", before, after)
	}
	waitAnswers(t, b, edgebed.URL(want.VIPs[0], 80), []string{"web-0", "web-1"})
}
