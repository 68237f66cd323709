package cluster_test

import (
	"bufio"
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
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	grpcecho "sigs.k8s.io/gateway-api/conformance/echo-basic/grpcechoserver"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// echoReply is the part of echo-basic's JSON answer the tests read.
type echoReply struct {
	Path      string `json:"path"`
	Host      string `json:"host"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
}

// testEchoBasic runs a Pod of the conformance backend image as the suite's
// manifests write it: env from values and fieldRefs, a TLS certificate from
// a secret volume, no containerPorts.
func testEchoBasic(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	binDir, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CheckEchoBasic(binDir); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(ctx, t, c, "echobasic")
	certPEM, keyPEM := selfSigned(t, "echo.example.com")
	if _, err := c.Client().CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo-basic", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "echo",
				Image: cluster.EchoBasicImage + ":v1.5.1",
				Env: []corev1.EnvVar{
					fieldEnv("POD_NAME", "metadata.name"),
					fieldEnv("NAMESPACE", "metadata.namespace"),
					{Name: "SERVICE_NAME", Value: "svc-of-$(POD_NAME)"},
					{Name: "TLS_SERVER_CERT", Value: "/etc/secret-volume/crt"},
					{Name: "TLS_SERVER_PRIVKEY", Value: "/etc/secret-volume/key"},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "secret-volume", MountPath: "/etc/secret-volume"}},
			}},
			Volumes: []corev1.Volume{{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "tls",
				Items:      []corev1.KeyToPath{{Key: "tls.crt", Path: "crt"}, {Key: "tls.key", Path: "key"}},
			}}}},
		},
	}
	createPod(ctx, t, c, pod)
	p := waitPod(ctx, t, c, ns, pod.Name, "Ready", isReady)
	ip := netip.MustParseAddr(p.Status.PodIP)

	// Ready means serving: no retry here.
	got := getEcho(t, &http.Client{Timeout: 5 * time.Second}, fmt.Sprintf("http://%s/some/path", netip.AddrPortFrom(ip, 3000)))
	want := echoReply{Path: "/some/path", Host: netip.AddrPortFrom(ip, 3000).String(), Namespace: ns, Pod: pod.Name}
	if got != want {
		t.Errorf("HTTP answer %+v, want %+v", got, want)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "echo.example.com", MinVersion: tls.VersionTLS12},
	}}
	if got := getEcho(t, tlsClient, fmt.Sprintf("https://%s/tls", netip.AddrPortFrom(ip, 8443))); got.Pod != pod.Name || got.Path != "/tls" {
		t.Errorf("HTTPS answer %+v, want pod %s and path /tls (certificate from the secret volume)", got, pod.Name)
	}
	env := echoBasicEnv(t, binDir, pod.Name)
	if env == nil {
		t.Fatalf("no echo-basic process with POD_NAME=%s", pod.Name)
	}
	if env["SERVICE_NAME"] != "svc-of-echo-basic" {
		t.Errorf("SERVICE_NAME=%q, want $(POD_NAME) expanded: svc-of-echo-basic", env["SERVICE_NAME"])
	}

	if err := c.Client().CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForPods(ctx, ns, nil, 0, false); err != nil {
		t.Fatal(err)
	}
	if env := echoBasicEnv(t, binDir, pod.Name); env != nil {
		t.Errorf("the echo-basic process of the deleted Pod still runs")
	}
}

func getEcho(t *testing.T, client *http.Client, url string) echoReply {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var r echoReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
	return r
}

// echoBasicEnv returns the environment of the running echo-basic process of
// the Pod named pod, or nil if none runs.
func echoBasicEnv(t *testing.T, binDir, pod string) map[string]string {
	t.Helper()
	bin, err := filepath.EvalSymlinks(filepath.Join(binDir, "echo-basic"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err != nil || exe != bin {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		env := map[string]string{}
		for _, kv := range strings.Split(string(b), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		if env["POD_NAME"] == pod {
			return env
		}
	}
	return nil
}

// selfSigned returns a self-signed certificate for host and its key, PEM.
func selfSigned(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		IPAddresses:  []net.IP{},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// testSuiteBackendModes runs Pods as the suite's TCPRoute, UDPRoute and
// GRPCRoute manifests write them (echo-basic with TCP_ECHO_SERVER,
// UDP_ECHO_SERVER or GRPC_ECHO_SERVER, and the CoreDNS image) and talks to
// each as the suite does. Ready means serving: no retries.
func testSuiteBackendModes(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	binDir, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CheckEchoBasic(binDir); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(ctx, t, c, "modes")
	// The TCP echo's TLS port, as tlsroute-simple-same-namespace reaches it.
	certPEM, keyPEM := selfSigned(t, "abc.example.com")
	if _, err := c.Client().CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podEnv := func(mode string) []corev1.EnvVar {
		return []corev1.EnvVar{
			{Name: mode, Value: "1"},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		}
	}
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "tcp-echo", Namespace: ns}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "echo", Image: cluster.EchoBasicImage + ":v1.5.1",
				Env: append(podEnv("TCP_ECHO_SERVER"),
					corev1.EnvVar{Name: "TLS_SERVER_CERT", Value: "/etc/secret-volume/crt"},
					corev1.EnvVar{Name: "TLS_SERVER_PRIV_KEY", Value: "/etc/secret-volume/key"}),
				VolumeMounts: []corev1.VolumeMount{{Name: "secret-volume", MountPath: "/etc/secret-volume"}},
			}},
			Volumes: []corev1.Volume{{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "tls",
				Items:      []corev1.KeyToPath{{Key: "tls.crt", Path: "crt"}, {Key: "tls.key", Path: "key"}},
			}}}},
		}},
		// The declared UDP port is echo-basic's, not a built-in echo's.
		{ObjectMeta: metav1.ObjectMeta{Name: "udp-echo", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "echo", Image: cluster.EchoBasicImage + ":v1.6.0-dev.2", Env: podEnv("UDP_ECHO_SERVER"),
			Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolUDP}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "grpc-echo", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "echo", Image: cluster.EchoBasicImage + ":v1.5.1", Env: podEnv("GRPC_ECHO_SERVER")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "coredns", Image: cluster.CoreDNSImage + ":v1.12.2", Args: []string{"-conf", "/root/Corefile"}}}}},
	}
	ips := map[string]netip.Addr{}
	for _, p := range pods {
		createPod(ctx, t, c, p)
	}
	for _, p := range pods {
		ips[p.Name] = netip.MustParseAddr(waitPod(ctx, t, c, ns, p.Name, "Ready", isReady).Status.PodIP)
	}

	t.Run("TCP echo answers TEST with its Pod, in clear on 3000 and over TLS on 8443", func(t *testing.T) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(certPEM)
		for _, tc := range []struct {
			port   uint16
			tlsCfg *tls.Config
		}{
			{3000, nil},
			{8443, &tls.Config{RootCAs: roots, ServerName: "abc.example.com", MinVersion: tls.VersionTLS12}},
		} {
			addr := netip.AddrPortFrom(ips["tcp-echo"], tc.port).String()
			var conn net.Conn
			var err error
			if tc.tlsCfg == nil {
				conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
			} else {
				conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc.tlsCfg)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			r := bufio.NewReader(conn)
			if welcome, err := r.ReadString('\n'); err != nil || !strings.Contains(welcome, "TCP Server") {
				t.Fatalf("port %d: welcome %q, %v", tc.port, welcome, err)
			}
			if _, err := conn.Write([]byte("TEST\n")); err != nil {
				t.Fatal(err)
			}
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Pod   string `json:"pod"`
				IsTLS bool   `json:"isTLS"`
			}
			if err := json.Unmarshal([]byte(line), &got); err != nil || got.Pod != "tcp-echo" || got.IsTLS != (tc.tlsCfg != nil) {
				t.Errorf("port %d: TEST answer %q (%v), want pod tcp-echo, isTLS %t", tc.port, line, err, tc.tlsCfg != nil)
			}
		}
	})
	t.Run("UDP echo answers a datagram with its Pod", func(t *testing.T) {
		conn, err := net.Dial("udp", netip.AddrPortFrom(ips["udp-echo"], 8080).String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Request string `json:"request"`
			Pod     string `json:"pod"`
		}
		if err := json.Unmarshal(buf[:n], &got); err != nil || got.Pod != "udp-echo" || got.Request != "hello" {
			t.Errorf("answer %q (%v), want pod udp-echo and request hello", buf[:n], err)
		}
	})
	t.Run("gRPC echo answers Echo with its Pod", func(t *testing.T) {
		cc, err := grpc.NewClient(netip.AddrPortFrom(ips["grpc-echo"], 3000).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := grpcecho.NewGrpcEchoClient(cc).Echo(rctx, &grpcecho.EchoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if pod := resp.GetAssertions().GetContext().GetPod(); pod != "grpc-echo" {
			t.Errorf("Echo answered from pod %q, want grpc-echo", pod)
		}
	})
	t.Run("the CoreDNS image answers an A query over UDP and TCP", func(t *testing.T) {
		for _, network := range []string{"udp", "tcp"} {
			q := new(dns.Msg)
			q.SetQuestion("foo.bar.com.", dns.TypeA)
			r, _, err := (&dns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(q, netip.AddrPortFrom(ips["coredns"], 53).String())
			if err != nil {
				t.Fatalf("%s: %v", network, err)
			}
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("%s: answer %v", network, r)
			}
			if a, ok := r.Answer[0].(*dns.A); !ok || a.A.IsUnspecified() {
				t.Errorf("%s: answer %v, want an A record", network, r.Answer[0])
			}
		}
	})
}
