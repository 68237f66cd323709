package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/agent/datapath"
	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/contract"
)

// syncPod makes one Pod's published ports match what its Services ask for:
// allocate or release node ports, program the datapath and wait until it is
// written, then patch the annotation when its content changed. Ports that
// could be allocated are published even when others could not (exhaustion).
func (c *Controller) syncPod(ctx context.Context, key string, queued time.Duration) error {
	logger := klog.FromContext(ctx).WithValues("pod", key)
	start := time.Now()
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return fmt.Errorf("get pod %s: %w", key, err)
	}

	var targets []Target
	var skips []Skip
	if pod != nil {
		targets, skips = c.targetsOf(pod)
	}
	for _, s := range skips {
		c.recorder.Eventf(s.Service, corev1.EventTypeWarning, "NodePortLocalSkipped", "Port %s/%d not mapped: %s", s.Port.Protocol, s.Port.Port, s.Reason)
	}

	c.mu.Lock()
	locked := time.Now()
	changed, released, flush, allocErr := c.reconcilePodLocked(logger, key, pod, targets)
	var wake []string
	if released > 0 {
		for k := range c.starved {
			if k != key {
				wake = append(wake, k)
			}
		}
	}
	gens := map[contract.Family]uint64{}
	if changed {
		gens = c.updateDatapathLocked()
	} else if pod != nil && !c.pendingSent && c.awaitsIP(pod) {
		// A Pod starting: a removal the datapath holds may now wait for
		// its mappings (Desired.AdditionsPending). Nothing of this Pod
		// waits for the update.
		c.updateDatapathLocked()
	}
	entries := c.annotationEntries(c.pods[key])
	c.mu.Unlock()

	for _, k := range wake {
		c.enqueue(k)
	}
	if allocErr != nil {
		c.metrics.AllocationFailures.Inc()
		if pod != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "NodePortExhausted", "No free node port in %s: %v", c.cfg.PortRange, allocErr)
		}
	}
	updated := time.Now()
	for fam, gen := range gens {
		if err := c.paths[fam].Wait(ctx, gen); err != nil {
			return fmt.Errorf("program datapath for pod %s: %w", key, err)
		}
	}
	written := time.Now()
	for _, f := range flush {
		if err := c.paths[f.family].FlushUDP(ctx, f.port); err != nil {
			logger.Error(err, "Flush UDP conntrack entries", "nodePort", f.port)
		}
	}
	if pod != nil {
		patched, err := c.patchAnnotation(ctx, pod, entries)
		if err != nil {
			return err
		}
		if patched {
			// Where a Pod's publication spent its time: queued until a
			// worker took it, waiting for the controller's lock, the
			// datapath write (coalesced with other Pods'), the patch.
			done := time.Now()
			logger.V(2).Info("Published node ports", "entries", len(entries), "queued", queued,
				"lock", locked.Sub(start), "datapath", written.Sub(updated), "patch", done.Sub(written), "total", queued+done.Sub(start))
		}
	}
	if allocErr != nil {
		return allocErr
	}
	return nil
}

// targetsOf returns the Pod ports its Services ask to publish, in the
// families the node has an address of, and the ports skipped.
func (c *Controller) targetsOf(pod *corev1.Pod) ([]Target, []Skip) {
	c.mu.Lock()
	families := make([]contract.Family, 0, len(c.nodeIPs))
	for f := range c.nodeIPs {
		families = append(families, f)
	}
	c.mu.Unlock()
	slices.Sort(families)
	return Targets(pod, c.servicesInNamespace(pod.Namespace), c.slicesInNamespace(pod.Namespace), families)
}

// reconcilePodLocked makes the state of the Pod of key (nil when it is
// gone) hold the mappings targets ask for, and reports whether its mappings
// changed, how many node ports it released, the UDP ports whose conntrack
// entries must go, and why a port could not be allocated. The datapath is
// left to the caller. Called with c.mu held.
func (c *Controller) reconcilePodLocked(logger klog.Logger, key string, pod *corev1.Pod, targets []Target) (changed bool, released int, flush []flushPort, allocErr error) {
	st := c.pods[key]
	if st == nil {
		st = &podState{}
	}
	var podIPs map[contract.Family]netip.Addr
	if pod != nil {
		podIPs = PodIPs(pod)
	}
	next, released, flush, allocErr := c.reconcileMappings(key, st.mappings, targets, podIPs)
	changed = !slices.Equal(next, st.mappings)
	if c.dropRetiredOfLocked(logger, key, podIPs) {
		changed = true
	}
	st.mappings = next
	if len(next) == 0 {
		delete(c.pods, key)
	} else {
		c.pods[key] = st
	}
	if allocErr != nil {
		c.starved[key] = true
	} else {
		delete(c.starved, key)
	}
	return changed, released, flush, allocErr
}

