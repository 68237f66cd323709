package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeportlocal/npl/test/harness/podreply"
)

// PodHeader is the HTTP response header that names the Pod (namespace/name),
// as the workload image of real nodes sends it too (package podreply).
const PodHeader = podreply.Header

// podPort is a port a Pod's containers declare.
type podPort struct {
	port     int32
	protocol corev1.Protocol
}

// declaredPorts returns the TCP and UDP ports of the containers and of the
// sidecar init containers (restartPolicy Always, which keep running), without
// duplicates, sorted. Ordinary init containers have exited by then, and
// containers run as processes (runsAsProcess) or of CoreDNSImage are served
// by what runs for their image.
func declaredPorts(pod *corev1.Pod) []podPort {
	seen := map[podPort]bool{}
	add := func(c corev1.Container) {
		if servesItsOwnPorts(c) {
			return
		}
		for _, p := range c.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP {
				continue
			}
			seen[podPort{port: p.ContainerPort, protocol: proto}] = true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if isSidecar(c) {
			add(c)
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	ports := make([]podPort, 0, len(seen))
	for p := range seen {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool {
		if ports[i].port != ports[j].port {
			return ports[i].port < ports[j].port
		}
		return ports[i].protocol < ports[j].protocol
	})
	return ports
}

func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// startPodServers opens, inside the network namespace at netnsPath, a socket
// for each declared port, on IPv4 or, when dualStack, on both families, then
// serves them from ordinary goroutines: TCP ports answer HTTP with
// "<pod name>\n" and the header X-Pod: ns/name, UDP ports echo
// "<pod name>: <payload>". Closing the returned closers stops them.
func startPodServers(netnsPath string, pod *corev1.Pod, dualStack bool) ([]io.Closer, error) {
	ports := declaredPorts(pod)
	if len(ports) == 0 {
		return nil, nil
	}
	var listeners []net.Listener
	var conns []net.PacketConn
	closeAll := func() {
		for _, l := range listeners {
			l.Close()
		}
		for _, c := range conns {
			c.Close()
		}
	}
	// An IPv6 wildcard socket also receives IPv4 (IPV6_V6ONLY is off).
	host, tcp, udp := "0.0.0.0", "tcp4", "udp4"
	if dualStack {
		host, tcp, udp = "::", "tcp", "udp"
	}
	err := doInNetns(netnsPath, func() error {
		for _, p := range ports {
			addr := net.JoinHostPort(host, strconv.Itoa(int(p.port)))
			switch p.protocol {
			case corev1.ProtocolTCP:
				l, err := net.Listen(tcp, addr)
				if err != nil {
					return fmt.Errorf("listen on tcp %s: %w", addr, err)
				}
				listeners = append(listeners, l)
			case corev1.ProtocolUDP:
				c, err := net.ListenPacket(udp, addr)
				if err != nil {
					return fmt.Errorf("listen on udp %s: %w", addr, err)
				}
				conns = append(conns, c)
			}
		}
		return nil
	})
	if err != nil {
		closeAll()
		return nil, err
	}
	closers := make([]io.Closer, 0, len(listeners)+len(conns))
	handler := podHandler(pod.Namespace, pod.Name)
	for _, l := range listeners {
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		closers = append(closers, srv)
	}
	for _, c := range conns {
		go udpEcho(c, pod.Name)
		closers = append(closers, c)
	}
	return closers, nil
}

func podHandler(namespace, name string) http.Handler {
	body := []byte(podreply.Body(name))
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(PodHeader, podreply.HeaderValue(namespace, name))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(body)
	})
}

// udpEcho answers each datagram with "<pod name>: <payload>" until c closes.
func udpEcho(c net.PacketConn, name string) {
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
