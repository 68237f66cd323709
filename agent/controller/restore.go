package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/contract"
)

var everything = labels.Everything()

// restoreEntry is one usable annotation entry found at start.
type restoreEntry struct {
	pod      *corev1.Pod
	key      string // namespace/name
	target   Target
	nodePort int
	podIP    netip.Addr
}

// reallocation is a restored entry whose node port another mapping of its
// family holds; it got a new port.
type reallocation struct {
	restoreEntry
	newPort int
	cause   error
}

// restore rebuilds the agent's state from the annotations of its Pods before
// any worker runs, so that the node ports of running Pods never change across
// a restart and the datapath is rewritten with the same rules. An entry that
// is not usable (bad JSON, a missing field, a port outside the range, a
// family the Pod has no IP of, a port busy on the host) is not restored; the
// worker that syncs the Pod next allocates a fresh port and rewrites the
// annotation, which repairs it.
//
// An entry whose number another mapping of the family already holds breaks
// the allocator's rule (one mapping per number and family, whatever the
// protocol). An older npl, whose TCP and UDP tables were independent, wrote
// such annotations, e.g. 61000/tcp and 61000/udp for DNS. TCP entries are
// restored first, so the TCP mapping keeps the number and the UDP one moves;
// the new port is allocated only after every other entry was restored, so
// exactly one port changes, and the Pod gets an Event naming both ports.
//
// Then every Pod present gets the node ports its Services ask for (a cold
// start: none restored), and the whole state is programmed in one datapath
// write, rather than one write per few Pods as the workers would make it.
// The workers then find each Pod's mappings in place and only write the
// annotations (and the Events).
func (c *Controller) restore(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	pods, err := c.podLister.List(everything)
	if err != nil {
		return fmt.Errorf("list pods for restore: %w", err)
	}
	c.mu.Lock()
	entries, outside, dropped := c.restorableEntries(ctx, pods)
	if c.cfg.RetiredPortGrace > 0 {
		c.retired = c.holdRetired(ctx, outside)
	}
	// TCP before UDP, then by Pod, so that which mapping of a shared number
	// moves does not depend on the informer's order. The TCP one keeps it: a
	// TCP port change drops the connections and health monitors a load
	// balancer holds on it, while UDP is connectionless (DNS clients retry)
	// and its conntrack entries are flushed below.
	slices.SortStableFunc(entries, func(a, b restoreEntry) int {
		if a.target.Protocol != b.target.Protocol {
			return strings.Compare(string(a.target.Protocol), string(b.target.Protocol))
		}
		return strings.Compare(a.key, b.key)
	})
	restored := 0
	var taken []reallocation
	for _, e := range entries {
		if e.target.HostPort == 0 {
			if err := c.alloc.Restore(allocKey(e.key, e.target), e.nodePort); errors.Is(err, portalloc.ErrTaken) {
				taken = append(taken, reallocation{restoreEntry: e, cause: err})
				continue
			} else if err != nil {
				logger.Info("Not restoring a node port", "pod", klog.KObj(e.pod), "nodePort", e.nodePort, "err", err)
				dropped++
				continue
			}
		}
		c.addRestoredLocked(e.key, mapping{target: e.target, nodePort: e.nodePort, podIP: e.podIP})
		restored++
	}
	var moved []reallocation
	for _, m := range taken {
		e := m.restoreEntry
		port, err := c.alloc.Allocate(allocKey(e.key, e.target))
		if err != nil {
			// The worker retries it as a Pod waiting for a free port.
			logger.Info("Not restoring a node port held by another mapping; no port free to move it to",
				"pod", klog.KObj(e.pod), "nodePort", e.nodePort, "err", err)
			dropped++
			continue
		}
		c.addRestoredLocked(e.key, mapping{target: e.target, nodePort: port, podIP: e.podIP})
		m.newPort = port
		moved = append(moved, m)
	}
	c.mu.Unlock()

	// Targets reads the Service and slice caches: outside the lock, as in
	// syncPod.
	targets := make([][]Target, len(pods))
	for i, pod := range pods {
		targets[i], _ = c.targetsOf(pod)
	}
	c.mu.Lock()
	var flush []flushPort
	added := 0
	for i, pod := range pods {
		key := keyOf(pod)
		had := len(c.pods[key].mappingsOrNil())
		_, _, f, _ := c.reconcilePodLocked(logger, key, pod, targets[i])
		flush = append(flush, f...)
		added += max(len(c.pods[key].mappingsOrNil())-had, 0)
	}
	gens := c.updateDatapathLocked()
	retired := len(c.retired)
	c.mu.Unlock()

	for fam, gen := range gens {
		if err := c.paths[fam].Wait(ctx, gen); err != nil {
			return fmt.Errorf("restore datapath %s: %w", fam, err)
		}
	}
	for _, f := range flush {
		if err := c.paths[f.family].FlushUDP(ctx, f.port); err != nil {
			logger.Error(err, "Flush UDP conntrack entries", "nodePort", f.port)
		}
	}
	for _, m := range moved {
		t := m.target
		if t.Protocol == contract.ProtocolUDP {
			// The old number now serves another mapping only; flows to it
			// must not keep reaching this Pod through conntrack.
			if err := c.paths[t.Family].FlushUDP(ctx, m.nodePort); err != nil {
				logger.Error(err, "Flush UDP conntrack entries", "nodePort", m.nodePort)
			}
		}
		logger.Info("Moved a restored mapping off a node port another mapping holds",
			"pod", klog.KObj(m.pod), "podPort", t.PodPort, "protocol", t.Protocol, "family", t.Family,
			"oldNodePort", m.nodePort, "newNodePort", m.newPort, "cause", m.cause)
		// Warning, not Normal: the published node port of a running Pod
		// changed, which a consumer configured by hand (not reading the
		// annotation) must follow, and operators watch Warnings.
		c.recorder.Eventf(m.pod, corev1.EventTypeWarning, "NodePortReallocated",
			"Node port of %s/%d (%s) moved from %d to %d: %v", t.Protocol, t.PodPort, t.Family, m.nodePort, m.newPort, m.cause)
	}
	logger.Info("Restored mappings from Pod annotations", "restored", restored, "moved", len(moved), "dropped", dropped,
		"added", added, "pods", len(pods))
	if retired > 0 {
		logger.Info("Keeping the rules of node ports outside the range until the load balancers follow the new ones",
			"mappings", retired, "range", c.cfg.PortRange, "for", c.cfg.RetiredPortGrace)
		time.AfterFunc(c.cfg.RetiredPortGrace, func() { c.dropRetired(ctx) })
	}
	return nil
}

