package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/test/harness/podreply"
)

// freePort is a port nothing listens on right now.
func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestWorkload_answersItsPodNameOnEveryTCPPortAndEchoesUDP(t *testing.T) {
	tcp1, tcp2, udp := freePort(t, "tcp"), freePort(t, "tcp"), freePort(t, "udp")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, strconv.Itoa(tcp1)+","+strconv.Itoa(tcp2), strconv.Itoa(udp), "shop", "web-7")
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	client := &http.Client{Timeout: 2 * time.Second}
	for _, port := range []int{tcp1, tcp2} {
		url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
		var resp *http.Response
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if resp, err = client.Get(url); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != podreply.Body("web-7") || resp.Header.Get(podreply.Header) != "shop/web-7" {
			t.Errorf("GET %s: body %q, %s %q; want %q and shop/web-7", url, body, podreply.Header, resp.Header.Get(podreply.Header), podreply.Body("web-7"))
		}
	}

	c, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(udp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 100)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "web-7: ping" {
		t.Errorf("UDP echo: %q, %v; want %q", buf[:n], err, "web-7: ping")
	}
}

func TestWorkload_refusesBadPortsAndNoPorts(t *testing.T) {
	for _, tc := range []struct{ tcp, udp, want string }{
		{"", "", "no port: give -tcp or -udp (or TCP_PORTS or UDP_PORTS)"},
		{"80,x", "", `tcp ports: "x" is not a port (1-65535)`},
		{"", "70000", `udp ports: "70000" is not a port (1-65535)`},
	} {
		err := run(context.Background(), tc.tcp, tc.udp, "ns", "p")
		if err == nil || err.Error() != tc.want {
			t.Errorf("run(tcp %q, udp %q) = %v; want %s", tc.tcp, tc.udp, err, tc.want)
		}
	}
}
