package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// The kube-proxy stand-in programs NodePort Services the way kube-proxy's
// iptables mode does, in essence: the nodePort is opened on every node and
// DNATed to a random ready endpoint, wherever it runs, with masquerade so
// the reply comes back through the node that was asked. In a dual-stack
// cluster it does so per family, an IPv6 endpoint behind the node's IPv6
// address. It exists so that
// tests and the demo can show the difference with NodePortLocal for real.
const (
	kubeProxyChain      = "NPL-TEST-NODEPORTS"
	kubeProxyMasquerade = "NPL-TEST-NODEPORTS-MASQ"
	nodePortRange       = "30000:32767"
)

type kubeProxy struct {
	c       *Cluster
	svcs    cache.Indexer
	slices  cache.Indexer
	trigger chan struct{}
	last    map[discoveryv1.AddressType][]byte
}

// families are the address families the stand-in programs: IPv4,
// and IPv6 (through ip6tables) in a dual-stack cluster.
func (kp *kubeProxy) families() []discoveryv1.AddressType {
	if kp.c.opts.DualStack {
		return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}
	}
	return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4}
}

// iptablesCommand is iptables or ip6tables, with suffix ("-restore").
func iptablesCommand(family discoveryv1.AddressType, suffix string) string {
	if family == discoveryv1.AddressTypeIPv6 {
		return "ip6tables" + suffix
	}
	return "iptables" + suffix
}

func (c *Cluster) startKubeProxy(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.client, 0)
	svcInf := factory.Core().V1().Services().Informer()
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	kp := &kubeProxy{c: c, svcs: svcInf.GetIndexer(), slices: sliceInf.GetIndexer(), trigger: make(chan struct{}, 1),
		last: map[discoveryv1.AddressType][]byte{}}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kp.poke() },
		UpdateFunc: func(any, any) { kp.poke() },
		DeleteFunc: func(any) { kp.poke() },
	}
	_, _ = svcInf.AddEventHandler(handler)
	_, _ = sliceInf.AddEventHandler(handler)
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced) {
		return fmt.Errorf("kube-proxy stand-in: caches did not sync")
	}
	go kp.run(ctx)
	kp.poke()
	return nil
}

func (kp *kubeProxy) poke() {
	select {
	case kp.trigger <- struct{}{}:
	default:
	}
}

func (kp *kubeProxy) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-kp.trigger:
		}
		time.Sleep(20 * time.Millisecond) // coalesce a burst
		for _, family := range kp.families() {
			rules := kp.render(family)
			if bytes.Equal(rules, kp.last[family]) {
				continue
			}
			ok := true
			for _, n := range kp.c.nodes {
				if err := kp.apply(ctx, n, family, rules); err != nil {
					if ctx.Err() != nil {
						return // the cluster is closing
					}
					kp.c.log.Error(err, "kube-proxy stand-in: program node", "node", n.Name, "family", family)
					ok = false
				}
			}
			if ok {
				kp.last[family] = rules
			} else {
				kp.poke()
			}
		}
	}
}

// render computes the chains of one family for every NodePort (and
// LoadBalancer) Service port: one DNAT per ready endpoint of the family,
// chosen at random. A Service without endpoints of the family (an IPv6-only
// one, for IPv4) gets no rule.
func (kp *kubeProxy) render(family discoveryv1.AddressType) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n:%s - [0:0]\n", kubeProxyChain, kubeProxyMasquerade)
	var svcs []*corev1.Service
	for _, o := range kp.svcs.List() {
		if s, ok := o.(*corev1.Service); ok && (s.Spec.Type == corev1.ServiceTypeNodePort || s.Spec.Type == corev1.ServiceTypeLoadBalancer) {
			svcs = append(svcs, s)
		}
	}
	slices.SortFunc(svcs, func(a, b *corev1.Service) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	for _, s := range svcs {
		for _, sp := range s.Spec.Ports {
			if sp.NodePort == 0 || (sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP && sp.Protocol != corev1.ProtocolUDP) {
				continue
			}
			eps := kp.endpoints(s, sp, family)
			proto := strings.ToLower(string(sp.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			for i, ep := range eps {
				random := ""
				if left := len(eps) - i; left > 1 {
					random = fmt.Sprintf("-m statistic --mode random --probability %.5f ", 1/float64(left))
				}
				fmt.Fprintf(&b, "-A %s -p %s -m %s --dport %d %s-j DNAT --to-destination %s\n",
					kubeProxyChain, proto, proto, sp.NodePort, random, ep)
			}
		}
	}
	fmt.Fprintf(&b, "-A %s -m conntrack --ctstate DNAT --ctorigdstport %s -j MASQUERADE\n", kubeProxyMasquerade, nodePortRange)
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

// endpoints lists ip:port of the ready endpoints of a Service port of one
// family.
func (kp *kubeProxy) endpoints(s *corev1.Service, sp corev1.ServicePort, family discoveryv1.AddressType) []string {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: s.Name})
	var out []string
	for _, o := range kp.slices.List() {
		es, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || es.Namespace != s.Namespace || !sel.Matches(labels.Set(es.Labels)) || es.AddressType != family {
			continue
		}
		port := int32(0)
		for _, p := range es.Ports {
			if p.Name != nil && *p.Name == sp.Name && p.Port != nil {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	slices.Sort(out)
	return out
}

// apply writes one family's chains into a node and makes sure they are
// jumped to.
func (kp *kubeProxy) apply(ctx context.Context, n *Node, family discoveryv1.AddressType, rules []byte) error {
	restoreCmd, iptables := iptablesCommand(family, "-restore"), iptablesCommand(family, "")
	restore := n.Command(ctx, restoreCmd, "--noflush", "-w", "5")
	restore.Stdin = bytes.NewReader(rules)
	if out, err := restore.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", restoreCmd, err, out)
	}
	jumps := [][]string{
		{"PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", kubeProxyChain},
		{"OUTPUT", "-m", "addrtype", "--dst-type", "LOCAL", "-j", kubeProxyChain},
		{"POSTROUTING", "-j", kubeProxyMasquerade},
	}
	for _, j := range jumps {
		check := append([]string{"-t", "nat", "-C"}, j...)
		if n.Command(ctx, iptables, check...).Run() == nil {
			continue
		}
		add := append([]string{"-t", "nat", "-A"}, j...)
		if out, err := n.Command(ctx, iptables, add...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v: %v: %s", iptables, add, err, out)
		}
	}
	return nil
}
