package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nodeportlocal/npl/internal/netns"
)

// bridgeName is the bridge in the private test namespace that joins the nodes.
const bridgeName = "npl-br0"

// command builds a child process that dies with us: whatever the caller
// forgets, a dead test binary leaves no process behind.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// run runs a short command and returns its output in the error.
func run(name string, args ...string) error {
	return runContext(context.Background(), name, args...)
}

func runContext(ctx context.Context, name string, args ...string) error {
	out, err := command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ipBatch runs several ip commands in one exec, inside netns when it is not
// empty (netns.IPBatch).
func ipBatch(ctx context.Context, name string, lines ...string) error {
	return netns.IPBatch(ctx, name, lines...)
}

// netnsPath is where a named network namespace is mounted.
func netnsPath(name string) string { return filepath.Join(privateNetnsDir, name) }

func addNetns(ctx context.Context, name string) error {
	if err := ensurePrivateNetns(); err != nil {
		return err
	}
	return runContext(ctx, "ip", "netns", "add", name)
}

// deleteNetns removes a named network namespace; a missing one is not an error.
func deleteNetns(name string) error {
	if _, err := os.Stat(netnsPath(name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return run("ip", "netns", "delete", name)
}

// listNetns returns the names of the network namespaces in /run/netns.
func listNetns() ([]string, error) {
	entries, err := os.ReadDir(privateNetnsDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// doInNetns runs fn in the network namespace at path (netns.Do).
func doInNetns(path string, fn func() error) error { return netns.Do(path, fn) }

// writeSysctls sets sysctls (keys as paths under /proc/sys) inside the
// network namespace at path: /proc/sys/net follows the writing thread's
// namespace.
func writeSysctls(path string, values map[string]string) error {
	return doInNetns(path, func() error {
		for key, v := range values {
			if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(v), 0o644); err != nil {
				return fmt.Errorf("set %s=%s: %w", key, v, err)
			}
		}
		return nil
	})
}

// createBridge replaces any npl-br0 left by an earlier cluster of this process
// with a fresh one at 198.18.0.1/24 and, when dualStack, fd00:198:18::1/64
// with IPv6 forwarding on in the test namespace.
// bridgeMAC is npl-br0's MAC, locally administered, after bridgeIP.
const bridgeMAC = "02:00:c6:12:00:01"

func createBridge(ctx context.Context, dualStack bool) error {
	if err := ensurePrivateNetns(); err != nil {
		return err
	}
	_ = deleteBridge()
	lines := []string{
		// A MAC of its own: a bridge without one takes its ports' lowest,
		// which changes when a node's port goes (a node switched off), and
		// every neighbour that cached the old one loses packets to
		// 198.18.0.1 until it asks again (the CNI bridge plugin pins its
		// bridge's for the same reason).
		"link add " + bridgeName + " address " + bridgeMAC + " type bridge",
		"addr add " + bridgeIP.String() + "/24 dev " + bridgeName,
	}
	if dualStack {
		// The test namespace routes between the nodes' Pod CIDRs.
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("enable IPv6 forwarding in the test namespace (is IPv6 disabled on this host?): %w", err)
		}
		// nodad: duplicate address detection would keep the address
		// tentative, unusable, for a second or two.
		lines = append(lines, "addr add "+bridgeIPv6.String()+"/64 dev "+bridgeName+" nodad")
	}
	return ipBatch(ctx, "", append(lines, "link set "+bridgeName+" up")...)
}

// deleteBridge removes npl-br0, and with it the routes to the Pod CIDRs.
func deleteBridge() error { return deleteLink(bridgeName) }

// deleteLink removes a device of the test namespace; a missing one is not an
// error.
func deleteLink(name string) error {
	// Not /sys/class/net: sysfs still shows the host's devices here.
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	return run("ip", "link", "delete", name)
}
