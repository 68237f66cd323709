package controller

import "testing"

// TestFirstPass_doneOnceEachQueuedKeyIsSynced: other keys synced, and a
// key synced again, do not end the first pass; each key it queued does.
func TestFirstPass_doneOnceEachQueuedKeyIsSynced(t *testing.T) {
	var f firstPass
	svc, gw := serviceKey("shop", "web"), gatewayKey("shop", "gw")
	f.start([]queueKey{svc, gw})
	for range 3 {
		f.synced(serviceKey("shop", "other")) // an event's key
	}
	f.synced(svc)
	f.synced(svc) // synced again
	if f.done() {
		t.Fatal("done before the Gateway of the first pass is synced")
	}
	f.synced(gw)
	if !f.done() {
		t.Error("not done once every key of the first pass is synced")
	}
	var empty firstPass
	empty.start(nil)
	if !empty.done() {
		t.Error("a first pass with nothing queued is not done")
	}
}
