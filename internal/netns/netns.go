// Package netns runs code inside another network namespace.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread that has entered the network namespace at path
// (a file such as /run/netns/NAME or /proc/PID/ns/net), so that the sockets fn
// opens belong to that namespace; with an empty path it runs fn directly.
// The thread then returns to its own namespace and is released: a child
// process forked by fn with Pdeathsig does not die with a discarded thread.
// If the thread cannot return, it stays locked, so Go ends it rather than
// reuse it in the wrong namespace.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current network namespace: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open network namespace %s: %w", path, err)
			return
		}
		err = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET)
		target.Close()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(fnErr, fmt.Errorf("leave network namespace %s: %w", path, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// IPBatch runs several ip(8) commands in one exec (`ip -batch -`), inside
// the named network namespace (`ip -n NAME`) when name is not empty. It stops
// at the first failing line and returns its output in the error.
func IPBatch(ctx context.Context, name string, lines ...string) error {
	args := []string{"-batch", "-"}
	if name != "" {
		args = append([]string{"-n", name}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		where := "the current namespace"
		if name != "" {
			where = "netns " + name
		}
		return fmt.Errorf("ip batch in %s: %w: %s", where, err, bytes.TrimSpace(out))
	}
	return nil
}
