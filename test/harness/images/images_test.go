package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const repoRoot = "../../.."

// testConfig builds into a temporary directory from the checkout's `make
// build` binaries (linked into a temporary bin directory, so a test may
// change one), sharing the checkout's download cache.
func testConfig(t *testing.T) Config {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, b := range []string{"npl-agent", "npl-lbsync", "nplctl"} {
		src := filepath.Join(root, "bin", b)
		if _, err := os.Stat(src); err != nil {
			t.Fatalf("%s is missing: run `make build`", src)
		}
		if err := os.Symlink(src, filepath.Join(bin, b)); err != nil {
			t.Fatal(err)
		}
	}
	return Config{
		RepoRoot: root,
		BinDir:   bin,
		OutDir:   t.TempDir(),
		CacheDir: filepath.Join(root, "bin", "images", ".cache"),
		Tag:      "test",
		Logf:     t.Logf,
	}
}

func loadImage(t *testing.T, r Result) v1.Image {
	t.Helper()
	tag, err := name.NewTag(r.Ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(r.Path, &tag)
	if err != nil {
		t.Fatalf("load %s from %s: %v", r.Ref, r.Path, err)
	}
	return img
}

// unpack writes the image's flattened file system into dir.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, hdr.Name)
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("entry %q leaves the root", hdr.Name)
		}
		mode := os.FileMode(hdr.Mode).Perm()
		if hdr.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, p)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode); err == nil {
				_, err = io.Copy(f, tr)
				f.Close()
			}
		default:
			continue
		}
		if err == nil && hdr.Typeflag != tar.TypeSymlink {
			err = os.Chmod(p, mode)
		}
		if err == nil {
			err = os.Lchown(p, hdr.Uid, hdr.Gid)
		}
		if err != nil {
			t.Fatalf("unpack %s: %v", hdr.Name, err)
		}
	}
}

func TestBuild_writesEveryImageAsTheSpecSaysAndRebuildsOnlyWhatChanged(t *testing.T) {
	cfg := testConfig(t)
	res, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	specs := Specs()
	if len(res) != len(specs) {
		t.Fatalf("built %d images; want %d", len(res), len(specs))
	}
	for i, s := range specs {
		r := res[i]
		t.Run(s.Name, func(t *testing.T) {
			if r.Name != s.Name || r.Ref != "ghcr.io/nodeportlocal/"+s.Name+":test" || r.Path != filepath.Join(cfg.OutDir, s.Name+".tar") || r.Cached {
				t.Errorf("result %+v; want %s built at %s", r, s.Name, filepath.Join(cfg.OutDir, s.Name+".tar"))
			}
			img := loadImage(t, r)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
				t.Errorf("platform %s/%s; want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
			}
			if !slices.Equal(cf.Config.Entrypoint, s.Entrypoint) || cf.Config.User != s.User {
				t.Errorf("entrypoint %q user %q; want %q user %q", cf.Config.Entrypoint, cf.Config.User, s.Entrypoint, s.User)
			}
			root := t.TempDir()
			unpack(t, img, root)
			for _, f := range s.Files {
				fi, err := os.Stat(filepath.Join(root, f.Path))
				if err != nil {
					t.Errorf("image lacks %s: %v", f.Path, err)
					continue
				}
				if fi.Mode().Perm() != f.Mode {
					t.Errorf("%s has mode %v; want %v", f.Path, fi.Mode().Perm(), f.Mode)
				}
			}
			if s.Base == BaseStatic {
				passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
				if err != nil || !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
					t.Errorf("/etc/passwd %q (%v) lacks the nonroot user", passwd, err)
				}
				if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
					t.Errorf("/tmp: %v %v; want drwxrwxrwt", fi, err)
				}
			}
		})
	}

	t.Run("nothing changed: nothing is rebuilt", func(t *testing.T) {
		again, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range again {
			if !r.Cached {
				t.Errorf("%s was rebuilt", r.Name)
			}
		}
	})

	t.Run("a binary changed: only its image is rebuilt", func(t *testing.T) {
		nplctl := filepath.Join(cfg.BinDir, "nplctl")
		if err := os.Remove(nplctl); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(nplctl, []byte("#!/bin/sh\necho another nplctl\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		again, err := Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range again {
			if r.Cached != (r.Name != NPLCtl) {
				t.Errorf("%s: cached %v", r.Name, r.Cached)
			}
		}
	})

	t.Run("a missing binary says how to get it", func(t *testing.T) {
		bad := cfg
		bad.BinDir = t.TempDir()
		_, err := Build(bad)
		if err == nil || !strings.Contains(err.Error(), "run `make build` first") {
			t.Errorf("Build without binaries: %v; want an error saying run `make build` first", err)
		}
	})
}

// inImage runs argv inside root with chroot, in private network, mount and
// PID namespaces, with the image's environment plus env.
func inImage(t *testing.T, root string, env []string, argv ...string) string {
	t.Helper()
	args := append([]string{"--net", "--mount", "--pid", "--fork", "chroot", root, "/usr/bin/env", "-i", defaultPath}, env...)
	cmd := exec.Command("unshare", append(args, argv...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v in the image: %v: %s", argv, err, out)
	}
	return string(out)
}

func TestAgentImage_runsBothIptablesBackendsNftAndConntrackFromItsDebianRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chroot in private namespaces): run the tests as root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("needs unshare: run `make deps`")
	}
	cfg := testConfig(t)
	res, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res, func(r Result) bool { return r.Name == Agent })
	root := t.TempDir()
	unpack(t, loadImage(t, res[i]), root)

	osr, err := os.ReadFile(filepath.Join(root, "etc/os-release"))
	if err != nil || !strings.Contains(string(osr), "VERSION_CODENAME=bookworm") {
		t.Errorf("/etc/os-release %q (%v); want Debian bookworm", osr, err)
	}
	for _, tc := range []struct{ mode, want string }{
		{"legacy", "(legacy)"},
		{"nft", "(nf_tables)"},
		{"auto", "(nf_tables)"}, // an empty namespace: nft, as current distributions do
	} {
		for _, cmd := range []string{"iptables", "ip6tables"} {
			out := inImage(t, root, []string{"NPL_IPTABLES_MODE=" + tc.mode}, "/usr/local/bin/iptables-wrapper", cmd, "--version")
			if !strings.Contains(out, cmd+" v1.8") || !strings.Contains(out, tc.want) {
				t.Errorf("wrapper in mode %s, %s --version: %q; want %s", tc.mode, cmd, out, tc.want)
			}
		}
	}
	if out := inImage(t, root, nil, "nft", "--version"); !strings.HasPrefix(out, "nftables v1.") {
		t.Errorf("nft --version: %q", out)
	}
	if out := inImage(t, root, nil, "conntrack", "--version"); !strings.HasPrefix(out, "conntrack v1.") {
		t.Errorf("conntrack --version: %q", out)
	}
	// The entrypoint as the kubelet runs it.
	entry := Specs()[slices.IndexFunc(Specs(), func(s Spec) bool { return s.Name == Agent })].Entrypoint
	out := inImage(t, root, []string{"NPL_IPTABLES_MODE=legacy"}, append(slices.Clone(entry), "--version")...)
	if !strings.Contains(out, "npl-agent ") || !strings.Contains(out, "using the legacy backend") {
		t.Errorf("entrypoint --version: %q; want the wrapper choosing legacy, then npl-agent's version", out)
	}
}
