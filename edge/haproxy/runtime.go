package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// commandTimeout bounds one command on a socket.
const commandTimeout = 10 * time.Second

// Command sends one command to the HAProxy CLI socket at path (the admin
// socket of a worker, or the master CLI) and returns its whole answer.
func Command(ctx context.Context, path, command string) (string, error) {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return "", fmt.Errorf("haproxy %q: %w", command, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, command+"\n"); err != nil {
		return "", fmt.Errorf("haproxy %q: %w", command, err)
	}
	// The end of the request: the CLI answers and closes.
	if uc, ok := conn.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return "", fmt.Errorf("haproxy %q: %w", command, err)
	}
	return string(out), nil
}

// Admin-state bits of "show servers state" (srv_admin_state) that take a
// server out of the rotation. SRV_ADMF_CMAINT (0x04) only records that the
// configuration said "disabled"; it stays after "state ready".
const (
	adminForcedMaint    = 0x01
	adminInheritedMaint = 0x02
	adminForcedDrain    = 0x08
	adminInheritedDrain = 0x10
	adminResolvMaint    = 0x20
	adminHostnameMaint  = 0x40
	adminOutOfRotation  = adminForcedMaint | adminInheritedMaint | adminForcedDrain | adminInheritedDrain | adminResolvMaint | adminHostnameMaint
)

// ServerState is one server of a backend as the running worker holds it.
type ServerState struct {
	Backend string
	Name    string
	// IP and Port are the server's address; the zero IP and port 0 for
	// a server on a unix socket (InvalidServer).
	IP   netip.Addr
	Port int32
	// Up is true when the server is running (its health check passes).
	Up bool
	// AdminState is srv_admin_state.
	AdminState int
	// Weight is the server's weight (srv_uweight), 1 by default.
	Weight int
}

// Enabled reports whether the server takes new connections when up: not
// in maintenance nor draining.
func (s ServerState) Enabled() bool { return s.AdminState&adminOutOfRotation == 0 }

// Draining reports whether the server is in the drain state (and not in
// maintenance).
func (s ServerState) Draining() bool {
	return s.AdminState&(adminForcedDrain) != 0 && s.AdminState&adminForcedMaint == 0
}

// ShowServersState asks the worker behind the admin socket for the state of
// every server of every backend.
func ShowServersState(ctx context.Context, adminSocket string) ([]ServerState, error) {
	out, err := Command(ctx, adminSocket, "show servers state")
	if err != nil {
		return nil, err
	}
	return ParseServersState(out)
}

// ParseServersState parses the answer of "show servers state": a version
// line, a header line naming the columns, then one line per server.
func ParseServersState(out string) ([]ServerState, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var cols map[string]int
	var states []ServerState
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "# ") {
			cols = map[string]int{}
			for i, c := range strings.Fields(strings.TrimPrefix(line, "# ")) {
				cols[c] = i
			}
			continue
		}
		if cols == nil {
			if _, err := strconv.Atoi(line); err == nil {
				continue // the format version
			}
			return nil, fmt.Errorf("show servers state: unexpected %q", line)
		}
		f := strings.Fields(line)
		get := func(name string) (string, error) {
			i, ok := cols[name]
			if !ok || i >= len(f) {
				return "", fmt.Errorf("show servers state: no column %s in %q", name, line)
			}
			return f[i], nil
		}
		var s ServerState
		var err error
		var v string
		if s.Backend, err = get("be_name"); err != nil {
			return nil, err
		}
		if s.Name, err = get("srv_name"); err != nil {
			return nil, err
		}
		if v, err = get("srv_addr"); err != nil {
			return nil, err
		}
		if v != "-" { // "-": a unix socket
			if s.IP, err = netip.ParseAddr(v); err != nil {
				return nil, fmt.Errorf("show servers state: server %s/%s: %w", s.Backend, s.Name, err)
			}
			s.IP = s.IP.Unmap()
		}
		if v, err = get("srv_port"); err != nil {
			return nil, err
		}
		port, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("show servers state: server %s/%s: port %q", s.Backend, s.Name, v)
		}
		s.Port = int32(port)
		if v, err = get("srv_op_state"); err != nil {
			return nil, err
		}
		s.Up = v == "2"
		if v, err = get("srv_admin_state"); err != nil {
			return nil, err
		}
		if s.AdminState, err = strconv.Atoi(v); err != nil {
			return nil, fmt.Errorf("show servers state: server %s/%s: admin state %q", s.Backend, s.Name, v)
		}
		if v, err = get("srv_uweight"); err != nil {
			return nil, err
		}
		if s.Weight, err = strconv.Atoi(v); err != nil {
			return nil, fmt.Errorf("show servers state: server %s/%s: weight %q", s.Backend, s.Name, v)
		}
		states = append(states, s)
	}
	return states, sc.Err()
}

