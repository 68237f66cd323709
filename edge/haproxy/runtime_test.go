package haproxy

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
)

// startHAProxy runs a real HAProxy with one empty backend, b1, that listens
// on nothing but its admin socket, and returns the socket's path. It is
// killed (by its PID) when the test ends.
func startHAProxy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	text := "global\n    stats socket " + sock + " mode 600 level admin\n" +
		"defaults\n    mode tcp\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\n" +
		"backend b1\n    balance roundrobin\n"
	startHAProxyWith(t, dir, []byte(text))
	return sock
}

// startHAProxyWith runs a real HAProxy on the configuration text, whose
// admin socket is dir/admin.sock, until the test ends.
func startHAProxyWith(t *testing.T, dir string, text []byte) {
	t.Helper()
	bin := haproxyBin(t)
	sock := filepath.Join(dir, "admin.sock")
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, text, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", cfg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := Command(context.Background(), sock, "show info"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("HAProxy's admin socket did not answer within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunChain_addsAnEnabledServerInOneRoundTrip(t *testing.T) {
	sock := startHAProxy(t)
	ctx := context.Background()
	add := []string{"add server b1/127.0.0.1_9 127.0.0.1:9 " + DefaultChecks.Options(), "enable health b1/127.0.0.1_9", "enable server b1/127.0.0.1_9"}
	if err := RunChain(ctx, sock, add, "New server registered"); err != nil {
		t.Fatalf("RunChain(add, enable health, enable server) = %v", err)
	}
	states, err := ShowServersState(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].Name != "127.0.0.1_9" || !states[0].Enabled() {
		t.Fatalf("servers after the chain: %+v, want 127.0.0.1_9 enabled", states)
	}

	// A command of the chain that fails fails the chain, with HAProxy's
	// answer.
	err = RunChain(ctx, sock, add, "New server registered")
	var re *RuntimeError
	if !errors.As(err, &re) || !strings.Contains(re.Answer, "Already exists") {
		t.Fatalf("RunChain(add an existing server) = %v, want a RuntimeError with HAProxy's answer", err)
	}
	err = RunChain(ctx, sock, []string{"enable health b1/127.0.0.1_9", "enable server b1/nosuch"})
	if !errors.As(err, &re) || !strings.Contains(re.Answer, "No such server") {
		t.Fatalf("RunChain(enable a missing server) = %v, want a RuntimeError with HAProxy's answer", err)
	}
}

// TestShowServersState_readsTheInvalidServer: a backend's invalid server,
// added at runtime on the invalid frontend's unix socket, is read back by
// name and weight, without an address; its weight changes at runtime.
func TestShowServersState_readsTheInvalidServer(t *testing.T) {
	sock := startHAProxy(t)
	ctx := context.Background()
	g := Globals{InvalidSocket: filepath.Join(filepath.Dir(sock), "500.sock")}
	srv := "b1/" + InvalidServer
	if err := RunChain(ctx, sock, []string{"add server " + srv + " " + g.InvalidServerArgs(7), "enable server " + srv}, "New server registered"); err != nil {
		t.Fatalf("add the invalid server: %v", err)
	}
	if err := Run(ctx, sock, "set server "+srv+" weight 9"); err != nil {
		t.Fatalf("set its weight: %v", err)
	}
	states, err := ShowServersState(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].Name != InvalidServer || states[0].IP.IsValid() || states[0].Port != 0 ||
		states[0].Weight != 9 || !states[0].Enabled() {
		t.Fatalf("servers %+v, want %s of weight 9, enabled, without an address", states, InvalidServer)
	}
}

// TestServerArgs_aRuntimeServerTakesThePolicysKeywords: every backend of
// the sample, each with its policy (source, cookie and header persistence,
// hashes, checks, slow start, connection caps, TLS to the members),
// accepts a member added at runtime with the keywords its configured
// servers have (HAProxy 2.6 refuses some server keywords there, "cookie"
// among them, and "add server" in a backend of a static algorithm), and
// the dynamic cookie command of a cookie backend.
func TestServerArgs_aRuntimeServerTakesThePolicysKeywords(t *testing.T) {
	dir := t.TempDir()
	px := sampleWithCertsIn(t, dir)
	// The backends alone: the frontends' VIPs are not local here.
	r := Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), Checks: DefaultChecks}, Proxies{Backends: px.Backends})
	startHAProxyWith(t, dir, r.Text)
	ctx := context.Background()
	sock := filepath.Join(dir, "admin.sock")
	cookies := 0
	for _, b := range px.Backends {
		m := lbmodel.Member{IP: "127.0.0.1", Port: 9, Enabled: true, Weight: 5}
		srv := b.Name + "/" + ServerName(m)
		cmds := []string{"add server " + srv + " " + b.ServerArgs(m, DefaultChecks), "enable health " + srv, "enable server " + srv}
		if c := b.DynamicCookieCommand(); c != "" {
			cmds = append(cmds, c)
			cookies++
		}
		if err := RunChain(ctx, sock, cmds, "New server registered"); err != nil {
			t.Errorf("backend %s: %v", b.Name, err)
		}
	}
	if cookies == 0 {
		t.Error("no backend of the sample has cookie persistence")
	}
	states, err := ShowServersState(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	added := 0
	for _, s := range states {
		if s.Name == "127.0.0.1_9" && s.Weight == 5 {
			added++
		}
	}
	if added != len(px.Backends) {
		t.Errorf("%d of %d backends hold the runtime server: %+v", added, len(px.Backends), states)
	}
}

// haproxyBin is the haproxy executable; without one the test fails, saying
// how to get it.
func haproxyBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("haproxy not found: run make deps (apt-get install haproxy)")
	}
	return bin
}
