package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/test/harness/images"
)

// TestImages_holdWhatTheDockerfileTargetsHold keeps `make images` (package
// test/harness/images, which builds the real-node cluster's images without a
// container engine) and the Dockerfile in agreement: the same base
// distribution, packages, files, user and entrypoint per target.
func TestImages_holdWhatTheDockerfileTargetsHold(t *testing.T) {
	stages := parseDockerfile(t, readFile(t, filepath.Join(repoRoot, "Dockerfile")))
	specs := map[string]images.Spec{}
	for _, s := range images.Specs() {
		specs[s.Name] = s
	}
	for target, image := range map[string]string{"agent": images.Agent, "lbsync": images.LBSync, "nplctl": images.NPLCtl} {
		t.Run(target, func(t *testing.T) {
			st, spec := stages[target], specs[image]
			if st == nil || spec.Name == "" {
				t.Fatalf("target %s (%v) or image %s (%v) missing", target, st != nil, image, spec.Name != "")
			}
			// The base: debian:bookworm-slim is Debian bookworm; distroless
			// static:nonroot is its static:nonroot.
			switch spec.Base {
			case images.BaseDebian:
				if !strings.HasPrefix(st.base, images.BaseDebian+"-") && st.base != images.BaseDebian {
					t.Errorf("Dockerfile base %s; the image builder assembles %s", st.base, spec.Base)
				}
			case images.BaseStatic:
				if st.base != "gcr.io/distroless/"+images.BaseStatic {
					t.Errorf("Dockerfile base %s; the image builder stands in for gcr.io/distroless/%s", st.base, spec.Base)
				}
			default:
				t.Errorf("image base %s stands for no Dockerfile base (%s)", spec.Base, st.base)
			}
			// Every package the Dockerfile installs.
			for _, r := range st.all("RUN") {
				_, install, ok := strings.Cut(r, "apt-get install")
				if !ok {
					continue
				}
				install, _, _ = strings.Cut(install, "&&")
				for _, f := range strings.Fields(install) {
					if !strings.HasPrefix(f, "-") && !slices.Contains(spec.Packages, f) {
						t.Errorf("the Dockerfile installs %s; the image builder does not", f)
					}
				}
			}
			// The same files at the same places with the same modes.
			var want []string
			for _, c := range st.all("COPY") {
				want = append(want, dockerCopy(t, c))
			}
			var got []string
			for _, f := range spec.Files {
				got = append(got, fmt.Sprintf("%s %s -> %s mode %s", f.Origin, f.Source, f.Path, modeString(f.Mode)))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("files (-Dockerfile +image builder):\n%s", diff)
			}
			if u := st.last("USER"); u != spec.User {
				t.Errorf("USER %q; the image builder's user %q", u, spec.User)
			}
			if ep := entrypoint(t, st); !slices.Equal(ep, spec.Entrypoint) {
				t.Errorf("ENTRYPOINT %q; the image builder's %q", ep, spec.Entrypoint)
			}
		})
	}
}

// dockerCopy describes a COPY as images.File does: a file of the checkout
// (origin repo) or a binary of the builder stage (origin bin, as `make build`
// writes it into bin/).
func dockerCopy(t *testing.T, args string) string {
	t.Helper()
	f := strings.Fields(args)
	origin, mode := "repo", "-"
	var paths []string
	for _, a := range f {
		switch {
		case a == "--from=builder":
			origin = "bin"
		case strings.HasPrefix(a, "--chmod="):
			mode = strings.TrimPrefix(a, "--chmod=")
		case strings.HasPrefix(a, "--"):
			t.Fatalf("COPY %s: flag %s is not understood here", args, a)
		default:
			paths = append(paths, a)
		}
	}
	if len(paths) != 2 {
		t.Fatalf("COPY %s: want one source and one destination", args)
	}
	src := paths[0]
	if origin == "bin" {
		src = strings.TrimPrefix(src, "/out/")
	}
	if mode == "-" && origin == "bin" {
		mode = "0755" // go build writes executables
	}
	return fmt.Sprintf("%s %s -> %s mode %s", origin, src, paths[1], mode)
}

func modeString(m os.FileMode) string {
	return "0" + strconv.FormatUint(uint64(m.Perm()), 8)
}
