package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/test/harness/images"
)

// leftovers lists what of the real nodes rns is on this machine
// (realNode.leftBehind), and which of the paths real nodes write by default
// exist.
func leftovers(t *testing.T, rns []*realNode) []string {
	t.Helper()
	hs, err := cgroupHierarchies()
	if err != nil {
		t.Fatal(err)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rn := range rns {
		out = append(out, rn.leftBehind(hs, string(mountinfo))...)
	}
	out = append(out, existingPaths(hostPathsRealNodesWriteByDefault)...)
	slices.Sort(out)
	return out
}

// recordRealNodes collects the real nodes started until the test ends.
func recordRealNodes(t *testing.T) *[]*realNode {
	var rns []*realNode
	var mu sync.Mutex
	realNodeStarted = func(rn *realNode) { mu.Lock(); rns = append(rns, rn); mu.Unlock() }
	t.Cleanup(func() { realNodeStarted = nil })
	return &rns
}

func TestRealNodes_closeLeavesNoProcessCgroupOrFileBehind(t *testing.T) {
	before := leftovers(t, nil)
	started := recordRealNodes(t)
	startCtx, cancelStart := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelStart()
	c, err := Start(startCtx, Options{Nodes: 1, RealNodes: true})
	if err != nil {
		t.Fatal(err)
	}
	// After the start, which may have waited for another real-node cluster.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
		}
	}()
	rn := c.realNodes[0]

	// A Pod: a sandbox, a container, a shim, a veth, an overlay mount.
	ref, err := images.TagOf(filepath.Join(c.ImagesDir(), images.Workload+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "web", Image: ref, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "TCP_PORTS", Value: "8080"}},
			}},
		},
	}
	if _, err := c.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.cp.poll(ctx, "the Pod running in a container", func(ctx context.Context) error {
		p, err := c.Client().CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 ||
			!strings.HasPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://") {
			return errors.New(string(p.Status.Phase))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	running := rn.processes()
	// The node's init, containerd, kubelet, kube-proxy, a shim, pause, the workload.
	if len(running) < 7 {
		t.Errorf("%d processes in the node's PID namespace; want at least 7 (init, containerd, kubelet, kube-proxy, shim, pause, workload)", len(running))
	}
	for _, h := range []string{"memory", "pids", "unified"} {
		if _, err := os.Stat(filepath.Join(cgroupRootDir, h, rn.cgroupRoot, "kubepods")); err != nil {
			t.Errorf("the kubelet's cgroups are not under its cgroupRoot in %s: %v", h, err)
		}
	}

	// What a package's TestMain asserts after its tests sees the running
	// node, and nothing once it closed.
	if err := RealNodesLeftNothing(); err == nil || !strings.Contains(err.Error(), rn.cgroupRoot) {
		t.Errorf("RealNodesLeftNothing with the node running: %v; want its processes and cgroups named", err)
	}
	dir := c.dir
	closed = true
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := RealNodesLeftNothing(); err != nil {
		t.Errorf("RealNodesLeftNothing after Close: %v", err)
	}
	if left := rn.processes(); len(left) > 0 {
		t.Errorf("processes %v of the node still run", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cluster directory %s is still there: %v", dir, err)
	}
	if len(*started) != 1 || (*started)[0] != rn {
		t.Fatalf("recorded %d real nodes; want the one", len(*started))
	}
	if after := leftovers(t, *started); !slices.Equal(after, before) {
		t.Errorf("left behind: %v (before the cluster: %v)", after, before)
	}
}

func TestRealNodes_aFailedStartLeavesNothingBehind(t *testing.T) {
	before := leftovers(t, nil)
	started := recordRealNodes(t)
	bin, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	// Every image but the workload's, which is not an image: the start
	// fails after containerd runs.
	dir := t.TempDir()
	for _, name := range realNodeImages {
		dst := filepath.Join(dir, name+".tar")
		if name == images.Workload {
			err = os.WriteFile(dst, []byte("not an image"), 0o644)
		} else {
			err = os.Symlink(filepath.Join(bin, "images", name+".tar"), dst)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Nodes: 1, RealNodes: true, ImagesDir: dir})
	if err == nil {
		c.Close()
		t.Fatal("Start with a broken image succeeded")
	}
	if !strings.Contains(err.Error(), "import image "+images.Workload) {
		t.Errorf("Start: %v; want it to name the image it could not import", err)
	}
	if len(*started) != 1 || (*started)[0].initPID == 0 {
		t.Fatalf("recorded %d real nodes; want one that ran", len(*started))
	}
	if after := leftovers(t, *started); !slices.Equal(after, before) {
		t.Errorf("left behind: %v (before the cluster: %v)", after, before)
	}
}

func TestRealNodes_aMissingPrerequisiteSaysHowToGetIt(t *testing.T) {
	bin, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	err = checkRealNodes(bin, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "run 'make images'") || strings.Contains(err.Error(), "\n") {
		t.Errorf("no images: %v; want one line saying run 'make images'", err)
	}
	err = checkRealNodes(t.TempDir(), filepath.Join(bin, "images"))
	if err == nil || !strings.Contains(err.Error(), "kubelet not found: run 'make tools'") {
		t.Errorf("no kubelet: %v; want one line saying run 'make tools'", err)
	}
}

func TestRealNodes_aDeadRunsCgroupsAreRemovedAtTheNextStart(t *testing.T) {
	memory := filepath.Join(cgroupRootDir, "memory")
	dead := filepath.Join(memory, "npl-dead01-npl-node-0")
	alive := filepath.Join(memory, "npl-a11ve0-npl-node-0")
	for _, d := range []string{filepath.Join(dead, "kubepods", "pod1"), alive} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = removeCgroupTree(dead, 0)
		_ = removeCgroupTree(alive, 0)
	})
	// The live run's directory.
	aliveDir, err := os.MkdirTemp("", "npl-cluster-a11ve0-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(aliveDir) })

	removeStaleCgroups(klog.Background())
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead run's cgroup %s is still there: %v", dead, err)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Errorf("the live run's cgroup %s was removed: %v", alive, err)
	}
}

// TestLockRealNodes_theWaitIsNotChargedToTheStart: a start whose context
// is shorter than another cluster's hold on the machine's real-node lock
// waits for it and then has its whole time (its deadline moved by the
// wait); cancelling the context still ends the wait.
func TestLockRealNodes_theWaitIsNotChargedToTheStart(t *testing.T) {
	saved := realNodesLockFile
	realNodesLockFile = filepath.Join(t.TempDir(), "npl-real-nodes.lock")
	t.Cleanup(func() { realNodesLockFile = saved })
	hold := func() func() {
		t.Helper()
		_, cancel, release, err := lockRealNodes(context.Background(), klog.Background())
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		return release
	}

	// Another cluster holds the lock three times as long as the start may take.
	release := hold()
	time.AfterFunc(1500*time.Millisecond, release)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start, cancelStart, releaseStart, err := lockRealNodes(ctx, klog.Background())
	if err != nil {
		t.Fatalf("a start behind another real-node cluster: %v; want it to wait for the lock", err)
	}
	if err := start.Err(); err != nil {
		t.Errorf("the start's context ended while it waited for the lock: %v", err)
	}
	if d, ok := start.Deadline(); !ok || !d.After(time.Now()) {
		t.Errorf("the start's deadline %v (set %v) is not after the wait", d, ok)
	}
	cancelStart()
	releaseStart()

	// Cancelled, the wait ends.
	release = hold()
	defer release()
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, _, _, err := lockRealNodes(ctx, klog.Background()); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait: %v; want context.Canceled", err)
	}
}
