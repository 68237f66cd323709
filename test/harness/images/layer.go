package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// layerFile is a gzip-compressed layer tar on disk.
type layerFile struct {
	path string
	// key hashes what the layer holds.
	key string
}

// layerEntry is one entry of a layer tar: a directory, a symbolic link, or a
// regular file read from source or holding data.
type layerEntry struct {
	path     string // in the image, absolute or relative to /
	mode     os.FileMode
	uid, gid int
	dir      bool
	link     string // symbolic link target
	source   string // a file on this machine
	data     []byte // or these bytes
}

// epoch is the modification time of every entry, so layers are reproducible.
var epoch = time.Unix(0, 0)

// writeLayer writes entries, sorted so parents precede children, as a
// gzip-compressed tar at dst (atomically).
func writeLayer(dst string, entries []layerEntry) error {
	sort.SliceStable(entries, func(i, j int) bool {
		return strings.TrimPrefix(entries[i].path, "/") < strings.TrimPrefix(entries[j].path, "/")
	})
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".layer-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	zw := gzip.NewWriter(tmp)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := writeEntry(tw, e); err != nil {
			return fmt.Errorf("layer %s: %s: %w", dst, e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func writeEntry(tw *tar.Writer, e layerEntry) error {
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(e.path, "/"),
		Mode:    int64(e.mode.Perm()),
		Uid:     e.uid,
		Gid:     e.gid,
		ModTime: epoch,
		Format:  tar.FormatPAX,
	}
	if e.mode&os.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if e.mode&os.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if e.mode&os.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	switch {
	case e.dir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case e.link != "":
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.link
		return tw.WriteHeader(hdr)
	case e.source != "":
		f, err := os.Open(e.source)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeReg
		hdr.Size = fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	default:
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(e.data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(e.data)
		return err
	}
}

// writeDirLayer writes the tree at root as a layer at dst, each path mapped
// by remap; trees a slim image leaves out are skipped, and merged-/usr links
// are added for /bin, /sbin and /lib*.
func writeDirLayer(dst, root string, remap func(string) string) error {
	seen := map[string]bool{}
	var entries []layerEntry
	for _, d := range mergedDirs {
		if _, err := os.Lstat(filepath.Join(root, d)); err == nil || d == "bin" || d == "sbin" || d == "lib" {
			entries = append(entries, layerEntry{path: d, mode: 0o777, link: "usr/" + d})
			seen[d] = true
		}
	}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		rel = remap(filepath.ToSlash(rel))
		if skipped(rel) {
			if de.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if seen[rel] {
			return nil
		}
		seen[rel] = true
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := layerEntry{path: rel, mode: fi.Mode()}
		uid, gid := owner(fi)
		e.uid, e.gid = uid, gid
		switch {
		case fi.IsDir():
			e.dir = true
		case fi.Mode()&os.ModeSymlink != 0:
			if e.link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			e.source = p
		default:
			return nil // no devices or pipes in packages
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return fmt.Errorf("walk %s: %w", root, err)
	}
	return writeLayer(dst, entries)
}

// staticBase is the layer standing for gcr.io/distroless/static:nonroot, cached
// by its contents.
func staticBase(cacheDir string) (*layerFile, error) {
	entries := []layerEntry{
		{path: "etc", dir: true, mode: 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{path: "home", dir: true, mode: 0o755},
		{path: "home/nonroot", dir: true, mode: 0o700, uid: 65532, gid: 65532},
		{path: "tmp", dir: true, mode: 0o777 | os.ModeSticky},
	}
	// The CA certificates, so npl-lbsync verifies its load balancers' TLS.
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		entries = append(entries,
			layerEntry{path: "etc/ssl", dir: true, mode: 0o755},
			layerEntry{path: "etc/ssl/certs", dir: true, mode: 0o755},
			layerEntry{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
	}
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s %v %d %d %v %d\n", e.path, e.mode, e.uid, e.gid, e.dir, len(e.data))
		h.Write(e.data)
	}
	key := hex.EncodeToString(h.Sum(nil))
	l := &layerFile{path: filepath.Join(cacheDir, "static-"+key[:16]+".tar.gz"), key: key}
	if _, err := os.Stat(l.path); err == nil {
		return l, nil
	}
	return l, writeLayer(l.path, entries)
}

// writeImage writes the image of s (base, then a layer with files) as an
// image tarball at dst tagged ref.
func writeImage(dst, ref string, s Spec, base *layerFile, files []layerEntry) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	var layers []v1.Layer
	if base != nil {
		l, err := tarball.LayerFromFile(base.path)
		if err != nil {
			return err
		}
		layers = append(layers, l)
	}
	// The files' layer, with the directories that lead to them.
	dirs := map[string]bool{}
	var entries []layerEntry
	for _, f := range files {
		for d := path.Dir(f.path); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			entries = append(entries, layerEntry{path: d, dir: true, mode: 0o755})
		}
		entries = append(entries, f)
	}
	top := filepath.Join(filepath.Dir(dst), "."+s.Name+"-files.tar.gz")
	if err := writeLayer(top, entries); err != nil {
		return err
	}
	defer os.Remove(top)
	l, err := tarball.LayerFromFile(top)
	if err != nil {
		return err
	}
	layers = append(layers, l)
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = s.Entrypoint
	cf.Config.User = s.User
	cf.Config.Env = append([]string{defaultPath}, s.Env...)
	cf.Config.WorkingDir = "/"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return os.Rename(tmp, dst)
}

// buildGoPrograms compiles the images' own programs
// (test/harness/images/pause, test/harness/images/workload) as static
// binaries into dir.
func buildGoPrograms(repoRoot, dir string) error {
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", dir + "/"}
	for _, p := range goPrograms {
		args = append(args, "./test/harness/images/"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// owner is the uid and gid of a file on this machine.
func owner(fi os.FileInfo) (uid, gid int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}
