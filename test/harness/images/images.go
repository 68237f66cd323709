// Package images builds the container images of the real-node test cluster
// without a registry or a container engine: npl-agent, npl-lbsync and nplctl
// with the contents of the Dockerfile's targets, a pause image for Pod
// sandboxes and the test workload. Each is written as an image tarball that
// `ctr images import` loads. Outputs are cached by the hash of their inputs.
package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is the repository prefix of every image, the chart's default.
const Registry = "ghcr.io/nodeportlocal"

// Names of the images Build writes, in order; the file of each is <name>.tar.
const (
	Agent    = "npl-agent"
	LBSync   = "npl-lbsync"
	NPLCtl   = "nplctl"
	Pause    = "pause"
	Workload = "npl-workload"
)

// Bases the images start from: what the Dockerfile's base images stand for.
const (
	// BaseDebian is a Debian bookworm root built from its packages, as
	// debian:bookworm-slim is.
	BaseDebian = "debian:bookworm"
	// BaseStatic is what gcr.io/distroless/static:nonroot holds: passwd and
	// group with the nonroot user, /tmp and /home/nonroot, CA certificates.
	BaseStatic = "static:nonroot"
	// BaseScratch is an empty root.
	BaseScratch = "scratch"
)

// NonRoot is distroless' nonroot user and group.
const NonRoot = "65532:65532"

// File is a file copied into an image.
type File struct {
	// Source is where the file is, relative to Config.BinDir for a binary of
	// `make build` (Origin "bin"), to the checkout (Origin "repo") or to the
	// directory of the Go programs Build compiles (Origin "go").
	Source string
	Origin string
	// Path is where it goes in the image.
	Path string
	Mode os.FileMode
}

// Spec is what one image holds.
type Spec struct {
	Name string
	Base string
	// Packages are the Debian packages installed (BaseDebian only), with
	// their dependencies.
	Packages   []string
	Files      []File
	Entrypoint []string
	User       string
	Env        []string
}

// defaultPath is the PATH of every image, Debian's and Docker's default.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// AgentPackages are the Debian packages of the agent image: the Dockerfile's
// `apt-get install` (iptables with both backends, nftables, conntrack), and
// what debian:bookworm-slim brings that the entrypoint wrapper runs (sh,
// grep, coreutils, update-alternatives) and the files that make it Debian.
var AgentPackages = []string{
	"base-files", "base-passwd", "dash", "coreutils", "grep", "dpkg",
	"iptables", "nftables", "conntrack",
}

// Specs are the images Build writes.
func Specs() []Spec {
	return []Spec{
		{
			Name:     Agent,
			Base:     BaseDebian,
			Packages: AgentPackages,
			Files: []File{
				{Source: "hack/iptables-wrapper.sh", Origin: "repo", Path: "/usr/local/bin/iptables-wrapper", Mode: 0o755},
				{Source: "npl-agent", Origin: "bin", Path: "/usr/local/bin/npl-agent", Mode: 0o755},
			},
			Entrypoint: []string{"/usr/local/bin/iptables-wrapper", "/usr/local/bin/npl-agent"},
		},
		{
			Name:       LBSync,
			Base:       BaseStatic,
			Files:      []File{{Source: "npl-lbsync", Origin: "bin", Path: "/npl-lbsync", Mode: 0o755}},
			Entrypoint: []string{"/npl-lbsync"},
			User:       NonRoot,
		},
		{
			Name:       NPLCtl,
			Base:       BaseStatic,
			Files:      []File{{Source: "nplctl", Origin: "bin", Path: "/nplctl", Mode: 0o755}},
			Entrypoint: []string{"/nplctl"},
			User:       NonRoot,
		},
		{
			Name:       Pause,
			Base:       BaseScratch,
			Files:      []File{{Source: "pause", Origin: "go", Path: "/pause", Mode: 0o755}},
			Entrypoint: []string{"/pause"},
			User:       "65535:65535",
		},
		{
			Name:       Workload,
			Base:       BaseStatic,
			Files:      []File{{Source: "workload", Origin: "go", Path: "/npl-workload", Mode: 0o755}},
			Entrypoint: []string{"/npl-workload"},
			User:       NonRoot,
		},
	}
}

// goPrograms are the packages (under test/harness/images) Build compiles for the
// images, by Origin "go" source name.
var goPrograms = []string{"pause", "workload"}

// Ref is the image reference of name at tag.
func Ref(name, tag string) string {
	return Registry + "/" + name + ":" + tag
}

