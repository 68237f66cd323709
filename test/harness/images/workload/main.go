// Command npl-workload is the test workload image's server: on every TCP port
// it is given it answers HTTP with its Pod's name (and the header X-Pod:
// namespace/name), on every UDP port it echoes "<pod name>: <payload>", as
// the Pods of the stand-in cluster do, so the same assertions hold on real
// nodes.
//
// Usage: npl-workload [-tcp 8080,8081] [-udp 5353]
//
// The ports default to the environment variables TCP_PORTS and UDP_PORTS
// (comma-separated); the Pod comes from POD_NAME and POD_NAMESPACE (set them
// with the downward API).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeportlocal/npl/test/harness/podreply"
)

func main() {
	tcp := flag.String("tcp", os.Getenv("TCP_PORTS"), "comma-separated TCP ports to answer HTTP on")
	udp := flag.String("udp", os.Getenv("UDP_PORTS"), "comma-separated UDP ports to echo on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *tcp, *udp, os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")); err != nil {
		log.Printf("npl-workload: %v", err)
		stop()
		os.Exit(1)
	}
}

// run serves until ctx is done.
func run(ctx context.Context, tcpList, udpList, namespace, name string) error {
	tcpPorts, err := parsePorts(tcpList)
	if err != nil {
		return fmt.Errorf("tcp ports: %w", err)
	}
	udpPorts, err := parsePorts(udpList)
	if err != nil {
		return fmt.Errorf("udp ports: %w", err)
	}
	if len(tcpPorts)+len(udpPorts) == 0 {
		return errors.New("no port: give -tcp or -udp (or TCP_PORTS or UDP_PORTS)")
	}
	if name == "" {
		name, _ = os.Hostname()
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(podreply.Header, podreply.HeaderValue(namespace, name))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(podreply.Body(name)))
	})
	var servers []*http.Server
	for _, p := range tcpPorts {
		l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(p)))
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(l) }()
	}
	for _, p := range udpPorts {
		c, err := net.ListenPacket("udp", net.JoinHostPort("", strconv.Itoa(p)))
		if err != nil {
			return err
		}
		defer c.Close()
		go echo(c, name)
	}
	log.Printf("npl-workload: pod %s/%s serving tcp %v udp %v", namespace, name, tcpPorts, udpPorts)
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdown)
	}
	return nil
}

// echo answers each datagram on c until c closes.
func echo(c net.PacketConn, name string) {
	buf := make([]byte, 64*1024)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		_, _ = c.WriteTo(podreply.Echo(name, buf[:n]), from)
	}
}

// parsePorts reads "8080,8081" into ports; empty is none.
func parsePorts(list string) ([]int, error) {
	var ports []int
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%q is not a port (1-65535)", f)
		}
		ports = append(ports, p)
	}
	return ports, nil
}
