package haproxy

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// The traffic policy through the real HAProxy VIP, on the bed's backends:
// the model as npl-lbsync builds it, through the haproxy provider.

// l7Model is an L7 load balancer whose one HTTP listener on port 80 sends
// every request to pool, which has policy.
func l7Model(svc string, members []lbmodel.Member, policy *lbmodel.Policy) *lbmodel.LoadBalancer {
	name := lbmodel.LoadBalancerName(testCluster, "ns", svc) + "-L7"
	pool := name + "-pool"
	return &lbmodel.LoadBalancer{Name: name, Ingress: "ns/" + svc, Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}},
		Pools:     []lbmodel.Pool{{Name: pool, Members: slices.Clone(members), Policy: policy}},
		HTTP:      &lbmodel.HTTPRoutes{DefaultPool: pool, Rules: []lbmodel.Rule{}}}
}

// ensureUp applies lb and waits until HAProxy's checks hold n members of
// its pool up; it returns the VIP and the pool.
func ensureUp(t *testing.T, p providers.Provider, b *edgebed.Bed, lb *lbmodel.LoadBalancer, n int) (string, string) {
	t.Helper()
	st, err := p.Ensure(context.Background(), lb)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) != 0 {
		t.Fatalf("warnings: %q", st.Warnings)
	}
	name := lb.Listeners[0].Pool.Name
	if len(lb.Pools) > 0 {
		name = lb.Pools[0].Name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Edges[0].WaitUp(ctx, name, n); err != nil {
		t.Fatal(err)
	}
	return st.VIPs[0], name
}

// cookieGet sends one request with the cookies of jar and keeps those the
// answer sets; it returns who answered.
func cookieGet(ctx context.Context, c *http.Client, url string, jar map[string]string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	for k, v := range jar {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	body, resp, err := edgebed.Do(c, req)
	if err != nil {
		return "", err
	}
	for _, ck := range resp.Cookies() {
		if ck.MaxAge < 0 || ck.Value == "" {
			delete(jar, ck.Name)
		} else {
			jar[ck.Name] = ck.Value
		}
	}
	return body, nil
}

// TestProvider_cookiePersistenceKeepsAClientOnItsMember (the model
// directly: Gateway API's sessionPersistence is of the experimental
// channel, which the CRDs npl installs drop): HAProxy inserts a cookie
// naming the member; a client that returns it reaches that one member for
// 200 requests, also one added by the runtime API after a new member came
// (its cookie is computed then); drained, the member keeps the sessions
// that name it; removed (its Pod gone), the client moves to another
// member, which sets its cookie, without a failed request.
func TestProvider_cookiePersistenceKeepsAClientOnItsMember(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	members := startBackends(t, bs, "web", 3)
	policy := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "shop-session", TimeoutSeconds: 3600}}
	lb := l7Model("sticky", members, policy)
	vip, _ := ensureUp(t, p, b, lb, 3)
	url := edgebed.URL(vip, 80)
	if got := listOne(t, p, lb.Name).Pools[0].Policy; !cmp.Equal(got, policy) {
		t.Errorf("List reads the pool's policy back as %+v, want %+v", got, policy)
	}

	// A member added without a reload: its sessions stick too.
	before := status(t, b)
	more := append(slices.Clone(members), startBackends(t, bs, "new", 1)...)
	lb.Pools[0].Members = more
	ensureUp(t, p, b, lb, 4)
	if after := status(t, b); after.Reloads != before.Reloads {
		t.Fatalf("adding a member reloaded HAProxy")
	}

	// Every client gets a cookie and keeps its member for 200 requests.
	c := b.ClientHTTP(3 * time.Second)
	jars := map[string]map[string]string{}
	for i := range 12 {
		jar := map[string]string{}
		first, err := cookieGet(ctx, c, url, jar)
		if err != nil {
			t.Fatal(err)
		}
		if jar["shop-session"] == "" {
			t.Fatalf("client %d: no cookie shop-session set by the answer of %s", i, first)
		}
		jars[first] = jar
	}
	if len(jars) != 4 {
		var reached []string
		for name := range jars {
			reached = append(reached, name)
		}
		t.Fatalf("12 new clients reached %v, want all 4 members", reached)
	}
	for name, jar := range jars {
		got := map[string]int{}
		for range 200 {
			who, err := cookieGet(ctx, c, url, jar)
			if err != nil {
				t.Fatal(err)
			}
			got[who]++
		}
		if len(got) != 1 || got[name] != 200 {
			t.Fatalf("a client with %s's cookie reached %v in 200 requests, want %s only", name, got, name)
		}
	}
	t.Logf("cookie persistence: for each of the 4 members (one added at runtime), a client returning its cookie reached it 200 times of 200")

	// The member of web-1's client drains (its Pod terminating), then goes.
	jar := jars["web-1"]
	drained := members[1]
	lb.Pools[0].Members[1].Enabled = false
	if _, err := p.Ensure(ctx, lb); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if who, err := cookieGet(ctx, c, url, jar); err != nil || who != "web-1" {
			t.Fatalf("a session of the draining member went to %q (%v), want web-1: drain keeps its sessions", who, err)
		}
	}
	lb.Pools[0].Members = slices.DeleteFunc(lb.Pools[0].Members, func(m lbmodel.Member) bool { return m.Port == drained.Port })
	if _, err := p.Ensure(ctx, lb); err != nil {
		t.Fatal(err)
	}
	bs.StopBackend(drained.Port)
	got := map[string]int{}
	for range 100 {
		who, err := cookieGet(ctx, c, url, jar)
		if err != nil {
			t.Fatalf("after its member went, a request failed: %v", err)
		}
		got[who]++
	}
	if got["web-1"] != 0 || len(got) != 1 {
		t.Fatalf("after web-1 went, its client reached %v in 100 requests: want one other member", got)
	}
	t.Logf("web-1 drained: its session stayed on it; removed: its client moved to %v, 0 failed", got)
}

