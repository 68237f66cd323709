package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

func TestImageName_dropsTagAndDigest(t *testing.T) {
	for in, want := range map[string]string{
		"registry.k8s.io/gateway-api/echo-basic:v1.5.1":         EchoBasicImage,
		"registry.k8s.io/gateway-api/echo-basic":                EchoBasicImage,
		"registry.k8s.io/gateway-api/echo-basic@sha256:abcd":    EchoBasicImage,
		"registry.k8s.io/gateway-api/echo-basic:v1@sha256:abcd": EchoBasicImage,
		"localhost:5000/echo":                                   "localhost:5000/echo",
		"localhost:5000/echo:v2":                                "localhost:5000/echo",
	} {
		if got := imageName(in); got != want {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpandVars_likeAKubelet(t *testing.T) {
	defined := map[string]string{"POD_NAME": "p1", "NS": "ns"}
	for in, want := range map[string]string{
		"$(POD_NAME).$(NS)": "p1.ns",
		"$(UNKNOWN)":        "$(UNKNOWN)",
		"$$(POD_NAME)":      "$(POD_NAME)",
		"plain":             "plain",
	} {
		if got := expandVars(in, defined); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRewriteMountPaths_pointsAtTheVolumeFiles(t *testing.T) {
	env := []corev1.EnvVar{
		{Name: "CERT", Value: "/etc/secret-volume/crt"},
		{Name: "DIR", Value: "/etc/secret-volume"},
		{Name: "SUB", Value: "/etc/conf/x"},
		{Name: "OTHER", Value: "/etc/secret-volumes/crt"},
	}
	mounts := []corev1.VolumeMount{
		{Name: "secret-volume", MountPath: "/etc/secret-volume"},
		{Name: "conf", MountPath: "/etc/conf", SubPath: "inner"},
	}
	got := rewriteMountPaths(env, mounts, map[string]string{"secret-volume": "/tmp/p/volumes/secret-volume", "conf": "/tmp/p/volumes/conf"})
	want := []corev1.EnvVar{
		{Name: "CERT", Value: "/tmp/p/volumes/secret-volume/crt"},
		{Name: "DIR", Value: "/tmp/p/volumes/secret-volume"},
		{Name: "SUB", Value: "/tmp/p/volumes/conf/inner/x"},
		{Name: "OTHER", Value: "/etc/secret-volumes/crt"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCheckEchoBasic_missingBinarySaysMakeTools(t *testing.T) {
	dir := t.TempDir()
	err := CheckEchoBasic(dir)
	if !errors.Is(err, ErrNoEchoBasic) || !strings.Contains(err.Error(), "run 'make tools'") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("CheckEchoBasic of an empty dir = %v, want one line saying make tools", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "echo-basic"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckEchoBasic(dir); err != nil {
		t.Fatalf("CheckEchoBasic with the binary = %v", err)
	}
}

func TestReadyProbes_followTheModeAsEchoBasicReadsIt(t *testing.T) {
	env := func(kv ...string) []corev1.EnvVar {
		var out []corev1.EnvVar
		for i := 0; i < len(kv); i += 2 {
			out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tcp := func(port uint16) probe { return probe{"tcp", port} }
	for _, tc := range []struct {
		env  []corev1.EnvVar
		want []probe
	}{
		{nil, []probe{tcp(3000), tcp(3001)}},
		{env("HTTP_PORT", "8080", "H2C_PORT", "8081"), []probe{tcp(8080), tcp(8081)}},
		{env("TLS_SERVER_CERT", "c", "TLS_SERVER_PRIVKEY", "k"), []probe{tcp(3000), tcp(3001), tcp(8443)}},
		{env("TLS_SERVER_CERT", "c", "TLS_SERVER_PRIV_KEY", "k"), []probe{tcp(3000), tcp(3001)}}, // HTTP reads PRIVKEY
		{env("TCP_ECHO_SERVER", "1"), []probe{tcp(3000)}},
		{env("TCP_ECHO_SERVER", "1", "TCP_PORT", "9000", "HTTP_PORT", "1"), []probe{tcp(9000)}},
		{env("TCP_ECHO_SERVER", "1", "TLS_SERVER_CERT", "c", "TLS_SERVER_PRIV_KEY", "k", "TLS_PORT", "9443"), []probe{tcp(3000), tcp(9443)}},
		{env("GRPC_ECHO_SERVER", "1", "TCP_ECHO_SERVER", "1", "TCP_PORT", "9000"), []probe{tcp(3000)}},
		{env("GRPC_ECHO_SERVER", "1", "HTTP_PORT", "9001", "TLS_SERVER_CERT", "c", "TLS_SERVER_PRIV_KEY", "k"), []probe{tcp(9001), tcp(8443)}},
		{env("UDP_ECHO_SERVER", "1"), []probe{{"udp", 8080}}},
		{env("UDP_ECHO_SERVER", "1", "UDP_PORT", "5353", "HTTP_PORT", "1"), []probe{{"udp", 5353}}},
		{env("UDP_ECHO_SERVER", "1", "TCP_ECHO_SERVER", "1"), []probe{tcp(3000)}},
	} {
		if diff := cmp.Diff(tc.want, readyProbes(tc.env), cmp.AllowUnexported(probe{})); diff != "" {
			t.Errorf("readyProbes(%v) (-want +got):\n%s", tc.env, diff)
		}
	}
}

func TestAnswerWhoAmI_answersAQueriesWithTheAsker(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(answerWhoAmI)}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { pc.Close() })
	for _, tc := range []struct {
		qtype uint16
		want  string
	}{
		{dns.TypeA, "127.0.0.1"},
		{dns.TypeAAAA, ""}, // an IPv4 asker: no AAAA answer
		{dns.TypeTXT, ""},
	} {
		q := new(dns.Msg)
		q.SetQuestion("foo.bar.com.", tc.qtype)
		r, err := dns.Exchange(q, pc.LocalAddr().String())
		if err != nil {
			t.Fatalf("query %s: %v", dns.TypeToString[tc.qtype], err)
		}
		if r.Rcode != dns.RcodeSuccess || !r.Authoritative || r.Id != q.Id {
			t.Errorf("query %s: rcode %s, authoritative %t, id %d (want NOERROR, true, %d)", dns.TypeToString[tc.qtype], dns.RcodeToString[r.Rcode], r.Authoritative, r.Id, q.Id)
		}
		got := ""
		if len(r.Answer) == 1 {
			if a, ok := r.Answer[0].(*dns.A); ok && a.Hdr.Name == "foo.bar.com." {
				got = a.A.String()
			}
		} else if len(r.Answer) > 1 {
			got = fmt.Sprint(r.Answer)
		}
		if got != tc.want {
			t.Errorf("query %s: answer %q, want %q", dns.TypeToString[tc.qtype], got, tc.want)
		}
	}
}
