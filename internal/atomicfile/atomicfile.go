// Package atomicfile replaces a file so that a crash or a power loss at any
// moment leaves either its old content or its new content on disk, never a
// truncated or empty file: every state file of npl is written through it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// beforeRename runs between the write of the temporary file and its rename
// over path; the crash test stops the writer there.
var beforeRename = func() {}

// Write replaces path with data, mode perm: it writes a temporary file of
// a unique name in path's directory, syncs it, renames it over path and
// syncs the directory, so that the rename itself is durable. Temporary
// files that an earlier writer left behind when it crashed are removed
// first. A path has one writer at a time: callers serialise their writes.
func Write(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	removeStale(dir, base)
	tmp, err := os.CreateTemp(dir, tempPrefix(base)+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	beforeRename()
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// tempPrefix is the name of the temporary files of base: hidden, so that
// nothing that reads the directory by pattern takes one for base.
func tempPrefix(base string) string { return "." + base + ".tmp-" }

// removeStale removes the temporary files of base that a crashed writer
// left; an error only leaves them, it never stops the write.
func removeStale(dir, base string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix(base)) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
