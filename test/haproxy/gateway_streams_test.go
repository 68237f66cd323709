package haproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// ProtoHeader is the header in which the backends of these tests say the
// HTTP version of the request they received.
const ProtoHeader = "X-Npl-Proto"

// grpcBackendHeader is the gRPC response header in which a gRPC backend
// names itself.
const grpcBackendHeader = "x-npl-backend"

// serveOn serves h on a listener of the bridge address (where the bed's
// pools find their members) until the test ends, and returns the member.
func serveOn(t *testing.T, ln net.Listener, serve func(net.Listener) error, stop func()) lbmodel.Member {
	t.Helper()
	go func() { _ = serve(ln) }()
	t.Cleanup(stop)
	return lbmodel.Member{IP: bridgeIP.String(), Port: int32(ln.Addr().(*net.TCPAddr).Port), Enabled: true}
}

func listenBridge(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(bridgeIP.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// nameHandler answers with the backend's name and the HTTP version it got.
func nameHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(edgebed.BackendHeader, name)
		w.Header().Set(ProtoHeader, r.Proto)
		_, _ = io.WriteString(w, name)
	})
}

// startTLSBackend starts an HTTPS backend named name serving a
// certificate for host: a client that reaches it through a passthrough
// listener sees that certificate.
func startTLSBackend(t *testing.T, name, host string) lbmodel.Member {
	t.Helper()
	certPEM, keyPEM := certFor(t, host)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln := tls.NewListener(listenBridge(t), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	srv := &http.Server{Handler: nameHandler(name), ReadHeaderTimeout: 5 * time.Second}
	return serveOn(t, ln, srv.Serve, func() { _ = srv.Close() })
}

// startH2CBackend starts an HTTP backend named name that speaks HTTP/2
// without TLS (prior knowledge) besides HTTP/1.1.
func startH2CBackend(t *testing.T, name string) lbmodel.Member {
	t.Helper()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: nameHandler(name), ReadHeaderTimeout: 5 * time.Second, Protocols: &protocols}
	return serveOn(t, listenBridge(t), srv.Serve, func() { _ = srv.Close() })
}

// startGRPCBackend starts a gRPC server named name with the health
// service; every answer names the server in a header.
func startGRPCBackend(t *testing.T, name string) lbmodel.Member {
	t.Helper()
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs(grpcBackendHeader, name))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return serveOn(t, listenBridge(t), srv.Serve, srv.Stop)
}

// startBannerBackend starts a TCP server that speaks first: it writes
// "hello <name>" to each connection and closes it.
func startBannerBackend(t *testing.T, name string) lbmodel.Member {
	t.Helper()
	ln := listenBridge(t)
	serve := func(ln net.Listener) error {
		for {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			_, _ = io.WriteString(c, "hello "+name+"\n")
			_ = c.Close()
		}
	}
	return serveOn(t, ln, serve, func() { _ = ln.Close() })
}

