package kubeapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodeportlocal/npl/agent/kubeapi"
	"github.com/nodeportlocal/npl/agent/kubeapi/kubeapitest"
)

// request is what the API server saw of one request.
type request struct {
	Method, Path, Query, ContentType, Accept, Body string
}

// apiServer answers every request with an empty object of the kind asked,
// in protobuf, and records the requests; it returns the configuration of a
// client of it.
func apiServer(t *testing.T) (*rest.Config, func() []request) {
	t.Helper()
	var mu sync.Mutex
	var seen []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), r.Header.Get("Accept"), string(body)})
		mu.Unlock()
		var obj runtime.Object
		if r.URL.Query().Get("watch") == "true" {
			return
		}
		switch r.URL.Path {
		case "/api/v1/pods":
			obj = &corev1.PodList{}
		case "/api/v1/services":
			obj = &corev1.ServiceList{}
		case "/api/v1/nodes":
			obj = &corev1.NodeList{}
		case "/apis/discovery.k8s.io/v1/endpointslices":
			obj = &discoveryv1.EndpointSliceList{}
		case "/api/v1/nodes/n1":
			obj = &corev1.Node{}
		case "/api/v1/namespaces/ns/pods/p/status":
			obj = &corev1.Pod{}
		default:
			obj = &corev1.Event{}
		}
		gvks, _, err := kubeapi.Scheme.ObjectKinds(obj)
		if err != nil {
			t.Errorf("kind of %T: %v", obj, err)
			return
		}
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		if err := protobuf.NewSerializer(kubeapi.Scheme, kubeapi.Scheme).Encode(obj, w); err != nil {
			t.Errorf("encode %T: %v", obj, err)
		}
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, QPS: 50, Burst: 100}, func() []request {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}
}

// calls makes every request npl-agent makes through api, and the Event
// recorder's writes through sink.
func calls(t *testing.T, api kubeapi.Interface, sink record.EventSink) {
	t.Helper()
	ctx := context.Background()
	tweaks := map[kubeapi.Resource]func(*metav1.ListOptions){
		kubeapi.Pods:           func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=n1" },
		kubeapi.Services:       nil,
		kubeapi.Nodes:          func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=n1" },
		kubeapi.EndpointSlices: func(o *metav1.ListOptions) { o.LabelSelector = "a=b" },
	}
	for _, r := range []kubeapi.Resource{kubeapi.Pods, kubeapi.Services, kubeapi.Nodes, kubeapi.EndpointSlices} {
		lw := cache.ToListerWatcherWithContext(api.ListWatch(r, tweaks[r]))
		if _, err := lw.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 500}); err != nil {
			t.Errorf("list %s: %v", r, err)
		}
		// The server ends the watch at once; the request is what counts.
		if w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "7", AllowWatchBookmarks: true}); err == nil {
			w.Stop()
		}
	}
	if _, err := api.GetNode(ctx, "n1"); err != nil {
		t.Errorf("get node: %v", err)
	}
	if _, err := api.ListPods(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"}); err != nil {
		t.Errorf("list pods: %v", err)
	}
	if err := api.PatchPodStatus(ctx, "ns", "p", []byte(`{"metadata":{}}`)); err != nil {
		t.Errorf("patch pod status: %v", err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "ns"}, Reason: "R"}
	for _, write := range []func() (*corev1.Event, error){
		func() (*corev1.Event, error) { return sink.Create(ev) },
		func() (*corev1.Event, error) { return sink.Update(ev) },
		func() (*corev1.Event, error) { return sink.Patch(ev, []byte(`{"count":2}`)) },
	} {
		if _, err := write(); err != nil {
			t.Errorf("event: %v", err)
		}
	}
}

// TestClient_requestsAsClientGosClientset: every request of npl-agent's
// client, the Event recorder's included, is the one client-go's clientset
// makes for it: path, query, content types and body.
func TestClient_requestsAsClientGosClientset(t *testing.T) {
	cfg, requests := apiServer(t)
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	calls(t, kubeapitest.New(clientset), &typedcorev1.EventSinkImpl{Interface: clientset.CoreV1().Events("")})
	want := requests()

	client, err := kubeapi.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	calls(t, client, client.Events())
	if diff := cmp.Diff(want, requests()); diff != "" {
		t.Errorf("requests (-clientset +kubeapi):\n%s", diff)
	}
	if len(want) != 14 {
		t.Errorf("%d requests, want 14: %v", len(want), want)
	}
}
