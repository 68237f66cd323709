package edge

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/lbmodel"
)

// saverChildEnv makes the test binary an edge that saves its desired state
// over and over until it is killed.
const saverChildEnv = "NPL_EDGE_SAVER_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(saverChildEnv); dir != "" {
		saveForever(dir)
		return
	}
	os.Exit(m.Run())
}

// savedStates are the desired states the saver alternates between: a small
// one and one of many load balancers, so that a kill often lands inside a
// write.
func savedStates() [2]map[lbKey]*lbmodel.LoadBalancer {
	small := map[lbKey]*lbmodel.LoadBalancer{{"c1", "c1--ns-a"}: lb("c1--ns-a", "198.18.200.1", 80)}
	large := map[lbKey]*lbmodel.LoadBalancer{}
	for i := range 300 {
		name := fmt.Sprintf("c1--ns-lb%d", i)
		large[lbKey{"c1", name}] = lb(name, fmt.Sprintf("198.18.201.%d", i%250+1), int32(1000+i), int32(2000+i))
	}
	return [2]map[lbKey]*lbmodel.LoadBalancer{small, large}
}

func saveForever(dir string) {
	states := savedStates()
	e := &Edge{cfg: Config{Dir: dir}, desired: states[0]}
	if err := e.save(); err != nil {
		os.Exit(3)
	}
	os.Stdout.WriteString("saved\n")
	for i := 1; ; i++ {
		e.desired = states[i%2]
		if err := e.save(); err != nil {
			os.Exit(4)
		}
	}
}

// An edge host can lose its npl-edge at any instant (a kill, a crash, the
// power): the desired state a restart reads is always one that was saved
// whole, never a truncated or empty file.
func TestSave_aRestartAfterAKilledSaveLoadsAWholeState(t *testing.T) {
	dir := t.TempDir()
	states := savedStates()
	for kill := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), saverChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "saved\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the saver did not start: %q, %v", line, err)
		}
		time.Sleep(time.Duration(rand.IntN(20_000)) * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		restarted := &Edge{cfg: Config{Dir: dir}, desired: map[lbKey]*lbmodel.LoadBalancer{}}
		if err := restarted.load(); err != nil {
			t.Fatalf("kill %d: the restarted edge cannot load its state: %v", kill, err)
		}
		if n := len(restarted.desired); n != len(states[0]) && n != len(states[1]) {
			t.Fatalf("kill %d: the restarted edge loaded %d load balancers, want %d or %d", kill, n, len(states[0]), len(states[1]))
		}
	}
	if temps, _ := filepath.Glob(filepath.Join(dir, ".desired.json.tmp-*")); len(temps) > 1 {
		t.Errorf("temporary files pile up: %v", temps)
	}
}

// A saved load balancer that the edge's rules refuse now (an earlier edge
// took a Service string with a newline and directives) is left out of the
// restarted edge's state, and the others are served.
func TestLoad_leavesOutWhatTheRulesRefuse(t *testing.T) {
	dir := t.TempDir()
	bad := lb("c1--ns-bad", "198.18.200.2", 80)
	bad.Service = "ns/bad\n    external-check command /bin/sh"
	old := &Edge{cfg: Config{Dir: dir}, desired: map[lbKey]*lbmodel.LoadBalancer{
		{"c1", "c1--ns-a"}: lb("c1--ns-a", "198.18.200.1", 80), {"c1", "c1--ns-bad"}: bad}}
	if err := old.save(); err != nil {
		t.Fatal(err)
	}
	restarted := &Edge{cfg: Config{Dir: dir}, desired: map[lbKey]*lbmodel.LoadBalancer{}}
	if err := restarted.load(); err != nil {
		t.Fatalf("load: %v", err)
	}
	if len(restarted.desired) != 1 || restarted.desired[lbKey{"c1", "c1--ns-a"}] == nil {
		t.Errorf("loaded %v, want c1--ns-a alone", restarted.desired)
	}
}
