package portalloc_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeportlocal/npl/internal/netnstest"
)

// TestMain runs the tests in a private network namespace (netnstest).
func TestMain(m *testing.M) { netnstest.Main(m) }

// requirePrivateNetNS fails the test unless it runs in that namespace.
func requirePrivateNetNS(t *testing.T) {
	t.Helper()
	netnstest.Require(t, "binds wildcard sockets")
}

// newNetNS creates another network namespace and returns a path to it that
// stays valid until the test ends.
func newNetNS(t *testing.T) string {
	t.Helper()
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, namespace and all.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("unshare network namespace: %w", err)}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		done <- result{fd: fd, err: err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { unix.Close(r.fd) })
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), r.fd)
}
