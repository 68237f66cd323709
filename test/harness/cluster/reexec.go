package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// EnvNetns is set to "1" in the re-executed process that runs inside its
	// private network and mount namespaces.
	EnvNetns = "NPL_TEST_NETNS"
	// envHostNetns carries the launcher's network namespace inode to the child,
	// which refuses to create anything if it still finds itself there.
	envHostNetns = "NPL_TEST_HOST_NETNS"

	// initNetnsInode is the fixed inode of the kernel's initial network
	// namespace (PROC_NET_INIT_INO); it is the host's even where /proc/1 is
	// unreadable.
	initNetnsInode = 0xEFFFFFF9

	privateNetnsDir = "/run/netns"
)

// hostEnv is what the prerequisite check looks at. Tests replace it.
type hostEnv struct {
	euid     int
	lookPath func(file string) (string, error)
}

func realHost() hostEnv { return hostEnv{euid: os.Geteuid(), lookPath: exec.LookPath} }

// requiredTools are the programs the harness runs, with the package that
// provides each on Debian and Ubuntu.
var requiredTools = []struct{ name, pkg string }{
	{"unshare", "util-linux"},
	{"ip", "iproute2"},
	{"iptables", "iptables"},
}

// checkHost returns one line that says what is missing and how to get it.
func checkHost(h hostEnv) error {
	if h.euid != 0 {
		return errors.New("npl test cluster: must run as root (network namespaces and iptables need it)")
	}
	for _, t := range requiredTools {
		if _, err := h.lookPath(t.name); err != nil {
			return fmt.Errorf("npl test cluster: '%s' not found: apt-get install %s", t.name, t.pkg)
		}
	}
	return nil
}

// CheckPrerequisites reports, in one line, why this machine cannot run the
// cluster: not root, or a missing program.
func CheckPrerequisites() error { return checkHost(realHost()) }

// netnsInode returns the inode of the network namespace file at path.
func netnsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Ino, nil
}

// checkPrivateNetns refuses when the network namespace at self is the host's:
// the kernel's initial one, PID 1's (when readable), or the one the launcher
// recorded in hostInode (when set).
func checkPrivateNetns(self, pid1 string, hostInode string) error {
	const refuse = "npl test cluster: refusing to create network devices in the host's network namespace " +
		"(run through cluster.RunMain or cluster.Reexec, which enter a private one)"
	ino, err := netnsInode(self)
	if err != nil {
		return fmt.Errorf("npl test cluster: cannot tell which network namespace this is: %w", err)
	}
	if ino == initNetnsInode {
		return errors.New(refuse)
	}
	// PID 1 may be unreadable (hardened /proc); the other checks still hold.
	if init, err := netnsInode(pid1); err == nil && init == ino {
		return errors.New(refuse)
	}
	if hostInode != "" && hostInode == strconv.FormatUint(ino, 10) {
		return errors.New(refuse)
	}
	return nil
}

// ensurePrivateNetns is checkPrivateNetns for this process.
func ensurePrivateNetns() error {
	return checkPrivateNetns("/proc/thread-self/ns/net", "/proc/1/ns/net", os.Getenv(envHostNetns))
}

// Reexec runs the current program again inside private network and mount
// namespaces (through unshare), unless it already runs there. In the launcher
// it waits for the child, forwarding SIGINT and SIGTERM, and returns done=true
// with the child's exit code: the caller must exit with it. In the child it
// prepares the namespaces (lo up, a private tmpfs on /run/netns, ip_forward)
// and returns done=false. A missing prerequisite is a one-line error.
func Reexec() (done bool, code int, err error) {
	if err := CheckPrerequisites(); err != nil {
		return false, 0, err
	}
	if os.Getenv(EnvNetns) == "1" {
		return false, 0, preparePrivateNamespaces()
	}
	code, err = runUnshared()
	return true, code, err
}

// runUnshared starts this program with the same arguments under unshare and
// returns its exit code (128+signal when a signal ended it).
func runUnshared() (int, error) {
	hostIno, err := netnsInode("/proc/self/ns/net")
	if err != nil {
		return 0, fmt.Errorf("npl test cluster: %w", err)
	}
	// Resolved here: in unshare, /proc/self/exe would be unshare itself.
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("npl test cluster: find this program: %w", err)
	}
	args := append([]string{"--net", "--mount", "--propagation", "private", "--", self}, os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), EnvNetns+"=1", envHostNetns+"="+strconv.FormatUint(hostIno, 10))
	// SIGTERM, not SIGKILL: the child then closes its clusters before it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("npl test cluster: start unshare: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			// unshare without --fork execs the program, so this reaches it directly.
			_ = cmd.Process.Signal(s)
		case err := <-waited:
			return exitCode(cmd, err)
		}
	}
}

func exitCode(cmd *exec.Cmd, err error) (int, error) {
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return 0, fmt.Errorf("npl test cluster: wait for child: %w", err)
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return cmd.ProcessState.ExitCode(), nil
}