// TestProvider_consistentHashOnTheSourceMovesFewClients: a consistent hash
// of the client's address spreads 100 clients over 4 members; a fifth
// member, added by the runtime API, takes clients only from the others
// and no more than its share (1/5) plus 5 % of them.
func TestProvider_consistentHashOnTheSourceMovesFewClients(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	members := startBackends(t, bs, "web", 5)
	lb := model("hash", 80, members[:4])
	lb.Listeners[0].Pool.Policy = &lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP}}
	vip, _ := ensureUp(t, p, b, lb, 4)
	url := edgebed.URL(vip, 80)
	clients, err := b.ClientSources(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	reached := func() map[netip.Addr]string {
		t.Helper()
		out := map[netip.Addr]string{}
		for _, src := range clients {
			c := b.ClientHTTPFrom(src, 3*time.Second)
			first := ""
			for i := range 3 {
				who, err := edgebed.Get(ctx, c, url)
				if err != nil {
					t.Fatalf("client %s: %v", src, err)
				}
				if i > 0 && who != first {
					t.Fatalf("client %s reached %s, then %s: a hash of the source keeps it on one member", src, first, who)
				}
				first = who
			}
			out[src] = first
		}
		return out
	}
	before := reached()
	spread := map[string]int{}
	for _, m := range before {
		spread[m]++
	}
	lb.Listeners[0].Pool.Members = members
	ensureUp(t, p, b, lb, 5)
	after := reached()
	moved, wrong := 0, 0
	for src, m := range before {
		if after[src] != m {
			moved++
			if after[src] != "web-4" {
				wrong++
			}
		}
	}
	frac := float64(moved) / float64(len(clients))
	t.Logf("consistent hash on the source: 100 clients over 4 members %v; a fifth member moved %d of them (%.2f, bound 1/5 + 0.05 = 0.25), %d to another old member",
		spread, moved, frac, wrong)
	if frac > 0.25 || wrong > 0 || moved == 0 {
		t.Fatalf("the fifth member moved %d clients (%.2f), %d of them between old members; want at most 0.25, none between old members, some to it", moved, frac, wrong)
	}
}

// TestProvider_httpHealthCheckTakesOutAMemberThatAnswers500: a member
// that keeps taking connections but answers 500 on the checked path is
// marked down by HAProxy's HTTP check (interval 1 s, fall 2, rise 2),
// takes no request while down, and is back once it answers 200 again; the
// model keeps it enabled throughout, and no reload happens.
func TestProvider_httpHealthCheckTakesOutAMemberThatAnswers500(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	members := startBackends(t, bs, "web", 3)
	lb := model("checked", 80, members)
	lb.Listeners[0].Pool.Policy = &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz",
		Host: "web.example", ExpectedStatuses: []lbmodel.StatusRange{{Min: 200, Max: 299}}, IntervalSeconds: 1, Fall: 2, Rise: 2}}
	vip, pool := ensureUp(t, p, b, lb, 3)
	url := edgebed.URL(vip, 80)
	e := b.Edges[0]
	sick := members[2]
	server := haproxy.ServerName(sick)
	before := status(t, b)

	start := time.Now()
	bs.SetStatus(sick.Port, "/healthz", http.StatusInternalServerError)
	waitServerUp(t, e, pool, server, false)
	down := time.Since(start)
	if s, _ := serverState(ctx, e, pool, server); !s.Enabled() {
		t.Fatalf("server %s is out by its admin state %#x, want only its check down", server, s.AdminState)
	}
	s0, err := e.ServerSessions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	got := answers(t, b, url, 60)
	s1, err := e.ServerSessions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if got["web-2"] != 0 || sessionsDelta(s0, s1)[server] != 0 || len(got) != 2 {
		t.Fatalf("with web-2 failing its check: answered %v, connections %v; want web-0 and web-1 only", got, sessionsDelta(s0, s1))
	}

	start = time.Now()
	bs.SetStatus(sick.Port, "/healthz", 0)
	waitServerUp(t, e, pool, server, true)
	back := time.Since(start)
	if got := answers(t, b, url, 60); got["web-2"] == 0 {
		t.Fatalf("web-2 back up took no request: %v", got)
	}
	t.Logf("HTTP check (interval 1s, fall 2, rise 2): web-2 answering 500 on /healthz was down after %v (interval × fall = 2s), 60 requests then reached %v; answering 200 again it was up after %v (interval × rise = 2s)",
		down.Round(10*time.Millisecond), got, back.Round(10*time.Millisecond))
	if after := status(t, b); after.Reloads != before.Reloads {
		t.Errorf("the check cycle reloaded HAProxy %d times", after.Reloads-before.Reloads)
	}
	if lst := listOne(t, p, lb.Name); !slices.Equal(lst.Listeners[0].Pool.Members, lbmodel.SortMembers(slices.Clone(members))) {
		t.Errorf("List after the check cycle: %+v, want the members as applied", lst.Listeners[0].Pool.Members)
	}
}

