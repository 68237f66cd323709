package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/nodeportlocal/npl/contract"
)

var everything = labels.Everything()

// restore rebuilds the agent's state from the annotations of its Pods before
// any worker runs, so that the node ports of running Pods never change across
// a restart and the datapath is rewritten with the same rules. An entry that
// is not usable (bad JSON, a missing field, a port outside the range, a
// family the Pod has no IP of, a port already taken) is not restored; the
// worker that syncs the Pod next allocates a fresh port and rewrites the
// annotation, which repairs it.
func (c *Controller) restore(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	pods, err := c.podLister.List(everything)
	if err != nil {
		return fmt.Errorf("list pods for restore: %w", err)
	}
	c.mu.Lock()
	restored, dropped := 0, 0
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
		st := &podState{}
		seen := map[Target]bool{}
		for _, e := range entries {
			t := Target{PodPort: int32(e.PodPort), Protocol: e.Protocol, Family: e.IPFamily}
			ip, hasIP := podIPs[e.IPFamily]
			if _, hasPath := c.paths[e.IPFamily]; !hasIP || !hasPath || seen[t] {
				dropped++
				continue
			}
			if hp := contract.HostPort(pod, t.PodPort, corev1.Protocol(strings.ToUpper(t.Protocol))); hp != 0 && int(hp) == e.NodePort {
				t.HostPort = hp
			} else if !c.cfg.PortRange.Contains(e.NodePort) {
				logger.Info("Not restoring a node port outside the range", "pod", klog.KObj(pod), "nodePort", e.NodePort, "range", c.cfg.PortRange)
				dropped++
				continue
			} else if err := c.alloc.Restore(allocKey(key, t), e.NodePort); err != nil {
				logger.Info("Not restoring a node port", "pod", klog.KObj(pod), "nodePort", e.NodePort, "err", err)
				dropped++
				continue
			}
			seen[t] = true
			st.mappings = append(st.mappings, mapping{target: t, nodePort: e.NodePort, podIP: ip})
			restored++
		}
		if len(st.mappings) > 0 {
			c.pods[key] = st
		}
	}
	gens := c.updateDatapathLocked()
	c.mu.Unlock()

	for fam, gen := range gens {
		if err := c.paths[fam].Wait(ctx, gen); err != nil {
			return fmt.Errorf("restore datapath %s: %w", fam, err)
		}
	}
	logger.Info("Restored mappings from Pod annotations", "restored", restored, "dropped", dropped, "pods", len(pods))
	return nil
}
