package providers

import (
	"sync"
	"testing"
)

// A held name is not deleted; a hold that starts while a delete runs waits
// for it, so the object it then writes is written after the delete.
func TestHolds(t *testing.T) {
	var h Holds
	release := h.Hold(map[string]bool{"a": true})
	deleted := map[string]bool{}
	del := func(n string) func() error { return func() error { deleted[n] = true; return nil } }
	_ = h.UnlessHeld("a", del("a"))
	_ = h.UnlessHeld("b", del("b"))
	if deleted["a"] || !deleted["b"] {
		t.Fatalf("deleted %v, want b only", deleted)
	}
	release()
	_ = h.UnlessHeld("a", del("a"))
	if !deleted["a"] {
		t.Fatal("a released is not deleted")
	}

	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		_ = h.UnlessHeld("c", func() error {
			close(started)
			note("delete")
			return nil
		})
		close(done)
	}()
	<-started
	h.Hold(map[string]bool{"c": true})
	note("hold")
	<-done
	if len(order) != 2 || order[0] != "delete" {
		t.Errorf("order %v, want the delete before the hold", order)
	}
}
