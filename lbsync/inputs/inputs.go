// Package inputs gathers what a load balancer build reads: for a Service,
// its candidate Pods (through its selector or, without one, its
// hand-written EndpointSlices) and the Nodes; for Ingresses, their
// backend Services, those Services' Pods and the TLS Secrets they name; for
// a Gateway, its routes, their backends and its certificate Secrets. The
// controller reads them from its informer caches and nplctl from one List of
// each kind, through the same Store, so that `nplctl pools` expects exactly
// what npl-lbsync builds.
package inputs

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/ingress"
)

// The indexes of the Store's indexers.
const (
	// SelectorIndex indexes Services by each term of their selector.
	SelectorIndex = "selectorTerm"
	// LabelIndex indexes Pods by each of their labels.
	LabelIndex = "labelTerm"
	// BackendIndex indexes Ingresses by the "namespace/name" of each
	// backend Service.
	BackendIndex = "backendService"
	// SliceServiceIndex indexes EndpointSlices by the "namespace/name" of
	// their Service.
	SliceServiceIndex = "sliceService"
	// SlicePodIndex indexes EndpointSlices by the "namespace/name" of each
	// Pod their endpoints reference.
	SlicePodIndex = "slicePod"
)

// Settings say how members are built.
type Settings struct {
	ClusterName string
	ServiceType string
	Family      string
	// IngressClass is our IngressClass, the name of a shared load balancer.
	IngressClass string
	// AgentPorts is the range npl-agent allocates node ports from
	// (nodePortRange): annotation entries outside it, or that name an
	// address of another node, are no members (builder.Input.AgentPorts).
	AgentPorts contract.PortRange
}

// Store holds the objects builds read, indexed as Indexers says. Any
// indexer may be nil where its kind is not needed.
type Store struct {
	Services       cache.Indexer
	Pods           cache.Indexer
	Nodes          cache.Indexer
	Ingresses      cache.Indexer
	IngressClasses cache.Indexer
	// EndpointSlices holds the slices listed with contract.HandWrittenSlices,
	// which choose the Pods of Services without a selector.
	EndpointSlices cache.Indexer
}

// ServiceIndexers and the others are the indexes each kind needs; the
// controller adds them to its informers.
func ServiceIndexers() cache.Indexers { return cache.Indexers{SelectorIndex: serviceSelectorTerms} }

// PodIndexers index Pods by label.
func PodIndexers() cache.Indexers { return cache.Indexers{LabelIndex: podLabelTerms} }

// IngressIndexers index Ingresses by backend Service.
func IngressIndexers() cache.Indexers { return cache.Indexers{BackendIndex: ingressBackendKeys} }

// EndpointSliceIndexers index EndpointSlices by Service and by the Pods
// they reference.
func EndpointSliceIndexers() cache.Indexers {
	return cache.Indexers{SliceServiceIndex: sliceServiceKey, SlicePodIndex: slicePodKeys}
}

func sliceServiceKey(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || contract.SliceService(s) == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + contract.SliceService(s)}, nil
}

func slicePodKeys(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	names := contract.SlicePods(s)
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, s.Namespace+"/"+n)
	}
	return out, nil
}

// term is an index value: one label key=value in a namespace.
func term(namespace, key, value string) string { return namespace + "/" + key + "=" + value }

func serviceSelectorTerms(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	out := make([]string, 0, len(svc.Spec.Selector))
	for k, v := range svc.Spec.Selector {
		out = append(out, term(svc.Namespace, k, v))
	}
	return out, nil
}

func podLabelTerms(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	out := make([]string, 0, len(pod.Labels))
	for k, v := range pod.Labels {
		out = append(out, term(pod.Namespace, k, v))
	}
	return out, nil
}

func ingressBackendKeys(obj any) ([]string, error) {
	ing, ok := obj.(*networkingv1.Ingress)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, b := range ingress.Backends(ing) {
		out = append(out, b.String())
	}
	return out, nil
}