// Proc is one process of "show proc" on the master CLI.
type Proc struct {
	PID  int
	Type string
	// Reloads is, for the master, how many reloads it performed; for a
	// worker, how many reloads it has lived through (0 for the current one).
	Reloads int
	// Failed is, for the master, how many reloads failed.
	Failed int
}

// ShowProc lists the master and its workers.
func ShowProc(ctx context.Context, masterSocket string) ([]Proc, error) {
	out, err := Command(ctx, masterSocket, "show proc")
	if err != nil {
		return nil, err
	}
	return ParseShowProc(out)
}

// ParseShowProc parses the answer of "show proc":
//
//	#<PID> <type> <reloads> <uptime> <version>
//	11510  master 1 [failed: 0] 0d00h00m02s 2.6.12
//	# workers
//	11613  worker 0 0d00h00m01s 2.6.12
func ParseShowProc(out string) ([]Proc, error) {
	var procs []Proc
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		p := Proc{PID: pid, Type: f[1]}
		if p.Reloads, err = strconv.Atoi(f[2]); err != nil {
			return nil, fmt.Errorf("show proc: %q", line)
		}
		if i := strings.Index(line, "[failed: "); i >= 0 {
			rest := line[i+len("[failed: "):]
			if j := strings.IndexByte(rest, ']'); j >= 0 {
				p.Failed, _ = strconv.Atoi(strings.TrimSpace(rest[:j]))
			}
		}
		procs = append(procs, p)
	}
	if len(procs) == 0 || procs[0].Type != "master" {
		return nil, errors.New("show proc: no master in the answer")
	}
	return procs, nil
}

// CurrentWorker is the worker that took the last configuration loaded: the
// one that has lived through the fewest reloads (none, unless the last
// reload failed and the old worker kept serving). Zero when there is none.
func CurrentWorker(procs []Proc) int {
	pid, reloads := 0, -1
	for _, p := range procs {
		if p.Type == "worker" && (reloads < 0 || p.Reloads < reloads) {
			pid, reloads = p.PID, p.Reloads
		}
	}
	return pid
}

// RuntimeError is an answer of the admin socket that says a command failed.
type RuntimeError struct {
	Command string
	Answer  string
}

func (e *RuntimeError) Error() string {
	return fmt.Sprintf("haproxy %q: %s", e.Command, strings.TrimSpace(e.Answer))
}

// Run sends a command that changes the worker and checks its answer:
// HAProxy answers such commands with nothing, or with a message that says
// what happened; an answer that is none of the known successes is an error.
func Run(ctx context.Context, adminSocket, command string, okAnswers ...string) error {
	out, err := Command(ctx, adminSocket, command)
	if err != nil {
		return err
	}
	answer := strings.TrimSpace(out)
	if answer == "" {
		return nil
	}
	for _, ok := range okAnswers {
		if strings.Contains(answer, ok) {
			return nil
		}
	}
	return &RuntimeError{Command: command, Answer: answer}
}

// RunChain sends commands that change the worker in one round trip
// (separated by ";", which HAProxy runs in order, each whatever the
// previous one answered) and checks the answers: every line must be one of
// the known successes, as the commands that succeed answer nothing or one
// line. The commands must not hold a ";" themselves.
func RunChain(ctx context.Context, adminSocket string, commands []string, okAnswers ...string) error {
	command := strings.Join(commands, "; ")
	out, err := Command(ctx, adminSocket, command)
	if err != nil {
		return err
	}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line != "" && !slices.ContainsFunc(okAnswers, func(ok string) bool { return strings.Contains(line, ok) }) {
			return &RuntimeError{Command: command, Answer: strings.TrimSpace(out)}
		}
	}
	return nil
}

// ShowBackends lists the names of the backends of the worker behind the
// admin socket.
func ShowBackends(ctx context.Context, adminSocket string) ([]string, error) {
	out, err := Command(ctx, adminSocket, "show backend")
	if err != nil {
		return nil, err
	}
	var names []string
	for line := range strings.Lines(out) {
		if name := strings.TrimSpace(line); name != "" && !strings.HasPrefix(name, "#") {
			names = append(names, name)
		}
	}
	return names, nil
}
