// Package kubeapitest adapts client-go's clientset, a fake one in unit
// tests, to kubeapi.Interface.
package kubeapitest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodeportlocal/npl/agent/kubeapi"
)

// Clientset is kubeapi.Interface on a client-go clientset.
type Clientset struct {
	kubernetes.Interface
}

var _ kubeapi.Interface = Clientset{}

// New adapts c.
func New(c kubernetes.Interface) Clientset { return Clientset{c} }

// ListWatch implements kubeapi.Interface. A fake clientset says it cannot
// serve watch lists, so informers list first, as client-go's own.
func (c Clientset) ListWatch(r kubeapi.Resource, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	var list cache.ListWithContextFunc
	var watchFn cache.WatchFuncWithContext
	switch r {
	case kubeapi.Pods:
		pods := c.CoreV1().Pods("")
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }
		watchFn = pods.Watch
	case kubeapi.Services:
		svcs := c.CoreV1().Services("")
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return svcs.List(ctx, o) }
		watchFn = svcs.Watch
	case kubeapi.Nodes:
		nodes := c.CoreV1().Nodes()
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) }
		watchFn = nodes.Watch
	case kubeapi.EndpointSlices:
		slices := c.DiscoveryV1().EndpointSlices("")
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return slices.List(ctx, o) }
		watchFn = slices.Watch
	default:
		err := fmt.Errorf("kubeapitest: no resource %q", r)
		list = func(context.Context, metav1.ListOptions) (runtime.Object, error) { return nil, err }
		watchFn = func(context.Context, metav1.ListOptions) (watch.Interface, error) { return nil, err }
	}
	return cache.ToListWatcherWithWatchListSemantics(kubeapi.ListWatch(tweak, list, watchFn), c.Interface)
}

// GetNode implements kubeapi.Interface.
func (c Clientset) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// ListPods implements kubeapi.Interface.
func (c Clientset) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return c.CoreV1().Pods("").List(ctx, opts)
}

// PatchPodStatus implements kubeapi.Interface.
func (c Clientset) PatchPodStatus(ctx context.Context, namespace, name string, patch []byte) error {
	_, err := c.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// Events implements kubeapi.Interface.
func (c Clientset) Events() record.EventSink {
	return &typedcorev1.EventSinkImpl{Interface: c.CoreV1().Events("")}
}
