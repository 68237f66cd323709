// Package stack runs npl's own binaries on a local test cluster: npl-agent in
// every node's network namespace and npl-lbsync beside the control plane,
// with helpers to restart them, read their metrics and send real traffic.
// The end-to-end tests, the benchmarks and the demo all use it, so they
// exercise the same code path.
package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// BinDir returns the directory of npl's binaries: $NPL_BIN_DIR, else bin/ at
// the repository root. It fails with how to build them when one is missing.
func BinDir() (string, error) {
	dir := os.Getenv("NPL_BIN_DIR")
	if dir == "" {
		root, err := cluster.RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin")
	}
	for _, b := range []string{"npl-agent", "npl-lbsync", "nplctl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("npl binary %s missing in %s: run 'make build' first", b, dir)
		}
	}
	return dir, nil
}

// Process is one npl binary run by the stack.
type Process struct {
	Name    string
	LogPath string

	newCmd func(ctx context.Context) *exec.Cmd
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
}

// Start runs the process (again). Its output goes to LogPath (appended).
func (p *Process) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.Name)
	}
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.Name, err)
	}
	cmd := p.newCmd(context.WithoutCancel(ctx))
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// Running reports whether the process runs.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop ends the process with SIGTERM (SIGKILL after 10 s) and waits for it.
func (p *Process) Stop() error { return p.signal(syscall.SIGTERM, 10*time.Second) }

// Kill ends the process with SIGKILL, as a crash would.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 0) }

func (p *Process) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-done:
			return nil
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-done
	return nil
}

// Tail returns the last n lines of the process log.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Grep counts the log lines that contain s.
func (p *Process) Grep(s string) int {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			n++
		}
	}
	return n
}

// ErrNoSample is Metric's error when the endpoint answers without a sample
// of the metric: a counter vector that has not counted yet.
var ErrNoSample = errors.New("no such sample")

// Scrape reads a Prometheus text endpoint (within 3 s).
func Scrape(url string) (string, error) {
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", url, err)
	}
	return string(body), nil
}

// Metric scrapes a Prometheus text endpoint and returns the sum of the samples
// of name whose labels contain every one of labels ("key=\"value\"").
func Metric(url, name string, labels ...string) (float64, error) {
	body, err := Scrape(url)
	if err != nil {
		return 0, err
	}
	total, found := 0.0, false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		total += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("metric %s%v at %s: %w", name, labels, url, ErrNoSample)
	}
	return total, nil
}

// WaitHTTP polls url until it answers 200 or ctx ends.
func WaitHTTP(ctx context.Context, url string) error { return waitHTTP(ctx, url, nil) }

// waitHTTP is WaitHTTP that gives up as soon as p, when given, has exited.
func waitHTTP(ctx context.Context, url string, p *Process) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		if p != nil && !p.Running() {
			return fmt.Errorf("%s exited", p.Name)
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %v)", url, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// HTTPGet sends one GET to addr ("ip:port") from the calling thread's network
// namespace with a fresh connection and returns the trimmed body: the name of
// the Pod that answered.
func HTTPGet(addr string) (string, error) {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	body, err := Answer(resp)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", addr, err)
	}
	return body, nil
}

// Answer reads and closes the body of an answer from a test backend and
// returns it trimmed (the name of the Pod that answered), or an error
// naming the status when it is not 200.
func Answer(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return strings.TrimSpace(string(body)), nil
}

// UDPEcho sends payload to addr over UDP from the calling thread's network
// namespace and returns the reply ("<pod name>: <payload>").
func UDPEcho(addr, payload string) (string, error) {
	conn, err := net.DialTimeout("udp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(payload)); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}
