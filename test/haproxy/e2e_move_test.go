package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// keepAlive is one HTTP/1.1 connection from the client namespace through
// the VIP, kept open between requests: HAProxy balances it once, so every
// request on it goes to the member it picked first.
type keepAlive struct {
	conn   io.ReadWriteCloser
	reader *bufio.Reader
	url    string
}

func openKeepAlive(ctx context.Context, b *edgebed.Bed, rawURL string) (*keepAlive, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	conn, err := b.ClientDial(ctx, "tcp", u.Host, 3*time.Second)
	if err != nil {
		return nil, err
	}
	return &keepAlive{conn: conn, reader: bufio.NewReader(conn), url: rawURL}, nil
}

// get sends one request on the connection and returns the answer's body.
func (k *keepAlive) get() (string, error) {
	req, err := http.NewRequest(http.MethodGet, k.url, nil)
	if err != nil {
		return "", err
	}
	if err := req.Write(k.conn); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(k.reader, req)
	if err != nil {
		return "", err
	}
	if resp.Close {
		// The connection would not carry the next request.
		defer resp.Body.Close()
		return "", errors.New("the answer closes the connection")
	}
	return stack.Answer(resp)
}

// TestEndToEnd_movedMemberDrainsItsOpenConnections: npl-agent restarted
// with a port range that does not hold a Pod's node port publishes the Pod
// on a new one and keeps the old rule for its retired-port grace; npl-lbsync
// (drainSeconds 10) then drains the old member on HAProxy instead of
// removing it. As HAProxy and the traffic show it:
//   - a keep-alive connection opened through the VIP before the move still
//     answers after it (a removed member's sessions would be shut);
//   - new requests all go to the new member, none to the draining one;
//   - the old member is removed after drainSeconds, without a reload.
func TestEndToEnd_movedMemberDrainsItsOpenConnections(t *testing.T) {
	c, b := clusterBed(t)
	name := "e2e-haproxy-move"
	const drain = 10 * time.Second
	startLBSyncTimed(t, c, b, name, "npl-lbsync-"+name, false, time.Minute, drain)
	client := c.Client()
	ctx := context.Background()
	ns := c.TestNamespace(t)
	vipURL := serviceVIP(t, client, b, ns, name, webDeployment(ns, "web", 1))
	pool := lbmodel.PoolName(lbmodel.LoadBalancerName(name, ns, "web"), lbmodel.TCP, 80)
	e := b.Edges[0]

	pods, err := readyPods(ctx, client, ns, "web")
	if err != nil || len(pods) != 1 {
		t.Fatalf("ready Pods %v (%v), want one", pods, err)
	}
	pod := pods[0]
	p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := contract.Parse(p.Annotations[contract.PodKey])
	if err != nil || len(entries) != 1 {
		t.Fatalf("annotation %q (%v), want one entry", p.Annotations[contract.PodKey], err)
	}
	oldServer, err := podServer(ctx, client, ns, pod, 8080)
	if err != nil {
		t.Fatal(err)
	}
	var agent *stack.Agent
	for _, a := range agents {
		if a.Node.Name == p.Spec.NodeName {
			agent = a
		}
	}
	if agent == nil {
		t.Fatalf("no npl-agent on %s", p.Spec.NodeName)
	}

	open, err := openKeepAlive(ctx, b, vipURL)
	if err != nil {
		t.Fatal(err)
	}
	defer open.conn.Close()
	if got, err := open.get(); err != nil || got != pod {
		t.Fatalf("first request on the kept-alive connection: %q, %v; want %s", got, err, pod)
	}

	// A range without the Pod's port moves it; back to the default range
	// after the test, which holds both ports (no second move).
	moveTo := "61900-61999"
	if entries[0].NodePort >= 61900 {
		moveTo = "61000-61099"
	}
	restart := func(portRange string) {
		t.Helper()
		if err := agent.Stop(); err != nil {
			t.Fatal(err)
		}
		agent.SetPortRange(portRange)
		if err := agent.Start(ctx); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := agent.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
	}
	before := status(t, b)
	t.Cleanup(func() { restart("61000-62000") })
	// Before the restart: the move, and so the drain, start after it.
	moved := time.Now()
	restart(moveTo)

	var newServer string
	waitForCond(t, 30*time.Second, "the Pod's new server up on HAProxy and its old one draining", func() (bool, error) {
		s, err := podServer(ctx, client, ns, pod, 8080)
		if err != nil || s == oldServer {
			return false, err
		}
		newServer = s
		cur, err := serverState(ctx, e, pool, newServer)
		if err != nil || !cur.Up || !cur.Enabled() {
			return false, nil
		}
		old, err := serverState(ctx, e, pool, oldServer)
		if err != nil {
			return false, fmt.Errorf("the old server is gone: %w", err)
		}
		return old.Draining(), nil
	})
	t.Logf("moved by the restart with range %s: %s → %s, the old one draining %v after the restart began",
		moveTo, oldServer, newServer, time.Since(moved).Round(time.Millisecond))

	if got, err := open.get(); err != nil || got != pod {
		t.Fatalf("request on the connection opened before the move: %q, %v; want %s through the draining member", got, err, pod)
	}
	const n = 20
	s0, err := e.ServerSessions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for name, k := range answers(t, b, vipURL, n) {
		got[strings.TrimSpace(name)] += k
	}
	if got[pod] != n {
		t.Fatalf("answers while the old member drains: %v, want %d from %s", got, n, pod)
	}
	s1, err := e.ServerSessions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	sessions := sessionsDelta(s0, s1)
	t.Logf("while %s drains: the open connection answered, %d new requests, connections per server %v", oldServer, n, sessions)
	if sessions[oldServer] != 0 || sessions[newServer] != n {
		t.Fatalf("connections per server %v, want all %d on %s and none on the draining %s", sessions, n, newServer, oldServer)
	}

	waitForCond(t, drain+30*time.Second, "the old server removed after drainSeconds", func() (bool, error) {
		_, err := serverState(ctx, e, pool, oldServer)
		return err != nil, nil
	})
	removed := time.Since(moved)
	t.Logf("%s removed %v after the restart began (drainSeconds %v)", oldServer, removed.Round(100*time.Millisecond), drain)
	if removed < drain {
		t.Errorf("the old server was removed %v after the restart began, before drainSeconds %v", removed.Round(time.Millisecond), drain)
	}
	if after := status(t, b); after.Reloads != before.Reloads {
		t.Errorf("the move reloaded HAProxy %d times, want 0", after.Reloads-before.Reloads)
	}
}
