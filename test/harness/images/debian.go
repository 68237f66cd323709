package images

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// debianRoot is the Debian root of the agent image, as one compressed layer.
type debianRoot struct {
	// key hashes the resolved packages (name, version, architecture).
	key   string
	layer layerFile
}

// debPackage is one package of the dependency closure, as apt resolved it.
type debPackage struct {
	name, version, arch string
}

// file is the name apt-get download gives the package's .deb.
func (p debPackage) file() string {
	return p.name + "_" + strings.ReplaceAll(p.version, ":", "%3a") + "_" + p.arch + ".deb"
}

// prepareDebian returns the root layer holding packages and their
// dependencies at the versions this machine's apt would install, built from
// the .deb files (downloaded once into cacheDir/debs) without running
// maintainer scripts; the iptables alternatives the scripts would register
// are registered as they would be. The layer is cached by the package list.
func prepareDebian(cacheDir string, packages []string, logf func(string, ...any)) (*debianRoot, error) {
	if err := checkBookworm(); err != nil {
		return nil, err
	}
	pkgs, err := resolve(packages)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, p := range pkgs {
		fmt.Fprintf(h, "%s %s %s\n", p.name, p.version, p.arch)
	}
	key := hex.EncodeToString(h.Sum(nil))
	d := &debianRoot{key: key, layer: layerFile{path: filepath.Join(cacheDir, "debian-"+key[:16]+".tar.gz"), key: key}}
	if _, err := os.Stat(d.layer.path); err == nil {
		return d, nil
	}
	debs := filepath.Join(cacheDir, "debs")
	if err := download(debs, pkgs, logf); err != nil {
		return nil, err
	}
	logf("images: unpacking %d Debian packages", len(pkgs))
	root, err := os.MkdirTemp(cacheDir, "debian-root-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	for _, p := range pkgs {
		if out, err := exec.Command("dpkg-deb", "-x", filepath.Join(debs, p.file()), root).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("dpkg-deb -x %s: %w: %s", p.file(), err, bytes.TrimSpace(out))
		}
	}
	if err := configure(root); err != nil {
		return nil, err
	}
	if err := writeDirLayer(d.layer.path, root, mergedUsr); err != nil {
		return nil, err
	}
	return d, nil
}

// checkBookworm fails unless this machine is Debian bookworm, the Dockerfile's
// base: its apt resolves the packages.
func checkBookworm() error {
	osr, err := os.ReadFile("/etc/os-release")
	if err == nil && regexp.MustCompile(`(?m)^VERSION_CODENAME=bookworm$`).Match(osr) {
		if _, err := exec.LookPath("apt-get"); err == nil {
			if _, err := exec.LookPath("dpkg-deb"); err == nil {
				return nil
			}
		}
	}
	return errors.New("the agent image is assembled from Debian bookworm packages with this machine's apt-get and dpkg-deb: run `make images` on Debian bookworm")
}

var instLine = regexp.MustCompile(`^Inst (\S+) \((\S+) .*\[(\S+)\]\)`)

// resolve lists packages and their dependencies (no recommends) as apt would
// install them on an empty system.
func resolve(packages []string) ([]debPackage, error) {
	args := append([]string{"-s", "-o", "Dir::State::status=/dev/null", "-o", "Debug::NoLocking=1",
		"install", "--no-install-recommends"}, packages...)
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("resolve %v with apt-get (run `apt-get update` if the lists are missing): %w: %s", packages, err, bytes.TrimSpace(out))
	}
	var pkgs []debPackage
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := instLine.FindStringSubmatch(sc.Text()); m != nil {
			pkgs = append(pkgs, debPackage{name: m[1], version: m[2], arch: m[3]})
		}
	}
	if len(pkgs) < len(packages) {
		return nil, fmt.Errorf("apt-get resolved %d packages for %v: %s", len(pkgs), packages, bytes.TrimSpace(out))
	}
	return pkgs, nil
}

// download fetches the .deb files missing from dir.
func download(dir string, pkgs []debPackage, logf func(string, ...any)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var want []string
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(dir, p.file())); err != nil {
			want = append(want, p.name+":"+p.arch+"="+p.version)
		}
	}
	if len(want) == 0 {
		return nil
	}
	logf("images: downloading %d Debian packages", len(want))
	cmd := exec.Command("apt-get", append([]string{"-q", "-o", "APT::Sandbox::User=root", "download"}, want...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download: %w: %s", err, bytes.TrimSpace(out))
	}
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(dir, p.file())); err != nil {
			return fmt.Errorf("apt-get download left no %s", p.file())
		}
	}
	return nil
}

// alternative is one `update-alternatives --install` of a maintainer script.
type alternative struct {
	link, name, path, priority string
	slaves                     [][2]string // name, path; the link is /usr/sbin/<name>
}

// iptablesAlternatives are those iptables' postinst registers: legacy at
// priority 10, nft at 20, so nft is the default and the entrypoint wrapper
// switches with update-alternatives --set.
func iptablesAlternatives() []alternative {
	var alts []alternative
	for _, backend := range []struct{ name, priority string }{{"legacy", "10"}, {"nft", "20"}} {
		for _, cmd := range []string{"iptables", "ip6tables"} {
			alts = append(alts, alternative{
				link: "/usr/sbin/" + cmd, name: cmd, path: "/usr/sbin/" + cmd + "-" + backend.name, priority: backend.priority,
				slaves: [][2]string{
					{cmd + "-restore", "/usr/sbin/" + cmd + "-" + backend.name + "-restore"},
					{cmd + "-save", "/usr/sbin/" + cmd + "-" + backend.name + "-save"},
				},
			})
		}
	}
	return alts
}

// configure does in root what the maintainer scripts that matter here would
// do: register the iptables alternatives, write /etc/passwd and /etc/group
// from base-passwd's masters, create /tmp.
func configure(root string) error {
	for _, a := range iptablesAlternatives() {
		args := []string{"--root", root, "--log", "/dev/null", "--quiet", "--install", a.link, a.name, a.path, a.priority}
		for _, s := range a.slaves {
			args = append(args, "--slave", "/usr/sbin/"+s[0], s[0], s[1])
		}
		if out, err := exec.Command("update-alternatives", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("update-alternatives %v: %w: %s", args, err, bytes.TrimSpace(out))
		}
	}
	for _, f := range []string{"passwd", "group"} {
		b, err := os.ReadFile(filepath.Join(root, "usr/share/base-passwd", f+".master"))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, "etc", f), b, 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o755); err != nil {
		return err
	}
	return os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky)
}

// mergedUsr maps a path of a package to where it lives on a merged-/usr
// system (bookworm's default): /bin, /sbin and /lib* are links into /usr.
func mergedUsr(rel string) string {
	first, rest, _ := strings.Cut(rel, "/")
	for _, d := range mergedDirs {
		if first == d {
			if rest == "" {
				return "usr/" + d
			}
			return "usr/" + d + "/" + rest
		}
	}
	return rel
}

// mergedDirs are the top-level directories merged into /usr.
var mergedDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// skipped are the trees a slim image leaves out, as debian:bookworm-slim's
// dpkg excludes do (copyright files stay).
func skipped(rel string) bool {
	for _, p := range []string{"usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/", "usr/share/doc/"} {
		if strings.HasPrefix(rel+"/", p) && rel+"/" != p {
			if p == "usr/share/doc/" && filepath.Base(rel) == "copyright" {
				return false
			}
			if p == "usr/share/doc/" && strings.Count(rel, "/") == 3 {
				return false // the package's doc directory, which holds copyright
			}
			return true
		}
	}
	return false
}