// tcpGet sends an HTTP/1.0 request over a connection from the client
// namespace to addr (through TLS with server name sni when sni is set)
// and returns the backend that answered and the DNS name of the
// certificate the peer served.
func tcpGet(ctx context.Context, b *edgebed.Bed, addr, sni string) (backend, cert string, err error) {
	conn, err := b.ClientDial(ctx, "tcp", addr, 3*time.Second)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if sni != "" {
		tc := tls.Client(conn, &tls.Config{ServerName: sni, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // the test reads which certificate is served.
		if err := tc.HandshakeContext(ctx); err != nil {
			return "", "", err
		}
		cert = tc.ConnectionState().PeerCertificates[0].DNSNames[0]
		conn = tc
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: "+sni+"\r\n\r\n"); err != nil {
		return "", cert, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", cert, err
	}
	defer resp.Body.Close()
	return resp.Header.Get(edgebed.BackendHeader), cert, nil
}

// TestProvider_gatewayStreamsDataPlane: a Gateway's load balancer with a
// TCP listener (members weighted 70/30), a passthrough TLS listener that
// routes two hosts (one a wildcard) by SNI on one port, a terminating TLS
// listener, and gRPC and h2c pools behind HTTP and HTTPS listeners, served
// by the real HAProxy behind a VIP. List returns exactly the applied
// model; a weight change of the TCP listener needs no reload.
func TestProvider_gatewayStreamsDataPlane(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	name := testCluster + "--gw-ns-streams-GW"
	pa, pOne, pTwo, pGRPC, pH2C, pBanner := name+"-a", name+"-one", name+"-two", name+"-grpc", name+"-h2c", name+"-banner"
	tcpPool := lbmodel.PoolName(name, lbmodel.TCP, 9000)
	weighted := startBackends(t, bs, "w", 2)
	weighted[0].Weight, weighted[1].Weight = 70, 30
	tCert, tKey := certFor(t, "t.example")
	webCert, webKey := certFor(t, "web.example")
	http2 := []int32{80, 443}
	lb := &lbmodel.LoadBalancer{Name: name, Gateway: "ns/streams", Kind: lbmodel.L7,
		Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP},
			{Port: 443, Protocol: lbmodel.HTTPS},
			{Port: 9000, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: tcpPool, Members: weighted}},
			{Port: 8883, Protocol: lbmodel.TLS, SNI: []lbmodel.SNIRoute{{Host: "one.example", Pool: pOne}, {Host: "*.two.example", Pool: pTwo}}},
			{Port: 9443, Protocol: lbmodel.TLS, Terminate: true, SNI: []lbmodel.SNIRoute{{Host: "t.example", Pool: pa},
				{Host: "banner.example", Pool: pBanner}}},
		},
		Pools: []lbmodel.Pool{
			{Name: pa, Members: startBackends(t, bs, "a", 1)},
			{Name: pBanner, Members: []lbmodel.Member{startBannerBackend(t, "banner")}},
			{Name: pOne, Members: []lbmodel.Member{startTLSBackend(t, "one", "one.example")}},
			{Name: pTwo, Members: []lbmodel.Member{startTLSBackend(t, "two", "two.example")}},
			{Name: pGRPC, AppProtocol: lbmodel.AppProtocolH2C, Members: []lbmodel.Member{startGRPCBackend(t, "g-0")}},
			{Name: pH2C, AppProtocol: lbmodel.AppProtocolH2C, Members: []lbmodel.Member{startH2CBackend(t, "h-0")}},
		},
		HTTP: &lbmodel.HTTPRoutes{
			Rules: []lbmodel.Rule{
				{Path: "/", PathType: lbmodel.PathPrefix, Pool: pa, Ports: http2},
				// GRPCRoute's service match on a hostname: HTTP/2's
				// :authority is the host rules test.
				{Host: "grpc.example", Path: "/grpc.health.v1.Health", PathType: lbmodel.PathPrefix, Pool: pGRPC, Ports: http2},
				{Path: "/h2c", PathType: lbmodel.PathExact, Pool: pH2C, Ports: http2},
			},
			TLS: []lbmodel.TLSCert{
				{Secret: "ns/t", Hosts: []string{"t.example"}, Ports: []int32{9443}, CertPEM: tCert, KeyPEM: tKey,
					Fingerprint: lbmodel.CertFingerprint(tCert)},
				{Secret: "ns/web", Hosts: []string{"web.example"}, Ports: []int32{443}, CertPEM: webCert, KeyPEM: webKey,
					Fingerprint: lbmodel.CertFingerprint(webCert)},
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
	addr := func(port int) string { return net.JoinHostPort(vip, strconv.Itoa(port)) }

	// TCP: each connection goes to one member, 70/30 by weight.
	counts := map[string]int{}
	for range 300 {
		backend, _, err := tcpGet(ctx, b, addr(9000), "")
		if err != nil {
			t.Fatalf("TCP :9000: %v", err)
		}
		counts[backend]++
	}
	t.Logf("TCP weights 70/30: %v of 300 connections", counts)
	if counts["w-0"] < 180 || counts["w-0"] > 240 || counts["w-0"]+counts["w-1"] != 300 {
		t.Errorf("TCP weights 70/30: %v of 300, want w-0 at 210±30 and nothing else", counts)
	}

	// TLS passthrough: the SNI picks the pool on one port, and the client
	// sees the backend's own certificate. A name no route takes is
	// refused, as a wildcard's bare suffix is.
	for _, tc := range []struct{ sni, backend, cert string }{
		{"one.example", "one", "one.example"},
		{"a.two.example", "two", "two.example"},
		{"a.b.two.example", "two", "two.example"},
		{"two.example", "", ""},
		{"other.example", "", ""},
	} {
		backend, cert, err := tcpGet(ctx, b, addr(8883), tc.sni)
		switch {
		case tc.backend == "" && err == nil:
			t.Errorf("TLS :8883 SNI %s: answered by %q with the certificate of %q, want the connection refused", tc.sni, backend, cert)
		case tc.backend != "" && (err != nil || backend != tc.backend || cert != tc.cert):
			t.Errorf("TLS :8883 SNI %s: backend %q certificate %q (%v), want %q with the backend's certificate %q", tc.sni, backend, cert, err, tc.backend, tc.cert)
		}
	}

	// TLS terminated with the port's certificate; the pool gets plain TCP.
	if backend, cert, err := tcpGet(ctx, b, addr(9443), "t.example"); err != nil || backend != "a-0" || cert != "t.example" {
		t.Errorf("TLS :9443 SNI t.example: backend %q certificate %q (%v), want a-0 behind the certificate of t.example", backend, cert, err)
	}
	// A member that speaks first is heard before the client says anything.
	if conn, err := b.ClientDial(ctx, "tcp", addr(9443), 3*time.Second); err != nil {
		t.Errorf("TLS :9443: %v", err)
	} else {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Client(conn, &tls.Config{ServerName: "banner.example", InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // a self-signed test certificate.
		line, err := bufio.NewReader(tc).ReadString('\n')
		_ = tc.Close()
		if err != nil || line != "hello banner\n" {
			t.Errorf("TLS :9443 SNI banner.example: read %q (%v), want the member's banner", line, err)
		}
	}
	if backend, _, err := tcpGet(ctx, b, addr(9443), "u.example"); err == nil {
		t.Errorf("TLS :9443 SNI u.example: answered by %q, want the connection closed (no route)", backend)
	}

	// gRPC: over clear-text HTTP/2 (prior knowledge) on :80, over TLS
	// (ALPN h2) on :443; the h2c pool speaks HTTP/2 to its member.
	dial := func(ctx context.Context, a string) (net.Conn, error) {
		return b.ClientDial(ctx, "tcp", a, 3*time.Second)
	}
	for _, tc := range []struct {
		port  int
		creds credentials.TransportCredentials
	}{
		{80, insecure.NewCredentials()},
		{443, credentials.NewTLS(&tls.Config{ServerName: "grpc.example", InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})}, //nolint:gosec // a self-signed test certificate.
	} {
		conn, err := grpc.NewClient("passthrough:///"+addr(tc.port), grpc.WithContextDialer(dial), grpc.WithTransportCredentials(tc.creds),
			grpc.WithAuthority("grpc.example"))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var md metadata.MD
		resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		cancel()
		_ = conn.Close()
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || fmt.Sprint(md.Get(grpcBackendHeader)) != "[g-0]" {
			t.Errorf("gRPC Health/Check on :%d: %v, %v, backend %v; want SERVING from g-0", tc.port, resp, err, md.Get(grpcBackendHeader))
		}
	}
	// An HTTP/1.1 client reaches the h2c pool over HTTP/2, and the other
	// pools as before; HTTPS offers HTTP/2 to the clients that ask.
	c := b.ClientHTTP(3 * time.Second)
	if a := send(t, c, "GET", "http://"+addr(80)+"/h2c", "web.example", nil); a.backend != "h-0" || a.header.Get(ProtoHeader) != "HTTP/2.0" {
		t.Errorf("GET :80/h2c: from %q over %q, want h-0 over HTTP/2.0", a.backend, a.header.Get(ProtoHeader))
	}
	if a := send(t, c, "GET", "http://"+addr(80)+"/x", "web.example", nil); a.status != http.StatusOK || a.backend != "a-0" {
		t.Errorf("GET :80/x: HTTP %d from %q, want 200 from a-0", a.status, a.backend)
	}
	h2 := b.ClientHTTP(3 * time.Second)
	h2.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	h2.Transport.(*http.Transport).TLSClientConfig = &tls.Config{ServerName: "web.example", InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // a self-signed test certificate.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr(443)+"/h2c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := h2.Do(req); err != nil {
		t.Errorf("HTTPS :443/h2c: %v", err)
	} else {
		_ = resp.Body.Close()
		if resp.Proto != "HTTP/2.0" || resp.Header.Get(edgebed.BackendHeader) != "h-0" {
			t.Errorf("HTTPS :443/h2c: %s from %q, want HTTP/2.0 from h-0", resp.Proto, resp.Header.Get(edgebed.BackendHeader))
		}
	}

	before := listedAsAppliedAndIdempotent(ctx, t, b, p, lb, st.VIPs)

	// The TCP listener's weights change through the runtime API.
	reweighted := lb.Clone()
	reweighted.Listeners[2].Pool.Members[0].Weight, reweighted.Listeners[2].Pool.Members[1].Weight = 10, 0
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
	got := listOne(t, p, name)
	if diff := cmp.Diff(rn.Listeners, got.Listeners); diff != "" {
		t.Errorf("listeners after the weight change (-applied +listed):\n%s", diff)
	}

	// A restarted edge serves it all again from its saved state, the
	// terminating listener's key read back from its file.
	b.StopEdge()
	if err := b.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, listOne(t, p, name)); diff != "" {
		t.Errorf("List after the edge restarted (-before +after):\n%s", diff)
	}
	if backend, cert, err := tcpGet(ctx, b, addr(9443), "t.example"); err != nil || backend != "a-0" || cert != "t.example" {
		t.Errorf("TLS :9443 after the edge restarted: backend %q certificate %q (%v)", backend, cert, err)
	}
	if backend, cert, err := tcpGet(ctx, b, addr(8883), "one.example"); err != nil || backend != "one" || cert != "one.example" {
		t.Errorf("TLS :8883 after the edge restarted: backend %q certificate %q (%v)", backend, cert, err)
	}

	if err := p.Delete(ctx, name, lbmodel.L7); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, _, err := tcpGet(ctx, b, addr(9000), ""); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("TCP :9000 after Delete: %v, want the connection refused", err)
	}
}
