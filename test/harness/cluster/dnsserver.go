package cluster

import (
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

// dnsPort is where a container of CoreDNSImage answers, as CoreDNS does
// with the suite's Corefile (".:53").
const dnsPort = "53"

// startPodDNS serves DNS on port 53, UDP and TCP, inside the network
// namespace at netnsPath when a container of the Pod is of CoreDNSImage:
// the backend of the suite's UDPRoute tests, which only need an answer to a
// query for foo.bar.com. Closing the returned closers stops it.
func startPodDNS(netnsPath string, pod *corev1.Pod, dualStack bool) ([]io.Closer, error) {
	wanted := false
	for _, c := range runningContainers(pod) {
		wanted = wanted || imageName(c.Image) == CoreDNSImage
	}
	if !wanted {
		return nil, nil
	}
	host, tcp, udp := "0.0.0.0", "tcp4", "udp4"
	if dualStack {
		host, tcp, udp = "::", "tcp", "udp"
	}
	addr := net.JoinHostPort(host, dnsPort)
	var l net.Listener
	var pc net.PacketConn
	err := doInNetns(netnsPath, func() error {
		var err error
		if pc, err = net.ListenPacket(udp, addr); err != nil {
			return fmt.Errorf("listen on udp %s: %w", addr, err)
		}
		if l, err = net.Listen(tcp, addr); err != nil {
			pc.Close()
			return fmt.Errorf("listen on tcp %s: %w", addr, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	handler := dns.HandlerFunc(answerWhoAmI)
	// Closing the socket ends ActivateAndServe.
	go func() { _ = (&dns.Server{PacketConn: pc, Handler: handler}).ActivateAndServe() }()
	go func() { _ = (&dns.Server{Listener: l, Handler: handler}).ActivateAndServe() }()
	return []io.Closer{pc, l}, nil
}

// answerWhoAmI answers each A or AAAA question, whatever the name, with the
// address the query came from, as CoreDNS's whoami plugin (the suite's
// foo.bar.com zone) tells the client who it is; other types get an empty
// answer. Nothing is forwarded: the cluster has no upstream resolver.
func answerWhoAmI(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	from := remoteAddr(w.RemoteAddr())
	for _, question := range q.Question {
		hdr := dns.RR_Header{Name: question.Name, Class: dns.ClassINET, Rrtype: question.Qtype}
		switch {
		case question.Qtype == dns.TypeA && from.Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: from.AsSlice()})
		case question.Qtype == dns.TypeAAAA && from.Is6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: from.AsSlice()})
		}
	}
	_ = w.WriteMsg(m)
}

// remoteAddr is the address of a UDP or TCP peer, IPv4 unmapped.
func remoteAddr(a net.Addr) netip.Addr {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	}
	return ap.Addr().Unmap()
}
