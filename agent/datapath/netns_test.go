package datapath_test

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

// netnsEnv carries the parent's network namespace to the re-executed test
// binary, which refuses to run the socket tests if it did not get a new one.
const netnsEnv = "NPL_DATAPATH_TEST_PARENT_NETNS"

// netnsProblem says why the tests that program iptables cannot run; they
// fail with it instead of touching the host's network namespace.
var netnsProblem string

// TestMain re-executes the test binary under `unshare --net --mount`, so the
// iptables rules, links and sockets of the tests live in a private network
// namespace and never touch the host's.
func TestMain(m *testing.M) {
	parent := os.Getenv(netnsEnv)
	if parent == "" {
		code, err := reexecInPrivateNetNS()
		if err == nil {
			os.Exit(code)
		}
		netnsProblem = err.Error()
		os.Exit(m.Run())
	}
	self, err := os.Readlink("/proc/self/ns/net")
	switch {
	case err != nil:
		netnsProblem = fmt.Sprintf("read own network namespace: %v", err)
	case self == parent:
		netnsProblem = "the re-executed test binary is still in the host's network namespace"
	default:
		// Only now, in the private namespace, is it safe to change links.
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			netnsProblem = fmt.Sprintf("ip link set lo up (apt-get install iproute2): %v: %s", err, out)
		}
	}
	for _, tool := range []string{"iptables", "ip6tables", "iptables-restore", "iptables-save", "conntrack", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil && netnsProblem == "" {
			netnsProblem = fmt.Sprintf("%s not found: apt-get install iptables conntrack util-linux", tool)
		}
	}
	os.Exit(m.Run())
}

func reexecInPrivateNetNS() (int, error) {
	const how = "run the tests as root (e.g. `sudo go test ./agent/datapath/...`) on Linux with util-linux installed"
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
	cmd.Env = append(os.Environ(), netnsEnv+"="+self)
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

// requirePrivateNetNS fails the test unless it runs in the private network
// namespace TestMain created.
func requirePrivateNetNS(t testing.TB) {
	t.Helper()
	if netnsProblem != "" {
		t.Fatalf("this test programs iptables and must run in a private network namespace: %s", netnsProblem)
	}
}

// newNetNS creates another network namespace and returns a path to it that
// stays valid until the test ends.
func newNetNS(t testing.TB) string {
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
