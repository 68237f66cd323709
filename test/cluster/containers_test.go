package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

func TestListenPort_followsTheMode(t *testing.T) {
	for _, tc := range []struct {
		env  []corev1.EnvVar
		want uint16
	}{
		{nil, 3000},
		{[]corev1.EnvVar{{Name: "HTTP_PORT", Value: "8080"}}, 8080},
		{[]corev1.EnvVar{{Name: "TCP_ECHO_SERVER", Value: "1"}}, 3000},
		{[]corev1.EnvVar{{Name: "TCP_ECHO_SERVER", Value: "1"}, {Name: "TCP_PORT", Value: "9000"}, {Name: "HTTP_PORT", Value: "1"}}, 9000},
	} {
		if got := listenPort(tc.env); got != tc.want {
			t.Errorf("listenPort(%v) = %d, want %d", tc.env, got, tc.want)
		}
	}
}
