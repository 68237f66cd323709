package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Attached is an HAProxy that the host runs and npl-edge does not start:
// Debian's haproxy.service (haproxy -Ws -S <master CLI> -f <the host's
// configuration> -f <npl-edge's>), restarted by systemd. npl-edge reloads
// it through its master CLI and watches its master, but never starts,
// stops or restarts it.
type Attached struct {
	// MasterSocket is the path of the master CLI (-S).
	MasterSocket string

	mu     sync.Mutex
	master int
	exited chan struct{}
	stop   chan struct{}
}

// Start waits until the master CLI lists a worker, for up to 15s, and then
// watches the master: Exited is closed when another master answers (the
// host restarted HAProxy) or none answers for attachedGone.
func (a *Attached) Start(ctx context.Context) error {
	a.Stop(0)
	deadline := time.Now().Add(15 * time.Second)
	for {
		procs, err := ShowProc(ctx, a.MasterSocket)
		if err == nil && CurrentWorker(procs) != 0 {
			a.mu.Lock()
			a.master, a.exited, a.stop = procs[0].PID, make(chan struct{}), make(chan struct{})
			go a.watch(a.master, a.exited, a.stop)
			a.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("it lists no worker")
			}
			return fmt.Errorf("the host's HAProxy does not answer on its master CLI %s after 15s: %w", a.MasterSocket, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

const (
	// attachedPoll is how often the host's master is looked at.
	attachedPoll = time.Second
	// attachedGone is how long its master CLI may not answer before
	// HAProxy counts as stopped: a reload makes the master re-execute
	// itself, which closes its CLI for a moment.
	attachedGone = 5 * time.Second
)

func (a *Attached) watch(master int, exited, stop chan struct{}) {
	lastSeen := time.Now()
	tick := time.NewTicker(attachedPoll)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		procs, err := ShowProc(context.Background(), a.MasterSocket)
		switch {
		case err == nil && procs[0].PID != master:
			close(exited)
			return
		case err == nil:
			lastSeen = time.Now()
		case time.Since(lastSeen) > attachedGone:
			close(exited)
			return
		}
	}
}

// Exited is closed when the master Start found is gone.
func (a *Attached) Exited() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return orClosed(a.exited)
}

// MasterPID returns the PID of the master Start found, 0 once it is gone.
func (a *Attached) MasterPID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.exited == nil || isClosed(a.exited) {
		return 0
	}
	return a.master
}

// Reload is Process.Reload through the host's master CLI. The reason of a
// failed reload is in HAProxy's own log, which the host keeps.
func (a *Attached) Reload(ctx context.Context) error {
	return reload(ctx, a.MasterSocket, func() []string {
		return []string{"HAProxy's log on the edge host says why (journalctl -u haproxy)"}
	})
}

// Stop stops watching the master; HAProxy runs on.
func (a *Attached) Stop(time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stop != nil && !isClosed(a.stop) {
		close(a.stop)
	}
}

// HostChroot returns the chroot of the global section of the host's
// configuration files (a directory stands for the .cfg files in it, as
// for HAProxy's -f), "" when they set none.
func HostChroot(files []string) (string, error) {
	var chroot string
	for _, f := range files {
		paths := []string{f}
		if st, err := os.Stat(f); err == nil && st.IsDir() {
			paths, err = filepath.Glob(filepath.Join(f, "*.cfg"))
			if err != nil {
				return "", err
			}
			slices.Sort(paths)
		}
		for _, p := range paths {
			c, err := chrootOf(p)
			if err != nil {
				return "", err
			}
			if c != "" {
				chroot = c
			}
		}
	}
	return chroot, nil
}

func chrootOf(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("the host's HAProxy configuration: %w", err)
	}
	defer f.Close()
	var chroot string
	inGlobal := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields, _ := Words(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if isSection(fields[0]) {
			inGlobal = fields[0] == "global"
			continue
		}
		if inGlobal && fields[0] == "chroot" && len(fields) > 1 {
			chroot = strings.TrimSuffix(fields[1], "/")
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("the host's HAProxy configuration %s: %w", path, err)
	}
	return chroot, nil
}
