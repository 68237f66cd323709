package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What tests do to real nodes once they run: what an operator does to the
// machines of a cluster (a new image tag pushed, kube-proxy restarted, a
// machine switched off), and the check that a run left nothing behind.

// TagImage tags the image src as dst in the containerd of every real node,
// as pushing the same image under a new tag to a registry would offer it.
func (c *Cluster) TagImage(ctx context.Context, src, dst string) error {
	if len(c.realNodes) == 0 {
		return errors.New("npl test cluster: TagImage needs real nodes")
	}
	for _, rn := range c.realNodes {
		if err := rn.ctr(ctx, "images", "tag", "--force", src, dst); err != nil {
			return fmt.Errorf("node %s: %w", rn.n.Name, err)
		}
	}
	return nil
}

// RestartKubeProxy stops the kube-proxy of the real node name (SIGTERM,
// which leaves its rules in place, as a kube-proxy Pod replaced in a rolling
// update does) and starts a new one with the same configuration inside the
// node. It returns once the new kube-proxy has synced its rules, or fails
// after a minute.
func (c *Cluster) RestartKubeProxy(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rn := c.realNodeNamed(name)
	if rn == nil {
		return fmt.Errorf("npl test cluster: no real node %q", name)
	}
	old := rn.kubeProxyPIDs()
	if len(old) != 1 {
		return fmt.Errorf("node %s: %d kube-proxy processes (%v); want one", name, len(old), old)
	}
	if err := syscall.Kill(old[0], syscall.SIGTERM); err != nil {
		return fmt.Errorf("node %s: stop kube-proxy %d: %w", name, old[0], err)
	}
	if err := rn.c.cp.poll(ctx, "kube-proxy of node "+name+" stopped", func(context.Context) error {
		// The node's init reaps it; until then it is a zombie.
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", old[0])); err == nil && !zombie(st) {
			return fmt.Errorf("process %d still runs", old[0])
		}
		return nil
	}); err != nil {
		return err
	}
	// The new one joins the node's namespaces and inherits its marker; its
	// shell exits at once, leaving it to the node's init.
	if err := runContext(ctx, "nsenter", "--target", strconv.Itoa(rn.initPID), "--mount", "--uts", "--pid", "--net", "--",
		"env", rn.marker(), "/bin/sh", "-c", rn.kubeProxyCommand()+" </dev/null &"); err != nil {
		return fmt.Errorf("node %s: start kube-proxy: %w", name, err)
	}
	started := time.Now()
	return rn.c.cp.poll(ctx, "the new kube-proxy of node "+name+" synced", func(context.Context) error {
		if pids := rn.kubeProxyPIDs(); len(pids) != 1 || pids[0] == old[0] {
			return fmt.Errorf("kube-proxy processes %v", pids)
		}
		var last float64
		err := rn.n.Do(func() error {
			v, err := kubeProxyMetric("kubeproxy_sync_proxy_rules_last_timestamp_seconds")
			last = v
			return err
		})
		if err != nil {
			return err
		}
		if last < float64(started.Unix()) {
			return fmt.Errorf("last sync at %v, before the restart", time.Unix(int64(last), 0))
		}
		return nil
	})
}

// zombie reports whether a /proc/<pid>/stat line is a zombie's.
func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && len(stat) > i+2 && stat[i+2] == 'Z'
}

// kubeProxyPIDs lists the node's running kube-proxy processes.
func (rn *realNode) kubeProxyPIDs() []int {
	bin := filepath.Join(rn.c.opts.BinDir, "kube-proxy")
	var pids []int
	for _, pid := range rn.processes() {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		st, serr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil && serr == nil && !zombie(st) && strings.HasPrefix(string(cmdline), bin+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// kubeProxyMetric reads a metric, the highest value over its label sets,
// from kube-proxy's metrics endpoint on loopback of the network namespace
// the calling thread is in.
func kubeProxyMetric(name string) (float64, error) {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:10249", 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var highest float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("kube-proxy metrics: %q: %w", line, err)
		}
		highest, found = max(highest, v), true
	}
	if !found {
		return 0, fmt.Errorf("kube-proxy metrics: no %s", name)
	}
	return highest, sc.Err()
}

// StopNode switches the real node name off: every process of it ends, its
// containers included, and its cgroups go. Its Node object stays (the
// kubelet is gone, so it turns NotReady), and so does its network until
// Close.
func (c *Cluster) StopNode(name string) error {
	rn := c.realNodeNamed(name)
	if rn == nil {
		return fmt.Errorf("npl test cluster: no real node %q", name)
	}
	return rn.stop()
}

func (c *Cluster) realNodeNamed(name string) *realNode {
	for _, rn := range c.realNodes {
		if rn.n.Name == name {
			return rn
		}
	}
	return nil
}

// startedRealNodes are the real nodes this process started, for
// RealNodesLeftNothing.
var startedRealNodes struct {
	sync.Mutex
	rns []*realNode
}

// hostPathsRealNodesWriteByDefault are where containerd, the kubelet and the
// CNI plugins write when nobody tells them otherwise: a real node must leave
// them as they were.
var hostPathsRealNodesWriteByDefault = []string{
	"/run/containerd", "/var/run/netns", "/var/lib/containerd", "/var/lib/kubelet", "/var/lib/cni",
	"/var/log/pods", "/var/log/containers", "/etc/cni/net.d", "/opt/cni/bin",
}

// hostPathsBefore is which of hostPathsRealNodesWriteByDefault existed
// before this process started its first real node.
var hostPathsBefore = sync.OnceValue(func() []string { return existingPaths(hostPathsRealNodesWriteByDefault) })

func existingPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// leftBehind lists what of the node is still on the machine: its
// processes (by marker, cgroup or a command line naming its directory), its
// cgroups, its directory, its network namespace and any mount of ours that
// names its directory.
func (rn *realNode) leftBehind(hierarchies []string, mountinfo string) []string {
	var out []string
	for _, pid := range rn.processes() {
		out = append(out, fmt.Sprintf("process %d of %s", pid, rn.n.Name))
	}
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, rn.cgroupRoot)); err == nil {
			out = append(out, "cgroup "+filepath.Join(h, rn.cgroupRoot))
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), rn.dir) {
			out = append(out, "process "+e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	for _, p := range []string{rn.dir, rn.n.NetnsPath()} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	for _, line := range strings.Split(mountinfo, "\n") {
		if strings.Contains(line, rn.dir) {
			out = append(out, "mount "+line)
		}
	}
	return out
}

// RealNodesLeftNothing checks that the real nodes this process started left
// nothing on the machine: no process, cgroup, directory, network namespace
// or mount of theirs, and none of the host paths containerd, the kubelet and
// the CNI plugins write by default that was not there before. Call it after
// the clusters closed (a TestMain after m.Run); it returns one error listing
// what is left.
func RealNodesLeftNothing() error {
	startedRealNodes.Lock()
	rns := slices.Clone(startedRealNodes.rns)
	startedRealNodes.Unlock()
	if len(rns) == 0 {
		return nil
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var left []string
	for _, rn := range rns {
		left = append(left, rn.leftBehind(hs, string(mountinfo))...)
	}
	for _, p := range existingPaths(hostPathsRealNodesWriteByDefault) {
		if !slices.Contains(hostPathsBefore(), p) {
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("npl test cluster: %d real nodes left behind: %s", len(rns), strings.Join(left, "; "))
	}
	return nil
}

// CloseActive closes the cluster open in this process, if any: what
// RunMain does after the tests, for a TestMain built on RunMainWithClose.
func CloseActive() error { return closeActive() }
