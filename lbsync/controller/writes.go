package controller

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// writtenTTL bounds how long a write of ours stands in for the cache: an
// informer that relists may never show our resourceVersion, and by then
// the cache holds the object as it is.
const writtenTTL = 30 * time.Second

// ownWrites remembers the object each write of ours returned until the
// informer's cache shows it. A sync that runs before then reads the cache
// from before the write: compared with that older status, a status it
// wants may look unchanged while the API server holds what the previous
// sync wrote (a Gateway's listener kept counting a route deleted since,
// and no event came to correct it). The syncs take the status of our last
// write instead (pending), and the spec from the cache, which is never
// older than the informer's own events.
type ownWrites struct {
	mu sync.Mutex
	m  map[types.UID]ownWrite
}

type ownWrite struct {
	obj metav1.Object
	at  time.Time
}

// wrote records obj as the API server returned it from a write of ours.
func (w *ownWrites) wrote(obj metav1.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.UID]ownWrite{}
	}
	now := time.Now()
	for uid, rec := range w.m {
		if now.Sub(rec.at) > writtenTTL {
			delete(w.m, uid) // an object deleted, or a relist that skipped our write
		}
	}
	w.m[obj.GetUID()] = ownWrite{obj: obj, at: now}
}

// observed is an informer's add or update of obj: once the cache shows the
// resourceVersion of our write, the cache is as new as it.
func (w *ownWrites) observed(obj any) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if rec, ok := w.m[o.GetUID()]; ok && rec.obj.GetResourceVersion() == o.GetResourceVersion() {
		delete(w.m, o.GetUID())
	}
}

// pending returns our last write of cached's object when the cache has not
// shown it yet; ok is false when the cache is as new as our writes.
func pending[T metav1.Object](w *ownWrites, cached T) (last T, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rec, found := w.m[cached.GetUID()]
	if !found {
		return last, false
	}
	if rec.obj.GetResourceVersion() == cached.GetResourceVersion() || time.Since(rec.at) > writtenTTL {
		delete(w.m, cached.GetUID())
		return last, false
	}
	last, ok = rec.obj.(T)
	return last, ok
}
