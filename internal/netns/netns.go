// Package netns runs code inside another network namespace.
package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a dedicated OS thread that has joined the network namespace
// at path (a file such as /run/netns/NAME or /proc/PID/ns/net), so that the
// sockets fn opens belong to that namespace; with an empty path it runs fn
// directly. The thread is never unlocked: when fn returns, the runtime ends
// the thread instead of reusing it in the wrong namespace.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			errc <- fmt.Errorf("open network namespace: %w", err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
