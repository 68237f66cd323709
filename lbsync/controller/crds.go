package controller

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdSettle is how long after a change of a watched group's CRD discovery
// is asked again, every crdRecheck: the API server serves a new CRD a
// moment after it is Established, and stops serving a deleted one once
// its objects are gone. An error (of discovery, or starting the
// informers) is retried with a backoff from crdRecheck to crdMaxBackoff
// until a try succeeds, window or not.
const (
	crdSettle     = 30 * time.Second
	crdRecheck    = 2 * time.Second
	crdMaxBackoff = time.Minute
)

// CRDWatch is API groups whose CRDs WatchCRDs follows, and what makes the
// controller serve what of them the API server serves.
type CRDWatch struct {
	// Groups are the API groups: their CRDs are named <plural>.<group>.
	Groups []string
	// Sync asks discovery what of the groups is served and makes the
	// controller serve that; it runs after each change of the groups'
	// CRDs, so it must do nothing when nothing changed.
	Sync func(context.Context) error
}

// WatchCRDs follows the CustomResourceDefinitions of each watch's groups
// (names only, one informer for all) until ctx ends, and calls the
// watch's Sync after each change of one of them: optional kinds are
// served when their CRDs are installed after the start, without a
// restart.
func WatchCRDs(ctx context.Context, meta metadata.Interface, watches ...CRDWatch) {
	changed := make([]chan struct{}, len(watches))
	for i := range changed {
		changed[i] = make(chan struct{}, 1)
	}
	signal := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m, ok := obj.(interface{ GetName() string })
		if !ok {
			return
		}
		for i, w := range watches {
			if slices.ContainsFunc(w.Groups, func(g string) bool { return strings.HasSuffix(m.GetName(), "."+g) }) {
				select {
				case changed[i] <- struct{}{}:
				default:
				}
			}
		}
	}
	factory := metadatainformer.NewSharedInformerFactory(meta, 0)
	inf := factory.ForResource(crdResource).Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: signal, UpdateFunc: func(_, obj any) { signal(obj) }, DeleteFunc: signal,
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	var wg sync.WaitGroup
	for i, w := range watches {
		wg.Go(func() { w.follow(ctx, changed[i]) })
	}
	wg.Wait()
}

// follow calls Sync every crdRecheck for crdSettle after each signal on
// changed, and after a failure with a backoff until it succeeds, until ctx
// ends.
func (w CRDWatch) follow(ctx context.Context, changed <-chan struct{}) {
	logger := klog.FromContext(ctx)
	var settle, retry <-chan time.Time
	var failures crdRetry
	tick := time.NewTicker(crdRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			settle = time.After(crdSettle)
		case <-settle:
			settle = nil
		case <-tick.C:
		case <-retry:
			retry = nil
		}
		if retry != nil || (settle == nil && !failures.failing()) {
			continue // waiting for the backoff, or nothing changed
		}
		err := w.Sync(ctx)
		if err == nil {
			failures.succeeded()
			continue
		}
		delay, log := failures.failed(err)
		if log {
			logger.Error(err, "Look for the CRDs installed", "groups", w.Groups, "retryIn", delay)
		}
		retry = time.After(delay)
	}
}

// crdRetry is the backoff of a CRDWatch after errors, and the error last
// logged, so that each distinct error is logged once while it lasts.
type crdRetry struct {
	delay  time.Duration
	logged string
}

// failing reports whether the last try failed.
func (r *crdRetry) failing() bool { return r.delay > 0 }

// failed records a failed try: it returns how long to wait before the
// next (doubling from crdRecheck up to crdMaxBackoff), and whether to log
// err (it differs from the error last logged).
func (r *crdRetry) failed(err error) (time.Duration, bool) {
	r.delay = min(max(2*r.delay, crdRecheck), crdMaxBackoff)
	log := err.Error() != r.logged
	r.logged = err.Error()
	return r.delay, log
}

// succeeded records a try that succeeded.
func (r *crdRetry) succeeded() { *r = crdRetry{} }