// TestProvider_slowStartRampsANewMember: a member added with slow start
// (6 s) takes a share of the requests that grows over its first seconds
// towards its quarter of four. The shares are reported; asserted only that
// the first second's is below half the last's (the ramp), and the last
// near a quarter.
func TestProvider_slowStartRampsANewMember(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	members := startBackends(t, bs, "web", 4)
	lb := model("slow", 80, members[:3])
	lb.Listeners[0].Pool.Policy = &lbmodel.Policy{SlowStartSeconds: 6}
	vip, _ := ensureUp(t, p, b, lb, 3)
	url := edgebed.URL(vip, 80)
	c := b.ClientHTTP(3 * time.Second)

	lb.Listeners[0].Pool.Members = members
	if _, err := p.Ensure(ctx, lb); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	type bucket struct{ all, fresh int }
	buckets := make([]bucket, 8)
	for time.Since(start) < 8*time.Second {
		who, err := edgebed.Get(ctx, c, url)
		if err != nil {
			t.Fatal(err)
		}
		i := int(time.Since(start) / time.Second)
		if i >= len(buckets) {
			break
		}
		buckets[i].all++
		if who == "web-3" {
			buckets[i].fresh++
		}
	}
	var shares []string
	for i, bk := range buckets {
		shares = append(shares, fmt.Sprintf("%ds %.2f (%d/%d)", i+1, float64(bk.fresh)/float64(max(bk.all, 1)), bk.fresh, bk.all))
	}
	t.Logf("slow start 6s, the fourth member's share of the requests per second after it was added (a full share is 0.25): %s",
		strings.Join(shares, ", "))
	share := func(bk bucket) float64 { return float64(bk.fresh) / float64(max(bk.all, 1)) }
	first, last := buckets[0], buckets[len(buckets)-1]
	if share(last) < 0.15 || share(first) >= share(last)/2 {
		t.Errorf("the new member's share: %.2f in its first second, %.2f in the last; want a ramp to about a quarter", share(first), share(last))
	}
}

