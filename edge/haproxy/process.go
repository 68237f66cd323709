package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Process is HAProxy in master-worker mode (-W) with its master CLI (-S),
// started and watched by npl-edge.
type Process struct {
	// Bin is the haproxy executable.
	Bin string
	// ConfigFile is the configuration HAProxy loads at start and reload.
	ConfigFile string
	// MasterSocket is the path of the master CLI.
	MasterSocket string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	// alerts are the last [ALERT] lines HAProxy printed, numbered from
	// alertsSeen - len(alerts).
	alerts     []string
	alertsSeen int
}

// Check runs "haproxy -c" on the configuration files, loaded in order as
// HAProxy loads its -f files. The error holds HAProxy's own messages.
func Check(ctx context.Context, bin string, files ...string) error {
	args := []string{"-c"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return &CheckError{Output: alerts(out, err)}
	}
	return nil
}

var procPrefix = regexp.MustCompile(`^\[(ALERT|WARNING|NOTICE)\]\s+\(\d+\)\s*:\s*`)

// alerts keeps the [ALERT] lines of HAProxy's output, without their
// process id: what is wrong, not the version banner. All of it when there
// is no alert.
func alerts(out []byte, err error) string {
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "[ALERT]") {
			keep = append(keep, procPrefix.ReplaceAllString(line, ""))
		}
	}
	if len(keep) == 0 {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return msg
		}
		return err.Error()
	}
	return strings.Join(keep, "; ")
}

// CheckError is a configuration HAProxy refused: at "haproxy -c", or at a
// reload (Reload true), when it could not load it (an address in use); the
// previous configuration then keeps serving.
type CheckError struct {
	Output string
	Reload bool
}

func (e *CheckError) Error() string {
	if e.Reload {
		return "haproxy could not load the new configuration, the previous one keeps serving: " + e.Output
	}
	return "haproxy -c: " + e.Output
}

var lineRef = regexp.MustCompile(`\[([^\]]*):(\d+)\]`)

// Lines returns the configuration line numbers HAProxy's messages name
// ("parsing [/etc/x.cfg:12] : ..."), in order, once each: of the files
// given (as HAProxy names them, the paths it was given), or of any file
// when none is.
func (e *CheckError) Lines(files ...string) []int {
	var lines []int
	seen := map[int]bool{}
	for _, m := range lineRef.FindAllStringSubmatch(e.Output, -1) {
		if len(files) > 0 && !slices.Contains(files, m[1]) {
			continue
		}
		n, err := strconv.Atoi(m[2])
		if err == nil && !seen[n] {
			seen[n] = true
			lines = append(lines, n)
		}
	}
	return lines
}

// Start starts HAProxy and waits until its master CLI lists a worker. The
// process's output goes to the log, one line per message.
func (p *Process) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.exited) {
		return errors.New("haproxy is already running")
	}
	_ = os.Remove(p.MasterSocket)
	cmd := exec.Command(p.Bin, "-W", "-S", p.MasterSocket+",mode,600", "-f", p.ConfigFile)
	// HAProxy must not outlive the edge that manages it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start haproxy: %w", err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.err = cmd, exited, nil
	go p.logLines(out, cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		procs, err := ShowProc(ctx, p.MasterSocket)
		if err == nil && CurrentWorker(procs) != 0 {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("haproxy exited at start: %v", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("haproxy started but its master CLI lists no worker after 15s: %v", err)
		}
	}
}

// Exited is closed when the running HAProxy exits.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return orClosed(p.exited)
}

// closed is a closed channel: what Exited returns before any start.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func orClosed(c chan struct{}) <-chan struct{} {
	if c == nil {
		return closed
	}
	return c
}

// MasterPID returns the PID of the master, 0 when none runs.
func (p *Process) MasterPID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.exited) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Reload makes the master start a worker on the current configuration file;
// the new worker takes the listening sockets from the old one, so no
// connection is refused (the master starts it with -x sockpair@<fd>, its
// socket pair to the old worker: no "expose-fd listeners" is needed). It
// returns when the master reports the new worker, or an error when the
// reload failed (the old worker then keeps serving).
func (p *Process) Reload(ctx context.Context) error {
	before := p.alertCount()
	return reload(ctx, p.MasterSocket, func() []string {
		// The alerts that say why come through the output pipe, maybe
		// just after the master counted the failure.
		for range 20 {
			if alerts := p.alertsSince(before); len(alerts) > 0 {
				return alerts
			}
			time.Sleep(10 * time.Millisecond)
		}
		return []string{"no reason given (see the edge's log)"}
	})
}

// reload asks the master behind the master CLI socket master for a reload
// and waits for its new worker; a failed one is a CheckError whose output
// is what why returns.
func reload(ctx context.Context, master string, why func() []string) error {
	before, err := ShowProc(ctx, master)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	m0 := before[0]
	// HAProxy 2.6 closes the master CLI connection on reload without an
	// answer; the result is read from "show proc".
	if _, err := Command(ctx, master, "reload"); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		procs, err := ShowProc(ctx, master)
		if err == nil {
			m := procs[0]
			if m.Failed > m0.Failed {
				return &CheckError{Output: strings.Join(why(), "; "), Reload: true}
			}
			if m.Reloads > m0.Reloads && CurrentWorker(procs) != 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reload: no new worker after 30s: %v", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stop ends HAProxy (SIGTERM to the master, which stops its workers) and
// waits for it, SIGKILL after timeout.
func (p *Process) Stop(timeout time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || isClosed(exited) {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

func isClosed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// logLines logs HAProxy's output and keeps its last alerts, which say why
// a reload failed.
func (p *Process) logLines(r io.Reader, pid int) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		klog.InfoS("HAProxy", "pid", pid, "message", line)
		if strings.HasPrefix(line, "[ALERT]") {
			p.mu.Lock()
			p.alerts = append(p.alerts, procPrefix.ReplaceAllString(line, ""))
			if len(p.alerts) > 50 {
				p.alerts = p.alerts[len(p.alerts)-50:]
			}
			p.alertsSeen++
			p.mu.Unlock()
		}
	}
}

// alertsSince returns the alerts printed after the n-th one.
func (p *Process) alertsSince(n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := p.alertsSeen - len(p.alerts)
	if n < first {
		n = first
	}
	return append([]string(nil), p.alerts[n-first:]...)
}

func (p *Process) alertCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.alertsSeen
}
