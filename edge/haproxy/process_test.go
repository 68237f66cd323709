package haproxy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcess_reloadHandsTheListenersOver: the master starts the worker of
// a reload with -x sockpair@<fd>, its socket pair to the old worker, which
// hands the listening sockets over, so the edge's admin socket (and the
// host's, when attached) needs no "expose-fd listeners" for a reload that
// refuses no connection.
func TestProcess_reloadHandsTheListenersOver(t *testing.T) {
	dir := t.TempDir()
	r := Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), InvalidSocket: filepath.Join(dir, "500.sock"), Checks: DefaultChecks}, Proxies{})
	if strings.Contains(string(r.Text), "expose-fd") {
		t.Fatalf("the rendered admin socket hands out listening sockets:\n%s", r.Text)
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, r.Text, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Process{Bin: haproxyBin(t), ConfigFile: cfg, MasterSocket: filepath.Join(dir, "master.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	if err := p.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	procs, err := ShowProc(ctx, p.MasterSocket)
	if err != nil {
		t.Fatal(err)
	}
	worker := CurrentWorker(procs)
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(worker) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	i := slices.Index(args, "-x")
	if i < 0 || i+1 == len(args) || !strings.HasPrefix(args[i+1], "sockpair@") {
		t.Fatalf("the reloaded worker runs %q: want -x sockpair@<fd>, the master's socket pair that hands the listeners over", args)
	}
}