// dropRetired removes the rules restore kept of node ports outside the
// range.
func (c *Controller) dropRetired(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	n := len(c.retired)
	for _, r := range c.retired {
		r.release(klog.FromContext(ctx))
	}
	c.retired = nil
	c.updateDatapathLocked()
	c.mu.Unlock()
	klog.FromContext(ctx).Info("Removed the rules of node ports outside the range", "mappings", n, "range", c.cfg.PortRange)
}

// holdRetired reserves the ports of the mappings restore retires and
// returns those it could hold: a port a host process took while the agent
// was down is not one of ours any more, and a rule there would send that
// process's traffic to the Pod. Called with c.mu held.
func (c *Controller) holdRetired(ctx context.Context, outside []retiredMapping) []retiredMapping {
	var held []retiredMapping
	for _, r := range outside {
		h, err := c.alloc.Hold(allocKey(r.key, r.target), r.nodePort)
		if err != nil {
			klog.FromContext(ctx).Info("Not keeping the rule of a node port outside the range", "pod", r.key, "nodePort", r.nodePort, "err", err)
			continue
		}
		r.hold = h
		held = append(held, r)
	}
	return held
}

// restorableEntries parses the annotations of pods and returns the entries
// that can be restored, the mappings of those whose node port is outside
// the range (kept for RetiredPortGrace), and the number it dropped (those
// outside the range included). Called with c.mu held.
func (c *Controller) restorableEntries(ctx context.Context, pods []*corev1.Pod) (out []restoreEntry, outside []retiredMapping, dropped int) {
	logger := klog.FromContext(ctx)
	for _, pod := range pods {
		value, ok := pod.Annotations[contract.PodKey]
		if !ok || !PodMappable(pod) {
			continue
		}
		entries, err := contract.Parse(value)
		if err != nil {
			logger.Info("Not restoring a malformed annotation; it will be rewritten", "pod", klog.KObj(pod), "err", err)
			dropped++
			continue
		}
		key := keyOf(pod)
		podIPs := PodIPs(pod)
		seen := map[Target]bool{}
		for _, e := range entries {
			t := Target{PodPort: int32(e.PodPort), Protocol: e.Protocol, Family: e.IPFamily}
			ip, hasIP := podIPs[e.IPFamily]
			if _, hasPath := c.paths[e.IPFamily]; !hasIP || !hasPath || seen[t] {
				dropped++
				continue
			}
			if hp := contract.HostPort(pod, t.PodPort, t.Protocol.Kubernetes()); hp != 0 && int(hp) == e.NodePort {
				t.HostPort = hp
			} else if !c.cfg.PortRange.Contains(e.NodePort) {
				logger.Info("Not restoring a node port outside the range", "pod", klog.KObj(pod), "nodePort", e.NodePort, "range", c.cfg.PortRange)
				seen[t] = true
				outside = append(outside, retiredMapping{key: key, mapping: mapping{target: t, nodePort: e.NodePort, podIP: ip}})
				dropped++
				continue
			}
			seen[t] = true
			out = append(out, restoreEntry{pod: pod, key: key, target: t, nodePort: e.NodePort, podIP: ip})
		}
	}
	return out, outside, dropped
}

// addRestoredLocked adds a restored mapping to the Pod's state, keeping the
// order syncPod keeps. Called with c.mu held.
func (c *Controller) addRestoredLocked(key string, m mapping) {
	st := c.pods[key]
	if st == nil {
		st = &podState{}
		c.pods[key] = st
	}
	st.mappings = append(st.mappings, m)
	slices.SortFunc(st.mappings, compareMappings)
}

// mappingsOrNil returns the mappings of a Pod's state, none for nil.
func (st *podState) mappingsOrNil() []mapping {
	if st == nil {
		return nil
	}
	return st.mappings
}