// PodsFor returns the candidate Pods of a Service through the label index:
// the Pods carrying one of its selector terms that it selects; for a Service
// without a selector, the Pods its EndpointSlices reference.
func (s Store) PodsFor(svc *corev1.Service) []*corev1.Pod {
	if s.Pods == nil {
		return nil
	}
	if len(svc.Spec.Selector) == 0 {
		return s.slicePods(svc)
	}
	var best []any
	first := true
	for k, v := range svc.Spec.Selector {
		objs, err := s.Pods.ByIndex(LabelIndex, term(svc.Namespace, k, v))
		if err != nil {
			return nil
		}
		if first || len(objs) < len(best) {
			best, first = objs, false
		}
	}
	out := make([]*corev1.Pod, 0, len(best))
	for _, o := range best {
		if p, ok := o.(*corev1.Pod); ok && contract.Selects(svc, p) {
			out = append(out, p)
		}
	}
	return out
}

// slicePods returns the Pods a selectorless Service's EndpointSlices choose.
func (s Store) slicePods(svc *corev1.Service) []*corev1.Pod {
	slices := s.SlicesOf(svc)
	var out []*corev1.Pod
	seen := map[string]bool{}
	for _, sl := range slices {
		for _, name := range contract.SlicePods(sl) {
			key := svc.Namespace + "/" + name
			if seen[key] {
				continue
			}
			seen[key] = true
			obj, ok, err := s.Pods.GetByKey(key)
			if err != nil || !ok {
				continue
			}
			if p, ok := obj.(*corev1.Pod); ok && contract.Chooses(svc, p, slices) {
				out = append(out, p)
			}
		}
	}
	return out
}

// SlicesOf returns the Service's EndpointSlices of the Store, which
// choose its Pods when it has no selector.
func (s Store) SlicesOf(svc *corev1.Service) []*discoveryv1.EndpointSlice {
	if s.EndpointSlices == nil {
		return nil
	}
	objs, err := s.EndpointSlices.ByIndex(SliceServiceIndex, svc.Namespace+"/"+svc.Name)
	if err != nil {
		return nil
	}
	return Typed[*discoveryv1.EndpointSlice](objs)
}

// ServicesSelecting returns the Services that choose the Pod: those whose
// selector matches it, and those without a selector whose EndpointSlices
// reference it.
func (s Store) ServicesSelecting(pod *corev1.Pod) []*corev1.Service {
	seen := map[string]bool{}
	var out []*corev1.Service
	if s.EndpointSlices != nil {
		objs, _ := s.EndpointSlices.ByIndex(SlicePodIndex, pod.Namespace+"/"+pod.Name)
		for _, sl := range Typed[*discoveryv1.EndpointSlice](objs) {
			svc := s.Service(sl.Namespace, contract.SliceService(sl))
			if svc == nil || seen[svc.Namespace+"/"+svc.Name] || !contract.Chooses(svc, pod, s.SlicesOf(svc)) {
				continue
			}
			seen[svc.Namespace+"/"+svc.Name] = true
			out = append(out, svc)
		}
	}
	for k, v := range pod.Labels {
		objs, err := s.Services.ByIndex(SelectorIndex, term(pod.Namespace, k, v))
		if err != nil {
			continue
		}
		for _, o := range objs {
			svc, ok := o.(*corev1.Service)
			if !ok || seen[svc.Namespace+"/"+svc.Name] || !contract.Selects(svc, pod) {
				continue
			}
			seen[svc.Namespace+"/"+svc.Name] = true
			out = append(out, svc)
		}
	}
	return out
}

// Service returns the Service namespace/name, nil when there is none.
func (s Store) Service(namespace, name string) *corev1.Service {
	obj, ok, err := s.Services.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	svc, _ := obj.(*corev1.Service)
	return svc
}

