// Package netnstest runs a package's tests in a private network namespace,
// so tests that bind wildcard sockets or program iptables never touch the
// host's. Tests that need the namespace call Require and fail, with how to
// fix it, when it could not be made; the others run anyway.
package netnstest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// parentEnv carries the parent's network namespace to the re-executed test
// binary, which checks that it really got a new one.
const parentEnv = "NPL_NETNSTEST_PARENT_NETNS"

// problem says why the private namespace is not there ("" when it is).
var problem string

// Main is a TestMain: it re-executes the test binary under
// `unshare --net --mount`, brings lo up there and checks that tools are on
// PATH, then runs the tests.
func Main(m *testing.M, tools ...string) {
	parent := os.Getenv(parentEnv)
	if parent == "" {
		code, err := reexec()
		if err == nil {
			os.Exit(code)
		}
		problem = err.Error()
		os.Exit(m.Run())
	}
	self, err := os.Readlink("/proc/self/ns/net")
	switch {
	case err != nil:
		problem = fmt.Sprintf("read own network namespace: %v", err)
	case self == parent:
		problem = "the re-executed test binary is still in the host's network namespace"
	default:
		// Only now, in the private namespace, is it safe to change links.
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			problem = fmt.Sprintf("ip link set lo up (apt-get install iproute2): %v: %s", err, out)
		}
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil && problem == "" {
			problem = fmt.Sprintf("%s not found: run make deps (apt-get install iptables nftables conntrack iproute2 util-linux)", tool)
		}
	}
	os.Exit(m.Run())
}

func reexec() (int, error) {
	const how = "run the tests as root (`sudo go test ./...`) on Linux with util-linux installed"
	if os.Geteuid() != 0 {
		return 0, errors.New("not root: " + how)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return 0, fmt.Errorf("unshare not found (apt-get install util-linux): %v", err)
	}
	if out, err := exec.Command(unshare, "--net", "--mount", "true").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("cannot create a network namespace (%v: %s): %s", err, out, how)
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return 0, fmt.Errorf("read own network namespace: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("find test binary: %w", err)
	}
	cmd := exec.Command(unshare, append([]string{"--net", "--mount", "--", exe}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), parentEnv+"="+self)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The namespace dies with the child; the child dies with us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("re-execute test binary under unshare: %w", err)
	}
	return 0, nil
}

// Require fails the test unless it runs in the private network namespace
// Main created; what says what the test does there.
func Require(t testing.TB, what string) {
	t.Helper()
	if problem != "" {
		t.Fatalf("this test %s and must run in a private network namespace: %s", what, problem)
	}
}

// NewNetNS creates another network namespace (inside the private one) and
// returns a path to it that stays valid until the test ends.
func NewNetNS(t testing.TB) string {
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
	t.Cleanup(func() { _ = unix.Close(r.fd) })
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), r.fd)
}
