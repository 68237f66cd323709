package atomicfile

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// crashChildEnv makes the test binary the writer that the crash test kills.
const crashChildEnv = "NPL_ATOMICFILE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	os.Exit(m.Run())
}

// crashChild writes the old state, then the new one, and stops between
// the write of the new state and its rename until it is killed.
func crashChild(path string) {
	if err := Write(path, oldState, 0o600); err != nil {
		os.Exit(3)
	}
	beforeRename = func() {
		os.Stdout.WriteString("written, not renamed\n")
		select {}
	}
	_ = Write(path, newState, 0o600)
	os.Exit(4)
}

var (
	oldState = []byte(`{"state":"old"}` + "\n")
	newState = bytes.Repeat([]byte(`{"state":"new"}`+"\n"), 4096)
)

func TestWrite_aWriterKilledBetweenWriteAndRenameLeavesTheOldState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "desired.json")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "written, not renamed\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the writer did not reach the rename: %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// What a restart reads: the old state, whole.
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, oldState) {
		t.Fatalf("after the crash %s holds %d bytes (%v), want the old state", path, len(got), err)
	}
	// The new state was written, in a temporary file of its own.
	entries, _ := os.ReadDir(dir)
	var temps []string
	for _, e := range entries {
		if e.Name() != "desired.json" {
			temps = append(temps, e.Name())
		}
	}
	if len(temps) != 1 || !strings.HasPrefix(temps[0], ".desired.json.tmp-") {
		t.Fatalf("files beside the state after the crash: %v, want one temporary file", temps)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, temps[0])); !bytes.Equal(data, newState) {
		t.Errorf("the temporary file holds %d bytes, want the new state's %d", len(data), len(newState))
	}

	// The restarted writer replaces the state and leaves nothing behind.
	if err := Write(path, newState, 0o600); err != nil {
		t.Fatal(err)
	}
	entries, _ = os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files after the next write: %d, want only the state", len(entries))
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, newState) {
		t.Error("the next write did not replace the state")
	}
}

func TestWrite_setsTheModeAndReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	for _, data := range [][]byte{[]byte("a"), []byte("bb")} {
		if err := Write(path, data, 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, %v; want 0640", fi.Mode().Perm(), err)
	}
	if err := Write(filepath.Join(t.TempDir(), "missing", "state"), []byte("a"), 0o600); err == nil ||
		!strings.Contains(err.Error(), "missing/state") {
		t.Errorf("a write into a missing directory: %v, want an error naming the file", err)
	}
}