// Config says where Build reads and writes.
type Config struct {
	// RepoRoot is the checkout (hack/iptables-wrapper.sh, test/harness/images).
	RepoRoot string
	// BinDir holds npl-agent, npl-lbsync and nplctl of `make build`.
	BinDir string
	// OutDir receives <name>.tar per image.
	OutDir string
	// CacheDir keeps Debian packages, layers and input hashes between runs
	// (default OutDir/.cache).
	CacheDir string
	// Tag of every image.
	Tag string
	// Logf reports progress; nil is quiet.
	Logf func(format string, args ...any)
}

// Result is one image Build wrote or found up to date.
type Result struct {
	Name, Ref, Path string
	// Cached is true when the file was already there with the same inputs.
	Cached bool
}

// Build writes every image of Specs into cfg.OutDir, skipping those whose
// inputs did not change.
func Build(cfg Config) ([]Result, error) {
	if cfg.Tag == "" {
		return nil, fmt.Errorf("images: no tag")
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.OutDir, ".cache")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	for _, d := range []string{cfg.OutDir, cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	goDir := filepath.Join(cfg.CacheDir, "go")
	if err := buildGoPrograms(cfg.RepoRoot, goDir); err != nil {
		return nil, err
	}
	b := &builder{cfg: cfg, goDir: goDir}
	var out []Result
	for _, s := range Specs() {
		r, err := b.image(s)
		if err != nil {
			return out, fmt.Errorf("image %s: %w", s.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

type builder struct {
	cfg   Config
	goDir string
	// debian is the Debian root layer, made once per Build.
	debian *debianRoot
}

// source is the path on this machine of f.
func (b *builder) source(f File) (string, error) {
	switch f.Origin {
	case "bin":
		return filepath.Join(b.cfg.BinDir, f.Source), nil
	case "repo":
		return filepath.Join(b.cfg.RepoRoot, f.Source), nil
	case "go":
		return filepath.Join(b.goDir, f.Source), nil
	}
	return "", fmt.Errorf("file %s: unknown origin %q", f.Path, f.Origin)
}

// image writes the image of s unless its input hash is unchanged.
func (b *builder) image(s Spec) (Result, error) {
	ref := Ref(s.Name, b.cfg.Tag)
	res := Result{Name: s.Name, Ref: ref, Path: filepath.Join(b.cfg.OutDir, s.Name+".tar")}
	h := sha256.New()
	spec, _ := json.Marshal(s)
	fmt.Fprintf(h, "spec %s\nref %s\narch %s\n", spec, ref, runtime.GOARCH)
	var base *layerFile
	switch s.Base {
	case BaseDebian:
		if b.debian == nil {
			d, err := prepareDebian(b.cfg.CacheDir, s.Packages, b.cfg.Logf)
			if err != nil {
				return res, err
			}
			b.debian = d
		}
		base = &b.debian.layer
		fmt.Fprintf(h, "debian %s\n", b.debian.key)
	case BaseStatic:
		sl, err := staticBase(b.cfg.CacheDir)
		if err != nil {
			return res, err
		}
		base = sl
		fmt.Fprintf(h, "static %s\n", sl.key)
	case BaseScratch:
	default:
		return res, fmt.Errorf("unknown base %q", s.Base)
	}
	var files []layerEntry
	for _, f := range s.Files {
		src, err := b.source(f)
		if err != nil {
			return res, err
		}
		sum, err := fileSum(src)
		if err != nil {
			return res, fmt.Errorf("%w (run `make build` first)", err)
		}
		fmt.Fprintf(h, "file %s %s\n", f.Path, sum)
		files = append(files, layerEntry{path: f.Path, source: src, mode: f.Mode})
	}
	key := hex.EncodeToString(h.Sum(nil))
	// The key lives beside the output it describes.
	keyFile := filepath.Join(b.cfg.OutDir, "."+s.Name+".key")
	if old, err := os.ReadFile(keyFile); err == nil && string(old) == key {
		if _, err := os.Stat(res.Path); err == nil {
			res.Cached = true
			return res, nil
		}
	}
	b.cfg.Logf("images: building %s", ref)
	if err := writeImage(res.Path, ref, s, base, files); err != nil {
		return res, err
	}
	return res, os.WriteFile(keyFile, []byte(key), 0o644)
}

// fileSum is the sha256 of the file at path.
func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// TagOf returns the reference (repository:tag) an image tarball written by
// Build carries.
func TagOf(path string) (string, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return "", fmt.Errorf("read the manifest of %s: %w", path, err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 {
		return "", fmt.Errorf("%s: want one image with one tag, have %d images", path, len(m))
	}
	return m[0].RepoTags[0], nil
}