// TestProvider_backendTLSVerifiesTheMember (the model directly, as a
// BackendTLSPolicy would make it): a pool with backend TLS speaks TLS to
// its member and verifies its certificate against the CA certificates
// given and the hostname (SNI and name); a member whose certificate names
// another host is refused (503), and a pool without backend TLS speaks
// clear text, which the TLS member answers 400. The CA file is loaded for members added at
// runtime too. Backend TLS whose subject alternative name is not the
// hostname is left out (a warning): HAProxy verifies the name it sends
// as SNI, which would accept a member the name refuses.
func TestProvider_backendTLSVerifiesTheMember(t *testing.T) {
	b, _ := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	member := startTLSBackend(t, "secure", "abc.example")
	caPEM, _ := certFor(t, "unrelated.example")
	name := testCluster + "--ns-btls-L7"
	verified, mismatch, plain, san := name+"-ok", name+"-mismatch", name+"-plain", name+"-san"
	tlsTo := func(host string, ca []byte) *lbmodel.Policy {
		return &lbmodel.Policy{BackendTLS: &lbmodel.BackendTLS{Hostname: host, CACertPEM: string(ca)}}
	}
	// The member's own certificate is its CA (self-signed), beside an
	// unrelated one.
	own := memberCert(t, member)
	lb := &lbmodel.LoadBalancer{Name: name, Ingress: "ns/btls", Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}},
		Pools: []lbmodel.Pool{
			{Name: verified, Policy: tlsTo("abc.example", append(slices.Clone(caPEM), own...))},
			{Name: mismatch, Members: []lbmodel.Member{member}, Policy: tlsTo("xyz.example", own)},
			{Name: plain, Members: []lbmodel.Member{member}},
			{Name: san, Members: []lbmodel.Member{member}, Policy: &lbmodel.Policy{BackendTLS: &lbmodel.BackendTLS{
				Hostname: "abc.example", CACertPEM: string(own),
				SubjectAltNames: []lbmodel.SubjectAltName{{Type: lbmodel.SANHostname, Value: "xyz.example"}}}}},
		},
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{
			{Path: "/ok", PathType: lbmodel.PathExact, Pool: verified},
			{Path: "/mismatch", PathType: lbmodel.PathExact, Pool: mismatch},
			{Path: "/plain", PathType: lbmodel.PathExact, Pool: plain},
			{Path: "/san", PathType: lbmodel.PathExact, Pool: san},
		}}}
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	// The verified pool's member comes by the runtime API, after the
	// reload that loaded its CA file.
	before := status(t, b)
	lb.Pools[0].Members = []lbmodel.Member{member}
	if st, err = p.Ensure(ctx, lb); err != nil {
		t.Fatal(err)
	}
	if after := status(t, b); after.Reloads != before.Reloads {
		t.Errorf("adding the member reloaded HAProxy")
	}
	c := b.ClientHTTP(3 * time.Second)
	url := "http://" + st.VIPs[0]
	waitForCond(t, 10*time.Second, "the verified pool to answer", func() (bool, error) {
		a := send(t, c, http.MethodGet, url+"/ok", "", nil)
		return a.status == http.StatusOK && a.backend == "secure", nil
	})
	if !slices.ContainsFunc(st.Warnings, func(w string) bool { return strings.Contains(w, "pool "+san+": policy backendTLS.subjectAltNames") }) {
		t.Errorf("no warning for the subject alternative name of pool %s: %q", san, st.Warnings)
	}
	for path, want := range map[string]int{"/ok": 200, "/mismatch": 503, "/plain": 400, "/san": 400} {
		if a := send(t, c, http.MethodGet, url+path, "", nil); a.status != want {
			t.Errorf("%s: HTTP %d, want %d", path, a.status, want)
		}
	}
	n, err := lbmodel.Normalize(lb)
	if err != nil {
		t.Fatal(err)
	}
	n, _ = api.PolicyCapabilities().StripPolicies(n)
	if diff := cmp.Diff(n.Pools, listOne(t, p, name).Pools); diff != "" {
		t.Errorf("List reads the pools back (-applied +listed):\n%s", diff)
	}
}

// memberCert returns the certificate (PEM) the TLS member serves.
func memberCert(t *testing.T, m lbmodel.Member) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", net.JoinHostPort(m.IP, strconv.Itoa(int(m.Port))), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // reads the certificate it serves
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: conn.ConnectionState().PeerCertificates[0].Raw})
}

// TestProvider_retryTakesAFailedRequestToAnotherMember (the model
// directly: HTTPRoute's retry is of the experimental channel): a member
// that answers 503 has its requests retried, the last retry on another
// member, so that every request is answered 200; without the retry,
// round robin hands that member its share of 503s.
func TestProvider_retryTakesAFailedRequestToAnotherMember(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	members := startBackends(t, bs, "web", 2)
	bs.SetStatus(members[1].Port, "/", http.StatusServiceUnavailable)
	lb := l7Model("retry", members, nil)
	vip, _ := ensureUp(t, p, b, lb, 2)
	c := b.ClientHTTP(3 * time.Second)
	url := edgebed.URL(vip, 80)
	count := func() (ok, unavailable int) {
		for range 40 {
			if a := send(t, c, http.MethodGet, url, "", nil); a.status == http.StatusOK {
				ok++
			} else if a.status == http.StatusServiceUnavailable {
				unavailable++
			}
		}
		return ok, unavailable
	}
	if ok, bad := count(); bad == 0 {
		t.Fatalf("without retry: %d of 40 answered 200, %d 503: want web-1's share of 503s", ok, bad)
	}
	lb.Pools[0].Policy = &lbmodel.Policy{Retry: &lbmodel.Retry{Attempts: 2, Codes: []int32{503}}}
	ensureUp(t, p, b, lb, 2)
	ok, bad := count()
	t.Logf("retry on 503 (2 attempts): %d of 40 answered 200, %d 503", ok, bad)
	if ok != 40 {
		t.Fatalf("with retry: %d of 40 answered 200, %d 503; want every one 200", ok, bad)
	}
}
