package haproxy

import (
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
	"math"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// certFor is a self-signed certificate for host and its key, PEM.
func certFor(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
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

// answer is what a request through the VIP got.
type answer struct {
	status int
	header http.Header
	// backend is who answered, "" for HAProxy itself.
	backend string
	// sent are the request headers the backend received.
	sent http.Header
	// cert is the DNS name of the certificate the VIP served over TLS.
	cert string
}

// send sends one request without following redirects.
func send(t *testing.T, c *http.Client, method, url, host string, h http.Header) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header, backend: resp.Header.Get(edgebed.BackendHeader)}
	if e := resp.Header.Get(edgebed.EchoHeaders); e != "" {
		if err := json.Unmarshal([]byte(e), &a.sent); err != nil {
			t.Fatal(err)
		}
	}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		a.cert = resp.TLS.PeerCertificates[0].DNSNames[0]
	}
	return a
}

// TestProvider_gatewayL7DataPlane: a load balancer with every field of the
// Gateway L7 model, served by the real HAProxy behind a VIP: header, query,
// method and regex path tests pick the rule; rules serve only their ports;
// two HTTPS ports serve their certificates by SNI; weights 70/30 split the
// requests; header filters change what the backend and the client see;
// rewrites, redirects and a fixed status answer as the model says. List
// then returns exactly the applied model, and a weight change needs no
// reload.
func TestProvider_gatewayL7DataPlane(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	name := testCluster + "--gw-ns-gw"
	pa, pb, pw := name+"-a", name+"-b", name+"-w"
	weighted := startBackends(t, bs, "w", 2)
	weighted[0].Weight, weighted[1].Weight = 70, 30
	oneCert, oneKey := certFor(t, "one.example")
	twoCert, twoKey := certFor(t, "two.example")
	all := []int32{80, 443, 8443}
	lb := &lbmodel.LoadBalancer{Name: name, Gateway: "ns/gw", Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 8080, Protocol: lbmodel.HTTP},
			{Port: 443, Protocol: lbmodel.HTTPS}, {Port: 8443, Protocol: lbmodel.HTTPS}},
		Pools: []lbmodel.Pool{{Name: pa, Members: startBackends(t, bs, "a", 1)}, {Name: pb, Members: startBackends(t, bs, "b", 1)},
			{Name: pw, Members: weighted}},
		HTTP: &lbmodel.HTTPRoutes{
			TLS: []lbmodel.TLSCert{
				{Secret: "ns/one", Hosts: []string{"one.example"}, Ports: []int32{443}, CertPEM: oneCert, KeyPEM: oneKey,
					Fingerprint: lbmodel.CertFingerprint(oneCert)},
				{Secret: "ns/two", Hosts: []string{"two.example"}, CertPEM: twoCert, KeyPEM: twoKey,
					Fingerprint: lbmodel.CertFingerprint(twoCert)},
			},
			Rules: []lbmodel.Rule{
				{Path: "/", PathType: lbmodel.PathPrefix, Pool: pb, Ports: all, Order: 9},
				{Path: "/hdr", PathType: lbmodel.PathPrefix, Pool: pa, Ports: all,
					Headers: []lbmodel.ValueMatch{{Name: "X-Env", Value: `can "ary" it's #1 {x}`}}},
				{Path: "/hdr", PathType: lbmodel.PathPrefix, Pool: pa, Ports: all,
					Headers: []lbmodel.ValueMatch{{Name: "X-Version", Value: "v[0-9]+", Regex: true}}, Order: 1},
				{Path: "/q", PathType: lbmodel.PathExact, Pool: pa, Ports: all, Query: []lbmodel.ValueMatch{{Name: "v", Value: "12"}}},
				{Path: "/m", PathType: lbmodel.PathPrefix, Pool: pa, Ports: all, Method: "POST"},
				{Path: "/v[0-9]+/items", PathType: lbmodel.PathRegex, Pool: pa, Ports: all},
				{Path: "/p8080", PathType: lbmodel.PathExact, Pool: pa, Ports: []int32{8080}},
				{Path: "/w", PathType: lbmodel.PathExact, Pool: pw, Ports: all},
				{Host: "*.wild.example", Path: "/wild", PathType: lbmodel.PathExact, Pool: pa, Ports: all},
				{Path: "/filter", PathType: lbmodel.PathExact, Pool: pa, Ports: all,
					RequestHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-Set", Value: `a b 'c' "d" 100%`}},
						Add: []lbmodel.Header{{Name: "X-Add", Value: "v2"}}, Remove: []string{"X-Del"}},
					ResponseHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-Resp", Value: "r 'q'"}},
						Remove: []string{edgebed.BackendHeader}}},
				{Path: "/rw", PathType: lbmodel.PathPrefix, Pool: pa, Ports: all, Rewrite: &lbmodel.Rewrite{Hostname: "internal.example",
					Path: &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/new"}}},
				{Path: "/strip", PathType: lbmodel.PathPrefix, Pool: pa, Ports: all, Rewrite: &lbmodel.Rewrite{
					Path: &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/"}}},
				{Path: "/full", PathType: lbmodel.PathExact, Pool: pa, Ports: all, Rewrite: &lbmodel.Rewrite{
					Path: &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/replaced"}}},
				{Path: "/redir", PathType: lbmodel.PathPrefix, Ports: all, Redirect: &lbmodel.Redirect{Scheme: "https",
					Hostname: "new.example", StatusCode: 301, Path: &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/moved"}}},
				{Path: "/redir2", PathType: lbmodel.PathExact, Ports: all, Redirect: &lbmodel.Redirect{Port: 8081, StatusCode: 302,
					Path: &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/else"}}},
				{Path: "/redir3", PathType: lbmodel.PathExact, Ports: all, Redirect: &lbmodel.Redirect{StatusCode: 302}},
				{Path: "/redir308", PathType: lbmodel.PathExact, Ports: all, Redirect: &lbmodel.Redirect{Hostname: "b.example", StatusCode: 308}},
				{Path: "/broken", PathType: lbmodel.PathPrefix, Ports: all, FixedStatus: 500},
			},
		},
	}
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if len(st.Warnings) != 0 {
		t.Fatalf("warnings %q", st.Warnings)
	}
	vip := st.VIPs[0]
	url := func(port int, path string) string {
		return "http://" + net.JoinHostPort(vip, strconv.Itoa(port)) + path
	}
	c := b.ClientHTTP(3 * time.Second)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}

	// Matches: each request and the backend that must answer it.
	for _, tc := range []struct {
		method, path string
		port         int
		h            http.Header
		want         string
		status       int
	}{
		{"GET", "/hdr", 80, hdr("X-Env", `can "ary" it's #1 {x}`), "a-0", 200},
		{"GET", "/hdr/x", 80, hdr("x-env", "canary"), "b-0", 200}, // the value differs
		{"GET", "/hdr", 80, hdr("X-Version", "v12"), "a-0", 200},
		{"GET", "/hdr", 80, hdr("X-Version", "v12x"), "b-0", 200},
		{"GET", "/hdr", 80, nil, "b-0", 200},
		{"GET", "/q?v=12", 80, nil, "a-0", 200},
		{"GET", "/q?x=1&v=12", 80, nil, "a-0", 200},
		{"GET", "/q?v=123", 80, nil, "b-0", 200},
		{"POST", "/m/x", 80, nil, "a-0", 200},
		{"GET", "/m/x", 80, nil, "b-0", 200},
		{"GET", "/v12/items", 80, nil, "a-0", 200},
		{"GET", "/v12/items/more", 80, nil, "b-0", 200}, // anchored at both ends
		{"GET", "/vx/items", 80, nil, "b-0", 200},
		// Rules serve only their ports: 8080 has /p8080 and nothing else.
		{"GET", "/p8080", 8080, nil, "a-0", 200},
		{"GET", "/p8080", 80, nil, "b-0", 200},
		{"GET", "/hdr", 8080, hdr("X-Version", "v1"), "", 404},
		{"GET", "/", 8080, nil, "", 404},
		{"GET", "/broken/x", 80, nil, "", 500},
	} {
		a := send(t, c, tc.method, url(tc.port, tc.path), "shop.example", tc.h)
		if a.status != tc.status || a.backend != tc.want {
			t.Errorf("%s :%d%s %v: HTTP %d from %q, want HTTP %d from %q", tc.method, tc.port, tc.path, tc.h, a.status, a.backend, tc.status, tc.want)
		}
	}
	// A Gateway's wildcard host stands for one or more labels, not none.
	for host, want := range map[string]string{"a.wild.example": "a-0", "a.b.wild.example:80": "a-0", "wild.example": "b-0"} {
		if a := send(t, c, "GET", url(80, "/wild"), host, nil); a.status != 200 || a.backend != want {
			t.Errorf("Host %s /wild: HTTP %d from %q, want %s", host, a.status, a.backend, want)
		}
	}

	// Header filters: what the backend received, and what the client got.
	a := send(t, c, "GET", url(80, "/filter"), "shop.example", hdr("X-Add", "v1", "X-Del", "gone", "X-Set", "old"))
	if a.status != 200 || a.sent.Get("X-Set") != `a b 'c' "d" 100%` || strings.Join(a.sent.Values("X-Add"), ",") != "v1,v2" ||
		a.sent.Get("X-Del") != "" {
		t.Errorf("/filter: the backend received %v (HTTP %d); want X-Set replaced, X-Add v1 and v2, no X-Del", a.sent, a.status)
	}
	if a.header.Get("X-Resp") != "r 'q'" || a.header.Get(edgebed.BackendHeader) != "" {
		t.Errorf("/filter: the client got headers %v; want X-Resp and no %s", a.header, edgebed.BackendHeader)
	}

	// Rewrites: the Host and path the backend received; the query stays.
	for _, tc := range []struct{ path, host, uri string }{
		{"/rw/x?y=1", "internal.example", "/new/x?y=1"},
		{"/rw", "internal.example", "/new"},
		{"/rw/", "internal.example", "/new/"},
		{"/strip/three", "shop.example", "/three"},
		{"/strip", "shop.example", "/"},
		{"/full?z=1", "shop.example", "/replaced?z=1"},
	} {
		a := send(t, c, "GET", url(80, tc.path), "shop.example", nil)
		if a.backend != "a-0" || a.header.Get(edgebed.EchoHost) != tc.host || a.header.Get(edgebed.EchoURI) != tc.uri {
			t.Errorf("%s: backend %q received Host %q URI %q; want a-0, %q, %q", tc.path, a.backend, a.header.Get(edgebed.EchoHost),
				a.header.Get(edgebed.EchoURI), tc.host, tc.uri)
		}
	}

	// Redirects: the status and Location.
	for _, tc := range []struct {
		path, host string
		port       int
		status     int
		location   string
	}{
		{"/redir/x?y=1", "shop.example", 80, 301, "https://new.example/moved/x?y=1"},
		{"/redir2?k=v", "shop.example:80", 80, 302, "http://shop.example:8081/else?k=v"},
		{"/redir3", "shop.example", 80, 302, "http://shop.example/redir3"},
		{"/redir308", "shop.example", 80, 308, "http://b.example/redir308"},
		{"/redir3", "[fd00:198:18::1]:80", 80, 302, "http://[fd00:198:18::1]/redir3"}, // an IPv6 literal keeps its brackets
	} {
		a := send(t, c, "GET", url(tc.port, tc.path), tc.host, nil)
		if a.status != tc.status || a.header.Get("Location") != tc.location {
			t.Errorf("%s: HTTP %d Location %q; want HTTP %d %q", tc.path, a.status, a.header.Get("Location"), tc.status, tc.location)
		}
	}

	// TLS: 443 serves both certificates by SNI (ns/one the default), 8443
	// only ns/two. A redirect without scheme or port keeps the listener's.
	tc := b.ClientHTTP(3 * time.Second)
	tc.CheckRedirect = c.CheckRedirect
	for _, x := range []struct {
		port       int
		sni, want  string
		redirected string
	}{
		{443, "one.example", "one.example", "https://one.example/redir3"},
		{443, "two.example", "two.example", "https://two.example/redir3"},
		{443, "other.example", "one.example", "https://other.example/redir3"},
		{8443, "one.example", "two.example", "https://one.example:8443/redir3"},
	} {
		tc.Transport.(*http.Transport).TLSClientConfig = &tls.Config{ServerName: x.sni, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // the test reads which certificate is served.
		u := "https://" + net.JoinHostPort(vip, strconv.Itoa(x.port))
		if a := send(t, tc, "GET", u+"/", x.sni, nil); a.status != 200 || a.backend != "b-0" || a.cert != x.want {
			t.Errorf(":%d SNI %s: HTTP %d from %q with the certificate of %q; want b-0 and %q", x.port, x.sni, a.status, a.backend, a.cert, x.want)
		}
		if a := send(t, tc, "GET", u+"/redir3", x.sni, nil); a.header.Get("Location") != x.redirected {
			t.Errorf(":%d /redir3: Location %q, want %q", x.port, a.header.Get("Location"), x.redirected)
		}
	}

	// Weights 70/30 over 500 requests, within ±10 points.
	counts := map[string]int{}
	for range 500 {
		counts[send(t, c, "GET", url(80, "/w"), "shop.example", nil).backend]++
	}
	t.Logf("weights 70/30: %v of 500 requests", counts)
	if counts["w-0"] < 300 || counts["w-0"] > 400 || counts["w-0"]+counts["w-1"] != 500 {
		t.Errorf("weights 70/30: %v of 500, want w-0 at 350±50 and nothing else", counts)
	}

	before := listedAsAppliedAndIdempotent(ctx, t, b, p, lb, st.VIPs)

	// A weight change goes through the runtime API: no reload.
	reweighted := lb.Clone()
	reweighted.Pools[2].Members[0].Weight, reweighted.Pools[2].Members[1].Weight = 10, 0
	if _, err := p.Ensure(ctx, reweighted); err != nil {
		t.Fatal(err)
	}
	if after := status(t, b); after.Reloads != before.Reloads || after.WorkerPID != before.WorkerPID {
		t.Errorf("a weight change reloaded HAProxy: %+v -> %+v", before, after)
	}
	rn, err := lbmodel.Normalize(reweighted)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rn.Pools[2].Members, listOne(t, p, name).Pools[2].Members); diff != "" {
		t.Errorf("members after the weight change (-applied +listed):\n%s", diff)
	}
	if err := p.Delete(ctx, name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// listedAsAppliedAndIdempotent checks that List returns exactly the
// normalized model lb that was applied, on vips and without key material,
// and that applying it again is no write and no reload; it returns the
// edge's status before that second apply.
func listedAsAppliedAndIdempotent(ctx context.Context, t *testing.T, b *edgebed.Bed, p providers.Provider, lb *lbmodel.LoadBalancer, vips []string) api.Status {
	t.Helper()
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		t.Fatal(err)
	}
	want := *n
	want.VIPs = vips
	for i := range want.HTTP.TLS {
		want.HTTP.TLS[i] = want.HTTP.TLS[i].WithoutKeys()
	}
	if diff := cmp.Diff(want, listOne(t, p, lb.Name)); diff != "" {
		t.Fatalf("List (-applied +listed):\n%s", diff)
	}
	before := status(t, b)
	if _, err := p.Ensure(ctx, lb); err != nil {
		t.Fatal(err)
	}
	if after := status(t, b); after.Writes != before.Writes || after.Reloads != before.Reloads {
		t.Errorf("the same model again: %+v -> %+v, want no write", before, after)
	}
	return before
}

// TestProvider_gatewayInvalidShare: the share of a pool's
// requests that Gateway API sends to invalid backendRefs
// (Pool.InvalidWeight) is answered 500 by the real HAProxy behind a VIP,
// in proportion to the members' weights, over HTTP/1.1 and over gRPC (an
// h2c pool, whose clients see an HTTP 500); a pool whose only share is the
// invalid one answers 500 to all. List returns the applied model, and the
// share changes, appears and goes through the runtime API: no reload.
func TestProvider_gatewayInvalidShare(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	name := testCluster + "--gw-ns-share"
	pHalf, pOnly, pPlain, pGRPC := name+"-half", name+"-only", name+"-plain", name+"-grpc"
	lb := &lbmodel.LoadBalancer{Name: name, Gateway: "ns/share", Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}},
		Pools: []lbmodel.Pool{
			{Name: pHalf, Members: startBackends(t, bs, "v", 1), InvalidWeight: 1},
			{Name: pOnly, Members: []lbmodel.Member{}, InvalidWeight: 1},
			{Name: pPlain, Members: startBackends(t, bs, "p", 1)},
			{Name: pGRPC, AppProtocol: lbmodel.AppProtocolH2C, Members: []lbmodel.Member{startGRPCBackend(t, "g-0")}, InvalidWeight: 1},
		},
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{
			{Path: "/half", PathType: lbmodel.PathPrefix, Pool: pHalf},
			{Path: "/only", PathType: lbmodel.PathPrefix, Pool: pOnly},
			{Path: "/plain", PathType: lbmodel.PathPrefix, Pool: pPlain},
			{Path: "/grpc.health.v1.Health", PathType: lbmodel.PathPrefix, Pool: pGRPC},
		}},
	}
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	addr := net.JoinHostPort(st.VIPs[0], "80")
	c := b.ClientHTTP(3 * time.Second)
	const n = 400
	// split sends n requests to path and checks that the share answered
	// 500 by HAProxy is invalid/(invalid+valid) within four standard
	// deviations of a binomial draw, the rest 200 from member.
	split := func(path, member string, valid, invalid int) {
		t.Helper()
		counts := map[string]int{}
		for range n {
			a := send(t, c, "GET", "http://"+addr+path, "shop.example", nil)
			counts[fmt.Sprintf("%d %s", a.status, a.backend)]++
		}
		share := float64(invalid) / float64(valid+invalid)
		bound := 4 * math.Sqrt(n*share*(1-share))
		t.Logf("%s, valid %d : invalid %d: %v of %d requests (500s expected %.0f±%.0f)", path, valid, invalid, counts, n, n*share, bound)
		got := counts["500 "]
		if math.Abs(float64(got)-n*share) > bound || got+counts["200 "+member] != n {
			t.Errorf("%s: %v of %d, want %.0f±%.0f answered 500 by HAProxy and the rest 200 by %s", path, counts, n, n*share, bound, member)
		}
	}
	split("/half", "v-0", 1, 1)
	split("/only", "", 0, 1)
	split("/plain", "p-0", 1, 0)

	// gRPC: the invalid share is an HTTP 500, which the client sees as
	// codes.Unknown.
	grpcSplit := func(wantFailed int) {
		t.Helper()
		dial := func(ctx context.Context, a string) (net.Conn, error) {
			return b.ClientDial(ctx, "tcp", a, 3*time.Second)
		}
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithContextDialer(dial),
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("grpc.example"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		served, failed := 0, 0
		for range 40 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
			cancel()
			switch {
			case err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
				served++
			case grpcstatus.Code(err) == codes.Unknown && strings.Contains(err.Error(), "500"):
				failed++
			default:
				t.Fatalf("gRPC Health/Check: %v, %v; want SERVING or an HTTP 500", resp, err)
			}
		}
		t.Logf("gRPC: %d served, %d answered HTTP 500 of 40", served, failed)
		if failed < wantFailed-12 || failed > wantFailed+12 {
			t.Errorf("gRPC: %d of 40 answered HTTP 500, want %d±12", failed, wantFailed)
		}
	}
	grpcSplit(20)

	before := listedAsAppliedAndIdempotent(ctx, t, b, p, lb, st.VIPs)

	// The share changes (1 to 3), appears (plain) and goes (gRPC) through
	// the runtime API.
	changed := lb.Clone()
	changed.Pools[0].InvalidWeight, changed.Pools[2].InvalidWeight, changed.Pools[3].InvalidWeight = 3, 1, 0
	if _, err := p.Ensure(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if after := status(t, b); after.Reloads != before.Reloads || after.WorkerPID != before.WorkerPID {
		t.Errorf("a change of the invalid shares reloaded HAProxy: %+v -> %+v", before, after)
	}
	listedAsAppliedAndIdempotent(ctx, t, b, p, changed, st.VIPs)
	split("/half", "v-0", 1, 3)
	split("/plain", "p-0", 1, 1)
	grpcSplit(0)
	if err := p.Delete(ctx, name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}
