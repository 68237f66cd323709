package cli

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/kubernetes"
)

func TestStartDaemon_registryHasTheRuntimeAndProcessMetrics(t *testing.T) {
	d := StartDaemon(context.Background(), "node", "n1")
	defer d.Stop()
	families, err := d.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"go_goroutines", "process_start_time_seconds"} {
		if !slices.Contains(names, want) {
			t.Errorf("the registry has no %s: %v", want, names)
		}
	}
	d.Stop()
	if d.Ctx.Err() == nil {
		t.Error("Stop left the daemon's context running")
	}
}

func TestKubeClient_setsTheRateLimitsAndRefusesAMissingKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, client, err := KubeClient(path, "test/1", 7, 9, kubernetes.NewForConfig)
	if err != nil || client == nil {
		t.Fatalf("KubeClient = %v, %v", client, err)
	}
	if cfg.QPS != 7 || cfg.Burst != 9 || cfg.UserAgent != "test/1" {
		t.Errorf("QPS %v, burst %d, user agent %q; want 7, 9, test/1", cfg.QPS, cfg.Burst, cfg.UserAgent)
	}
	var usage *UsageError
	if _, _, err := KubeClient(filepath.Join(t.TempDir(), "missing"), "test/1", 7, 9, kubernetes.NewForConfig); !errors.As(err, &usage) {
		t.Errorf("a missing kubeconfig: %v, want a UsageError", err)
	}
}

func TestDaemonServe_profilingOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		d := StartDaemon(context.Background())
		d.Profiling = on
		if err := d.Serve(addr, nil, "", nil); err != nil {
			d.Stop()
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + addr + "/debug/pprof/heap")
		d.Stop()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.StatusCode == http.StatusOK; got != on {
			t.Errorf("Profiling %v: /debug/pprof/heap answered %s", on, resp.Status)
		}
	}
}