// IngressesOf returns the Ingresses that name the Service (namespace/name)
// as a backend.
func (s Store) IngressesOf(svcKey string) []*networkingv1.Ingress {
	if s.Ingresses == nil {
		return nil
	}
	objs, err := s.Ingresses.ByIndex(BackendIndex, svcKey)
	if err != nil {
		return nil
	}
	out := make([]*networkingv1.Ingress, 0, len(objs))
	for _, o := range objs {
		if ing, ok := o.(*networkingv1.Ingress); ok {
			out = append(out, ing)
		}
	}
	return out
}

// Classes returns the IngressClasses.
func (s Store) Classes() []*networkingv1.IngressClass {
	if s.IngressClasses == nil {
		return nil
	}
	return Typed[*networkingv1.IngressClass](s.IngressClasses.List())
}

// AllIngresses returns every Ingress of the Store.
func (s Store) AllIngresses() []*networkingv1.Ingress {
	if s.Ingresses == nil {
		return nil
	}
	return Typed[*networkingv1.Ingress](s.Ingresses.List())
}

// AllServices returns every Service of the Store.
func (s Store) AllServices() []*corev1.Service {
	return Typed[*corev1.Service](s.Services.List())
}

// Typed returns the objects of type T among objs (an informer's List), in
// their order.
func Typed[T any](objs []any) []T {
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// nodes returns the Nodes a build of pods reads: every Node in NodePort
// mode (they are the members), the Pods' own in NodePortLocal mode (their
// addresses are those annotation entries may name), none otherwise.
func (s Store) nodes(set Settings, pods []*corev1.Pod) []*corev1.Node {
	if s.Nodes == nil {
		return nil
	}
	switch set.ServiceType {
	case builder.ServiceTypeNodePort:
		return Typed[*corev1.Node](s.Nodes.List())
	case builder.ServiceTypeClusterIP:
		return nil
	}
	seen := map[string]bool{}
	var out []*corev1.Node
	for _, p := range pods {
		name := p.Spec.NodeName
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		if obj, ok, _ := s.Nodes.GetByKey(name); ok {
			if n, ok := obj.(*corev1.Node); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

// ServiceInput is the builder's input for a LoadBalancer Service.
func (s Store) ServiceInput(set Settings, svc *corev1.Service) builder.Input {
	pods := s.PodsFor(svc)
	return builder.Input{
		ClusterName: set.ClusterName, ServiceType: set.ServiceType, Family: set.Family,
		Service: svc, Pods: pods, EndpointSlices: s.SlicesOf(svc), Nodes: s.nodes(set, pods), AgentPorts: set.AgentPorts,
	}
}

// backends is what a build reads of its backend Services: each Service,
// its candidate Pods and its hand-written EndpointSlices.
type backends struct {
	seen     map[string]bool
	services []*corev1.Service
	pods     []*corev1.Pod
	slices   []*discoveryv1.EndpointSlice
}

// add adds the Service namespace/name of s, once; a missing Service is
// left for the builder to report.
func (b *backends) add(s Store, namespace, name string) {
	key := namespace + "/" + name
	if b.seen[key] {
		return
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	b.seen[key] = true
	svc := s.Service(namespace, name)
	if svc == nil {
		return
	}
	b.services = append(b.services, svc)
	b.pods = append(b.pods, s.PodsFor(svc)...)
	b.slices = append(b.slices, s.SlicesOf(svc)...)
}

// SecretGetter reads one Secret.
type SecretGetter func(ctx context.Context, namespace, name string) (*corev1.Secret, error)

// APISecrets reads Secrets from the API, on demand: npl-lbsync holds no
// Secret it does not serve.
func APISecrets(client kubernetes.Interface) SecretGetter {
	return func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
		return client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	}
}

// ForbiddenSecret is a TLS Secret of an Ingress that npl-lbsync may not
// read.
type ForbiddenSecret struct {
	Ingress *networkingv1.Ingress
	Secret  string
}

// IngressInput is the Ingress builder's input for ings (one Ingress, or all
// of them on a shared VIP). A missing backend or Secret is left for the
// builder to report; a Secret that may not be read is left out and named in
// forbidden (the Ingress is then served over HTTP only).
func (s Store) IngressInput(ctx context.Context, set Settings, ings []*networkingv1.Ingress, shared bool, secrets SecretGetter) (in ingress.Input, forbidden []ForbiddenSecret, err error) {
	in = ingress.Input{
		ClusterName: set.ClusterName, ServiceType: set.ServiceType, Family: set.Family,
		Ingresses: ings, SharedVIP: shared, IngressClass: set.IngressClass, AgentPorts: set.AgentPorts,
	}
	var b backends
	for _, ing := range ings {
		for _, ref := range ingress.Backends(ing) {
			b.add(s, ref.Namespace, ref.Name)
		}
	}
	in.Services, in.Pods, in.EndpointSlices, in.Nodes = b.services, b.pods, b.slices, s.nodes(set, b.pods)
	for _, ing := range ings {
		for _, t := range ing.Spec.TLS {
			if t.SecretName == "" || secrets == nil {
				continue
			}
			secret, err := secrets(ctx, ing.Namespace, t.SecretName)
			switch {
			case apierrors.IsNotFound(err):
			case apierrors.IsForbidden(err):
				forbidden = append(forbidden, ForbiddenSecret{Ingress: ing, Secret: t.SecretName})
			case err != nil:
				return in, forbidden, fmt.Errorf("get TLS secret %s/%s of ingress %s: %w", ing.Namespace, t.SecretName, ing.Name, err)
			default:
				in.Secrets = append(in.Secrets, secret)
			}
		}
	}
	return in, forbidden, nil
}

// FromAPI lists the objects of namespace (all when empty) into a Store,
// once, for a command that builds without informers. Secrets are not
// listed: builds read them with a SecretGetter.
func FromAPI(ctx context.Context, client kubernetes.Interface, namespace string, set Settings) (Store, error) {
	s, err := IngressesFromAPI(ctx, client, namespace)
	if err != nil {
		return s, err
	}
	s.Services = cache.NewIndexer(cache.MetaNamespaceKeyFunc, ServiceIndexers())
	svcs, err := client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list services: %w", err)
	}
	if err := fill(s.Services, svcs.Items); err != nil {
		return s, err
	}
	s.Pods = cache.NewIndexer(cache.MetaNamespaceKeyFunc, PodIndexers())
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list pods: %w", err)
	}
	if err := fill(s.Pods, pods.Items); err != nil {
		return s, err
	}
	s.EndpointSlices = cache.NewIndexer(cache.MetaNamespaceKeyFunc, EndpointSliceIndexers())
	slices, err := client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: contract.HandWrittenSlices})
	if err != nil {
		return s, fmt.Errorf("list endpointslices: %w", err)
	}
	if err := fill(s.EndpointSlices, slices.Items); err != nil {
		return s, err
	}
	if set.ServiceType != builder.ServiceTypeClusterIP {
		s.Nodes = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return s, fmt.Errorf("list nodes: %w", err)
		}
		if err := fill(s.Nodes, nodes.Items); err != nil {
			return s, err
		}
	}
	return s, nil
}

// IngressesFromAPI lists the Ingresses of namespace (all when empty) and
// the IngressClasses into a Store, indexed by backend Service.
func IngressesFromAPI(ctx context.Context, client kubernetes.Interface, namespace string) (Store, error) {
	s := Store{
		Ingresses:      cache.NewIndexer(cache.MetaNamespaceKeyFunc, IngressIndexers()),
		IngressClasses: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
	}
	ings, err := client.NetworkingV1().Ingresses(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list ingresses: %w", err)
	}
	if err := fill(s.Ingresses, ings.Items); err != nil {
		return s, err
	}
	classes, err := client.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list ingressclasses: %w", err)
	}
	return s, fill(s.IngressClasses, classes.Items)
}

// fill adds the listed items to idx.
func fill[T any](idx cache.Indexer, items []T) error {
	for i := range items {
		if err := idx.Add(&items[i]); err != nil {
			return fmt.Errorf("index %T: %w", &items[i], err)
		}
	}
	return nil
}
