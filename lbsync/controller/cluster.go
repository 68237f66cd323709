package controller

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodeportlocal/npl/lbsync/inputs"
)

// cluster is the Kubernetes side that the shell, the reconcilers and the
// applier share: the settings, the API client, the informers' caches, the
// Event recorder and the work queue. It holds no state of the syncs: each
// reconciler, and the applier, keeps its own.
type cluster struct {
	settings Settings
	client   kubernetes.Interface
	// store holds the caches builds read (package inputs, shared with
	// nplctl).
	store    inputs.Store
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[queueKey]
}

// inputSettings are the settings builds read their inputs with.
func (c *cluster) inputSettings() inputs.Settings {
	return inputs.Settings{ClusterName: c.settings.ClusterName, ServiceType: c.settings.ServiceType,
		Family: c.settings.Family, IngressClass: c.settings.IngressClass}
}