type flushPort struct {
	family contract.Family
	port   int
}

// reconcileMappings turns the current mappings of a Pod into the mappings
// its targets ask for. It releases the ports no longer wanted, allocates the
// missing ones, and rewrites the Pod IP of those whose IP changed. Called
// with c.mu held.
func (c *Controller) reconcileMappings(key string, current []mapping, targets []Target, podIPs map[contract.Family]netip.Addr) (next []mapping, released int, flush []flushPort, err error) {
	want := map[Target]bool{}
	for _, t := range targets {
		want[t] = true
	}
	have := map[Target]mapping{}
	for _, m := range current {
		if want[m.target] {
			have[m.target] = m
			continue
		}
		if m.target.HostPort == 0 {
			if relErr := c.alloc.Release(allocKey(key, m.target)); relErr != nil {
				// Keep the mapping: its socket or rule is still there, and the
				// next sync retries the release.
				next = append(next, m)
				err = errors.Join(err, relErr)
				continue
			}
			released++
			if m.target.Protocol == contract.ProtocolUDP {
				flush = append(flush, flushPort{m.target.Family, m.nodePort})
			}
		}
	}
	for _, t := range targets {
		ip := podIPs[t.Family]
		if m, ok := have[t]; ok {
			if m.podIP != ip && t.HostPort == 0 && t.Protocol == contract.ProtocolUDP {
				flush = append(flush, flushPort{t.Family, m.nodePort})
			}
			m.podIP = ip
			next = append(next, m)
			continue
		}
		if t.HostPort != 0 {
			next = append(next, mapping{target: t, nodePort: int(t.HostPort), podIP: ip})
			continue
		}
		port, allocErr := c.alloc.Allocate(allocKey(key, t))
		if allocErr != nil {
			err = errors.Join(err, fmt.Errorf("allocate node port for %s %s/%d: %w", key, t.Protocol, t.PodPort, allocErr))
			continue
		}
		next = append(next, mapping{target: t, nodePort: port, podIP: ip})
	}
	slices.SortFunc(next, compareMappings)
	return next, released, flush, err
}

func compareMappings(a, b mapping) int {
	switch {
	case a.target.Family != b.target.Family:
		return strings.Compare(string(a.target.Family), string(b.target.Family))
	case a.target.Protocol != b.target.Protocol:
		return strings.Compare(string(a.target.Protocol), string(b.target.Protocol))
	default:
		return int(a.target.PodPort - b.target.PodPort)
	}
}

func allocKey(pod string, t Target) portalloc.Key {
	return portalloc.Key{Pod: pod, PodPort: t.PodPort, Protocol: t.Protocol, Family: t.Family}
}

// dropRetiredOfLocked removes the retired mappings of a Pod that is gone
// (podIPs nil) or no longer has the IP they point to, and reports whether
// it removed any. Called with c.mu held.
func (c *Controller) dropRetiredOfLocked(logger klog.Logger, key string, podIPs map[contract.Family]netip.Addr) bool {
	var kept []retiredMapping
	for _, r := range c.retired {
		if r.key == key && podIPs[r.target.Family] != r.podIP {
			r.release(logger)
			continue
		}
		kept = append(kept, r)
	}
	dropped := len(kept) != len(c.retired)
	c.retired = kept
	return dropped
}