// preparePrivateNamespaces readies the child's namespaces. It runs once, before
// any cluster exists.
func preparePrivateNamespaces() error {
	if err := ensurePrivateNetns(); err != nil {
		return err
	}
	if err := run("ip", "link", "set", "lo", "up"); err != nil {
		return fmt.Errorf("npl test cluster: %w", err)
	}
	// Named namespaces live on a tmpfs of this mount namespace only, so they
	// never show on the host nor collide with another run, and vanish with us.
	if err := os.MkdirAll(privateNetnsDir, 0o755); err != nil {
		return fmt.Errorf("npl test cluster: %w", err)
	}
	if mounted, err := isPrivateNetnsDirMounted(); err != nil {
		return fmt.Errorf("npl test cluster: %w", err)
	} else if !mounted {
		if err := unix.Mount("npl-netns", privateNetnsDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755"); err != nil {
			return fmt.Errorf("npl test cluster: mount tmpfs on %s: %w", privateNetnsDir, err)
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("npl test cluster: enable ip_forward in the private namespace: %w", err)
	}
	return nil
}

// isPrivateNetnsDirMounted reports whether our tmpfs is already on
// /run/netns, so that calling Reexec twice in the child is harmless.
func isPrivateNetnsDirMounted() (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("read mountinfo: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == privateNetnsDir && strings.Contains(line, " - tmpfs npl-netns ") {
			return true, nil
		}
	}
	return false, nil
}

// RunMain is the TestMain of a package that uses the cluster:
//
//	func TestMain(m *testing.M) { cluster.RunMain(m) }
//
// It re-executes the test binary in private namespaces (see Reexec), runs the
// tests there, then closes any cluster still open (Shared's included) and
// exits. SIGINT and SIGTERM also close them first. A missing prerequisite
// ends the binary with exit code 2 and one line on stderr.
func RunMain(m *testing.M) { RunMainWithClose(m, closeActive) }

// RunMainWithClose is RunMain with the closing step given: it runs after the
// tests and on SIGINT or SIGTERM, for packages that must stop their own
// processes before the cluster they use closes.
func RunMainWithClose(m *testing.M, closeAll func() error) {
	done, code, err := Reexec()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if done {
		os.Exit(code)
	}
	stop := closeOnSignal(closeAll)
	code = m.Run()
	stop()
	if err := closeAll(); err != nil {
		fmt.Fprintf(os.Stderr, "npl test cluster: close: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// closeOnSignal closes the open cluster and exits when SIGINT or SIGTERM
// arrives, so an interrupted run leaves no temporary directory behind.
func closeOnSignal(closeAll func() error) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "npl test cluster: %v: closing the cluster\n", s)
			_ = closeAll()
			os.Exit(128 + int(s.(syscall.Signal)))
		case <-quit:
		}
	}()
	return func() { signal.Stop(sigs); close(quit) }
}

// active is the cluster open in this process: one at a time, because each
// owns the bridge npl-br0 and 198.18.0.1.
var active struct {
	sync.Mutex
	c *Cluster
}

func claimActive(c *Cluster) error {
	active.Lock()
	defer active.Unlock()
	if active.c != nil {
		return errors.New("npl test cluster: another cluster is already running in this process (Close it first)")
	}
	active.c = c
	return nil
}

func releaseActive(c *Cluster) {
	active.Lock()
	defer active.Unlock()
	if active.c == c {
		active.c = nil
	}
}

func closeActive() error {
	active.Lock()
	c := active.c
	active.Unlock()
	if c == nil {
		return nil
	}
	return c.Close()
}

// shared is the cluster that Shared starts once per process.
var shared struct {
	sync.Mutex
	started bool
	opts    Options
	c       *Cluster
	err     error
}

// Shared returns the process's shared cluster, starting it with opts on the
// first call; RunMain closes it after the tests. Every caller must pass the
// same options. A failed start fails every test that asks for it.
func Shared(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.started {
		shared.started, shared.opts = true, opts
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		shared.c, shared.err = Start(ctx, opts)
		cancel()
	} else if !reflect.DeepEqual(shared.opts, opts) {
		tb.Fatalf("npl test cluster: Shared called with options %+v, but the shared cluster was started with %+v", opts, shared.opts)
	}
	if shared.err != nil {
		tb.Fatalf("start the shared cluster: %v", shared.err)
	}
	return shared.c
}

// CloseShared closes the cluster Shared started, if any; the next Shared
// call starts a new one. RunMain calls it for you; a TestMain built on
// Reexec calls it after m.Run.
func CloseShared() error {
	shared.Lock()
	defer shared.Unlock()
	c := shared.c
	shared.started, shared.c, shared.err, shared.opts = false, nil, nil, Options{}
	if c == nil {
		return nil
	}
	return c.Close()
}
