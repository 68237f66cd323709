package edgebed

import (
	"context"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// TestMain runs the tests inside private namespaces, where a bed's
// namespaces and links go; it needs root.
func TestMain(m *testing.M) { cluster.RunMain(m) }

// TestStopEdge_returnsOnceEveryProcessOfTheEdgeIsGone: npl-edge that does
// not stop in time (stopped by SIGSTOP here, as a starved one on a loaded
// machine may be) is killed after its bound; HAProxy, which it started,
// then exits on its own (its parent-death signal), and StopEdge returns
// only once it has, as Close does: a bed, and the demo on it, leaves
// nothing running.
func TestStopEdge_returnsOnceEveryProcessOfTheEdgeIsGone(t *testing.T) {
	saved := edgeStopTimeout
	edgeStopTimeout = time.Second
	t.Cleanup(func() { edgeStopTimeout = saved })
	bin, err := cluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := Start(ctx, t.TempDir(), Options{BridgeIP: netip.MustParseAddr("198.18.250.1"), EdgeIP: netip.MustParseAddr("198.18.250.2"),
		ClientIP: netip.MustParseAddr("198.18.250.3"), BinDir: bin, Name: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := b.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	// A listener: a reload, so an old worker generation may be there too.
	p, err := b.OpenProvider(ctx, "c1", b.ProviderSection("c1"))
	if err != nil {
		t.Fatal(err)
	}
	name := lbmodel.LoadBalancerName("c1", "ns", "svc")
	if _, err := p.Ensure(ctx, &lbmodel.LoadBalancer{Name: name, Service: "ns/svc", Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 80), Members: []lbmodel.Member{{IP: "198.18.250.1", Port: 9, Enabled: true}}}}}}); err != nil {
		t.Fatal(err)
	}
	if running := processesWith(b.Edges[0].marker(edgeProcesses)); len(running) < 3 {
		t.Fatalf("processes of the edge %v; want npl-edge, HAProxy's master and a worker", running)
	}
	if err := syscall.Kill(b.Edges[0].edgeCmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b.StopEdge()
	if left := LeftBehind(); len(left) > 0 {
		t.Errorf("processes of the edge still run after StopEdge: %v", left)
	}
}