// updateDatapathLocked hands every family's datapath the complete desired
// content computed from all Pods, and the retired mappings restore keeps.
// Called with c.mu held.
func (c *Controller) updateDatapathLocked() map[contract.Family]uint64 {
	desired := map[contract.Family]*datapath.Desired{}
	for fam := range c.paths {
		desired[fam] = &datapath.Desired{PortRange: [2]int{c.cfg.PortRange.Start, c.cfg.PortRange.End}}
	}
	total := 0
	// The node ports of the published mappings: a retired mapping on one
	// of them (a Pod's hostPort) is not programmed.
	published := map[nodePortKey]bool{}
	for key, st := range c.pods {
		for _, m := range st.mappings {
			published[nodePortKey{m.target.Family, m.target.Protocol, m.nodePort}] = true
			d := desired[m.target.Family]
			if d == nil || m.target.HostPort != 0 || !m.podIP.IsValid() {
				continue
			}
			d.Mappings = append(d.Mappings, datapath.Mapping{
				NodePort: m.nodePort, Protocol: m.target.Protocol, PodIP: m.podIP, PodPort: int(m.target.PodPort), Pod: key,
			})
			total++
		}
	}
	for _, r := range c.retired {
		if d := desired[r.target.Family]; d != nil && !published[nodePortKey{r.target.Family, r.target.Protocol, r.nodePort}] {
			d.Mappings = append(d.Mappings, datapath.Mapping{
				NodePort: r.nodePort, Protocol: r.target.Protocol, PodIP: r.podIP, PodPort: int(r.target.PodPort), Pod: r.key,
			})
		}
	}
	sources, pending := c.localPods()
	for _, ip := range sources {
		fam := contract.FamilyIPv4
		if ip.Is6() {
			fam = contract.FamilyIPv6
		}
		if d := desired[fam]; d != nil {
			d.HairpinSources = append(d.HairpinSources, ip)
		}
	}
	for _, d := range desired {
		d.AdditionsPending = pending
	}
	c.pendingSent = pending
	c.metrics.Mappings.Set(float64(total))
	gens := make(map[contract.Family]uint64, len(desired))
	for fam, d := range desired {
		gens[fam] = c.paths[fam].Update(*d)
	}
	return gens
}

// nodePortKey is a node port of a family and protocol: what one DNAT rule
// matches.
type nodePortKey struct {
	family   contract.Family
	protocol contract.Protocol
	port     int
}

// localPods lists the IPs of the node's Pods that have their own network
// namespace: the sources whose traffic to a node port may hairpin back to
// this node and so needs masquerading. It also reports whether a Pod that a
// Service of ours selects is waiting for its IP: its mappings will follow
// (Desired.AdditionsPending).
func (c *Controller) localPods() (ips []netip.Addr, pending bool) {
	pods, err := c.podLister.List(everything)
	if err != nil {
		return nil, false
	}
	for _, p := range pods {
		if !PodMappable(p) {
			pending = pending || c.awaitsIP(p)
			continue
		}
		for _, ip := range PodIPs(p) {
			ips = append(ips, ip)
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return slices.Compact(ips), pending
}

// awaitsIP reports whether pod is starting without an IP yet, and a Service
// of ours selects it: once it has one, it gets mappings.
func (c *Controller) awaitsIP(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Spec.HostNetwork || len(PodIPs(pod)) > 0 ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	eps := c.slicesInNamespace(pod.Namespace)
	for _, svc := range c.servicesInNamespace(pod.Namespace) {
		if Selects(svc, pod, eps) {
			return true
		}
	}
	return false
}

// patchAnnotation writes the Pod annotation through the pods/status
// subresource (so the agent needs no write access to Pods), only when its
// content differs, and deletes it when there is nothing to publish. It
// reports whether it wrote.
func (c *Controller) patchAnnotation(ctx context.Context, pod *corev1.Pod, entries []contract.Entry) (bool, error) {
	current, hasCurrent := pod.Annotations[contract.PodKey]
	if hasCurrent {
		if parsed, err := contract.Parse(current); err == nil && len(entries) > 0 && contract.Equal(parsed, entries) {
			return false, nil
		}
	} else if len(entries) == 0 {
		return false, nil
	}
	var value any // nil deletes the key in a JSON merge patch
	if len(entries) > 0 {
		s, err := contract.Format(entries)
		if err != nil {
			return false, err
		}
		value = s
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{contract.PodKey: value}}})
	if err != nil {
		return false, fmt.Errorf("encode annotation patch: %w", err)
	}
	err = c.client.PatchPodStatus(ctx, pod.Namespace, pod.Name, patch)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("patch %s annotation of pod %s/%s: %w", contract.PodKey, pod.Namespace, pod.Name, err)
	}
	c.metrics.AnnotationPatches.Inc()
	return true, nil
}
