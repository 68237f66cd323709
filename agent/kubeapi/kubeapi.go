// Package kubeapi is npl-agent's client of the Kubernetes API: REST clients
// of core/v1 and discovery/v1 alone, on a scheme of those two groups.
// client-go's clientset and its scheme register the types of every API
// group; linked into the agent they were half its binary and most of its
// resident memory, for the five resources it uses.
package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
)

// Scheme holds the types of core/v1 and discovery/v1 and the options of
// meta/v1: what the agent decodes, and what its Event recorder needs to
// name the objects its Events are about.
var Scheme = runtime.NewScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	// As client-go's scheme: the unversioned meta types (ListOptions as
	// query parameters, Status), then the groups.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(discoveryv1.AddToScheme(Scheme))
}

// Resource is a resource the agent lists and watches in all namespaces.
type Resource string

// The resources of the agent.
const (
	Pods           Resource = "pods"
	Services       Resource = "services"
	Nodes          Resource = "nodes"
	EndpointSlices Resource = "endpointslices"
)

// Interface is what the agent reads and writes through the Kubernetes API.
// Client implements it; kubeapitest adapts client-go's fake clientset for
// unit tests.
type Interface interface {
	// ListWatch lists and watches r in all namespaces, with the selectors
	// tweak sets, for an informer of r.
	ListWatch(r Resource, tweak func(*metav1.ListOptions)) cache.ListerWatcher
	// GetNode reads a Node.
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// ListPods lists the Pods of all namespaces that opts select.
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	// PatchPodStatus applies a JSON merge patch to a Pod through its status
	// subresource.
	PatchPodStatus(ctx context.Context, namespace, name string, patch []byte) error
	// Events is where the Event recorder writes.
	Events() record.EventSink
}

// Client is Interface on REST clients of the API server.
type Client struct {
	core      rest.Interface // core/v1
	discovery rest.Interface // discovery.k8s.io/v1
}

var _ Interface = (*Client)(nil)

// NewForConfig returns a Client of cfg. Both groups share one HTTP client
// and one rate limiter of cfg's QPS and Burst, as client-go's clientset.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("kubernetes client: burst must be greater than 0 when QPS is")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	core, err := restClient(c, "/api", corev1.SchemeGroupVersion, httpClient)
	if err != nil {
		return nil, err
	}
	discovery, err := restClient(c, "/apis", discoveryv1.SchemeGroupVersion, httpClient)
	if err != nil {
		return nil, err
	}
	return &Client{core: core, discovery: discovery}, nil
}

func restClient(c rest.Config, apiPath string, gv schema.GroupVersion, httpClient *http.Client) (rest.Interface, error) {
	c.APIPath, c.GroupVersion = apiPath, &gv
	c.NegotiatedSerializer = codecs.WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(&c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client of %s: %w", gv, err)
	}
	return rc, nil
}

func (c *Client) rest(r Resource) rest.Interface {
	if r == EndpointSlices {
		return c.discovery
	}
	return c.core
}

// newList returns an empty list of r.
func newList(r Resource) (runtime.Object, error) {
	switch r {
	case Pods:
		return &corev1.PodList{}, nil
	case Services:
		return &corev1.ServiceList{}, nil
	case Nodes:
		return &corev1.NodeList{}, nil
	case EndpointSlices:
		return &discoveryv1.EndpointSliceList{}, nil
	}
	return nil, fmt.Errorf("list %s: not a resource of npl-agent", r)
}

// timeout is the request timeout that opts ask for, or none.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// The requests below are those of client-go's clientset: protobuf (which
// every built-in type prefers) unless the configuration sets a content
// type, but for the Event recorder's writes.

func (c *Client) list(ctx context.Context, r Resource, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := newList(r)
	if err != nil {
		return nil, err
	}
	err = c.rest(r).Get().UseProtobufAsDefault().Resource(string(r)).
		VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Do(ctx).Into(list)
	return list, err
}

func (c *Client) watch(ctx context.Context, r Resource, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest(r).Get().UseProtobufAsDefault().Resource(string(r)).
		VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Watch(ctx)
}

// ListWatch implements Interface.
func (c *Client) ListWatch(r Resource, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return ListWatch(tweak, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return c.list(ctx, r, opts)
	}, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return c.watch(ctx, r, opts)
	})
}

// ListWatch returns the ListerWatcher of listFn and watchFn, which see the
// options after tweak (when not nil) set its selectors.
func ListWatch(tweak func(*metav1.ListOptions), listFn cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext) *cache.ListWatch {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			tweak(&opts)
			return listFn(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			tweak(&opts)
			return watchFn(ctx, opts)
		},
	}
}

// GetNode implements Interface.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := c.core.Get().UseProtobufAsDefault().Resource(string(Nodes)).Name(name).
		VersionedParams(&metav1.GetOptions{}, parameterCodec).Do(ctx).Into(node)
	return node, err
}

// ListPods implements Interface.
func (c *Client) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	list, err := c.list(ctx, Pods, opts)
	if err != nil {
		return nil, err
	}
	return list.(*corev1.PodList), nil
}

// PatchPodStatus implements Interface.
func (c *Client) PatchPodStatus(ctx context.Context, namespace, name string, patch []byte) error {
	return c.core.Patch(types.MergePatchType).UseProtobufAsDefault().Namespace(namespace).Resource(string(Pods)).
		Name(name).SubResource("status").VersionedParams(&metav1.PatchOptions{}, parameterCodec).
		Body(patch).Do(ctx).Error()
}

// Events implements Interface: Events are written in their own namespace,
// in JSON, as client-go's EventSinkImpl writes them.
func (c *Client) Events() record.EventSink { return eventSink{c.core} }

type eventSink struct{ core rest.Interface }

func (s eventSink) Create(event *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.core.Post().NamespaceIfScoped(event.Namespace, event.Namespace != "").
		Resource("events").Body(event).Do(context.Background()).Into(out)
	return out, err
}

func (s eventSink) Update(event *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.core.Put().NamespaceIfScoped(event.Namespace, event.Namespace != "").
		Resource("events").Name(event.Name).Body(event).Do(context.Background()).Into(out)
	return out, err
}

func (s eventSink) Patch(event *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.core.Patch(types.StrategicMergePatchType).
		NamespaceIfScoped(event.Namespace, event.Namespace != "").
		Resource("events").Name(event.Name).Body(data).Do(context.Background()).Into(out)
	return out, err
}
