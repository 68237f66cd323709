package cluster_test

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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/test/cluster"
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
