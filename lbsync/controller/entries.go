package controller

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeportlocal/npl/lbsync/builder"
)

// untrustedEntries tells the owner of a Pod why an entry of its
// nodeportlocal.antrea.io annotation is no member (builder.SkipEntry: it
// names an address of another node, or a port outside npl-agent's range),
// in a Warning Event on the Pod, once per reason while the Pod lives.
type untrustedEntries struct {
	mu sync.Mutex
	// told holds, per Pod "namespace/name", the reasons told.
	told map[string]map[string]bool
}

// reasonUntrustedEntry is the reason of the Pod's Warning Event.
const reasonUntrustedEntry = "UntrustedNodePortEntry"

// tell sends the Pods of r's skipped entries a Warning Event for each
// reason not told yet.
func (u *untrustedEntries) tell(c *cluster, r builder.Report) {
	for _, s := range r.Skipped {
		if s.Kind != builder.SkipEntry {
			continue
		}
		u.mu.Lock()
		if u.told == nil {
			u.told = map[string]map[string]bool{}
		}
		if u.told[s.Name] == nil {
			u.told[s.Name] = map[string]bool{}
		}
		told := u.told[s.Name][s.Reason]
		u.told[s.Name][s.Reason] = true
		u.mu.Unlock()
		if told || c.store.Pods == nil {
			continue
		}
		if obj, ok, _ := c.store.Pods.GetByKey(s.Name); ok {
			if pod, ok := obj.(*corev1.Pod); ok {
				c.recorder.Event(pod, corev1.EventTypeWarning, reasonUntrustedEntry, "Annotation "+s.Reason+": not a load balancer member")
			}
		}
	}
}

// podDeleted forgets what was told a Pod that is gone.
func (u *untrustedEntries) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		u.mu.Lock()
		delete(u.told, pod.Namespace+"/"+pod.Name)
		u.mu.Unlock()
	}
}
