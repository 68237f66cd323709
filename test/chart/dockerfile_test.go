package chart

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const repoRoot = "../.."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
}

// stage is one FROM section.
type stage struct {
	name  string
	base  string // with ARG defaults substituted
	instr []instruction
}

// parseDockerfile splits a Dockerfile into stages. It knows what this
// repository's Dockerfile uses: comments, "\" continuations, ARG defaults in
// FROM, "FROM [--platform=...] image AS name".
func parseDockerfile(t *testing.T, text string) map[string]*stage {
	t.Helper()
	var lines []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if body, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	globalArgs := map[string]string{}
	stages := map[string]*stage{}
	var st *stage
	argRE := regexp.MustCompile(`\$\{?(\w+)\}?`)
	for _, l := range lines {
		cmd, args, _ := strings.Cut(l, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		switch {
		case in.cmd == "ARG" && st == nil:
			name, def, _ := strings.Cut(in.args, "=")
			globalArgs[name] = def
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			if len(f) != 3 || !strings.EqualFold(f[1], "AS") {
				t.Fatalf("FROM %q: want FROM image AS name", in.args)
			}
			base := argRE.ReplaceAllStringFunc(f[0], func(m string) string { return globalArgs[argRE.FindStringSubmatch(m)[1]] })
			st = &stage{name: f[2], base: base}
			stages[st.name] = st
		case st != nil:
			st.instr = append(st.instr, in)
		}
	}
	return stages
}

func (s *stage) all(cmd string) []string {
	var out []string
	for _, in := range s.instr {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func (s *stage) last(cmd string) string {
	all := s.all(cmd)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

func entrypoint(t *testing.T, s *stage) []string {
	t.Helper()
	var ep []string
	if err := json.Unmarshal([]byte(s.last("ENTRYPOINT")), &ep); err != nil || len(ep) == 0 {
		t.Fatalf("stage %s: ENTRYPOINT %q is not an exec-form list", s.name, s.last("ENTRYPOINT"))
	}
	return ep
}

func TestDockerfile_buildsTheThreeTargets(t *testing.T) {
	stages := parseDockerfile(t, readFile(t, filepath.Join(repoRoot, "Dockerfile")))
	for _, target := range []string{"agent", "lbsync", "nplctl"} {
		if stages[target] == nil {
			t.Errorf("no target %s; have %v", target, slices.Sorted(maps.Keys(stages)))
		}
	}

	t.Run("builder compiles static binaries with the Makefile's flags", func(t *testing.T) {
		b := stages["builder"]
		if b == nil {
			t.Fatal("no builder stage")
		}
		if !regexp.MustCompile(`^golang:1\.26(\.\d+)?(-\w+)?$`).MatchString(b.base) {
			t.Errorf("builder base %q; want golang:1.26 pinned by tag", b.base)
		}
		runs := b.all("RUN")
		download := slices.IndexFunc(runs, func(r string) bool { return strings.Contains(r, "go mod download") })
		build := slices.IndexFunc(runs, func(r string) bool { return strings.Contains(r, "go build") })
		if download < 0 || build < 0 || download > build {
			t.Fatalf("want a `go mod download` RUN before the `go build` RUN; have %q", runs)
		}
		copies := b.all("COPY")
		if len(copies) < 2 || copies[0] != "go.mod go.sum ./" {
			t.Errorf("COPY %q: want go.mod and go.sum copied alone first, so the module layer is cached", copies)
		}
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/npl-agent", "./cmd/npl-lbsync", "./cmd/nplctl"} {
			if !strings.Contains(runs[build], want) {
				t.Errorf("go build RUN lacks %s: %s", want, runs[build])
			}
		}
		// The version is stamped as `make build` stamps it.
		m := regexp.MustCompile(`(?m)^LDFLAGS\s*:=.*(-X \S+=)`).FindStringSubmatch(readFile(t, filepath.Join(repoRoot, "Makefile")))
		if m == nil {
			t.Fatal("no LDFLAGS -X in the Makefile")
		}
		if !strings.Contains(runs[build], m[1]) {
			t.Errorf("go build RUN does not stamp %s like the Makefile: %s", m[1], runs[build])
		}
	})

	for _, target := range []string{"lbsync", "nplctl"} {
		t.Run(target+" is distroless and non-root", func(t *testing.T) {
			s := stages[target]
			if s == nil {
				t.Fatal("missing")
			}
			if s.base != "gcr.io/distroless/static:nonroot" {
				t.Errorf("base %q; want gcr.io/distroless/static:nonroot", s.base)
			}
			if u := s.last("USER"); u != "65532:65532" {
				t.Errorf("USER %q; want 65532:65532", u)
			}
			bin := "npl-" + strings.TrimPrefix(target, "npl")
			if target == "nplctl" {
				bin = "nplctl"
			}
			if ep := entrypoint(t, s); !strings.HasSuffix(ep[0], "/"+bin) {
				t.Errorf("ENTRYPOINT %v; want the %s binary", ep, bin)
			}
		})
	}

	t.Run("agent has iptables, nftables, conntrack and the wrapper", func(t *testing.T) {
		s := stages["agent"]
		if s == nil {
			t.Fatal("missing")
		}
		install := ""
		for _, r := range s.all("RUN") {
			if strings.Contains(r, "apt-get install") {
				install = r
			}
		}
		for _, pkg := range []string{"iptables", "nftables", "conntrack"} {
			if !slices.Contains(strings.Fields(install), pkg) {
				t.Errorf("apt-get install %q does not install %s", install, pkg)
			}
		}
		if !strings.Contains(install, "xtables-nft-multi") || !strings.Contains(install, "xtables-legacy-multi") {
			t.Errorf("the image does not check that both iptables backends are installed: %q", install)
		}
		ep := entrypoint(t, s)
		copied := false
		for _, c := range s.all("COPY") {
			f := strings.Fields(c)
			if slices.Contains(f, "hack/iptables-wrapper.sh") && f[len(f)-1] == ep[0] {
				copied = true
			}
		}
		if !copied || len(ep) != 2 || !strings.HasSuffix(ep[1], "/npl-agent") {
			t.Errorf("ENTRYPOINT %v; want hack/iptables-wrapper.sh (copied there) running npl-agent", ep)
		}
		if fi, err := os.Stat(filepath.Join(repoRoot, "hack", "iptables-wrapper.sh")); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("hack/iptables-wrapper.sh is missing or not executable: %v", err)
		}
	})

	t.Run("the chart's images are documented Dockerfile targets", func(t *testing.T) {
		rows := markdownTable(t, readFile(t, filepath.Join(chartDir, "README.md")), "## Images")
		vals := chartValues(t)
		// Every image of the values needs a row.
		imageKeys := map[string]bool{}
		for k, v := range vals {
			if m, ok := v.(map[string]any); ok {
				if _, ok := m["image"]; ok {
					imageKeys[k+".image"] = true
				}
			}
		}
		documented := map[string]string{} // repository -> target
		for _, row := range rows {
			if len(row) != 4 {
				t.Fatalf("Images row %v: want component, values, repository, target", row)
			}
			key, repo, target := row[1], row[2], row[3]
			delete(imageKeys, key)
			if got, _ := lookup(vals, key+".repository"); got != repo {
				t.Errorf("%s.repository is %v; the README says %s", key, got, repo)
			}
			if stages[target] == nil {
				t.Errorf("%s: target %s is not in the Dockerfile", key, target)
			}
			documented[repo] = target
		}
		if len(imageKeys) > 0 {
			t.Errorf("images without a README row: %v", imageKeys)
		}
		// The build commands of the README and the Dockerfile tag each
		// target with its repository.
		buildRE := regexp.MustCompile(`docker build --target (\w+)\s+-t ([^:\s]+):`)
		for _, file := range []string{filepath.Join(chartDir, "README.md"), filepath.Join(repoRoot, "Dockerfile")} {
			for _, m := range buildRE.FindAllStringSubmatch(readFile(t, file), -1) {
				if want, ok := documented[m[2]]; ok && want != m[1] {
					t.Errorf("%s builds %s from target %s; the Images table says %s", file, m[2], m[1], want)
				}
			}
		}
		// Every workload of a rendered release runs one of those images.
		r := render(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), nil)
		for _, o := range workloads(r) {
			spec, _ := podSpec(o)
			for _, c := range allContainers(spec) {
				repo, _, _ := strings.Cut(c.Image, ":")
				if documented[repo] == "" {
					t.Errorf("%s runs %s, not a documented Dockerfile target", o, c.Image)
				}
			}
		}
	})

	t.Run(".dockerignore keeps what the build needs", func(t *testing.T) {
		var patterns []string
		for _, l := range strings.Split(readFile(t, filepath.Join(repoRoot, ".dockerignore")), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				patterns = append(patterns, strings.Trim(l, "/"))
			}
		}
		for _, need := range []string{"go.mod", "go.sum", "cmd", "agent", "lbsync", "providers", "internal", "hack/iptables-wrapper.sh", "hack"} {
			for _, p := range patterns {
				if ok, _ := filepath.Match(p, need); ok {
					t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", p, need)
				}
			}
		}
	})
}

// wrapperHost fakes the iptables commands the wrapper looks at.
type wrapperHost struct {
	// legacy and nft are the iptables-save outputs of each backend.
	legacy, nft string
	mode        string // NPL_IPTABLES_MODE
}

func runWrapper(t *testing.T, h wrapperHost) (stdout, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	stubs, sbin, bin := filepath.Join(dir, "stubs"), filepath.Join(dir, "sbin"), filepath.Join(dir, "bin")
	for name, out := range map[string]string{
		"iptables-legacy-save": h.legacy, "iptables-nft-save": h.nft, "ip6tables-legacy-save": "", "ip6tables-nft-save": "",
	} {
		data := filepath.Join(stubs, name+".out")
		writeFile(t, data, []byte(out))
		writeFile(t, filepath.Join(stubs, name), []byte("#!/bin/sh\ncat "+data+"\n"))
		if err := os.Chmod(filepath.Join(stubs, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"nft", "legacy"} {
		writeFile(t, filepath.Join(sbin, "xtables-"+m+"-multi"), []byte("#!/bin/sh\n"))
		if err := os.Chmod(filepath.Join(sbin, "xtables-"+m+"-multi"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	wrapper, err := filepath.Abs(filepath.Join(repoRoot, "hack", "iptables-wrapper.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// The wrapped command prints where iptables and ip6tables-restore lead
	// and its own arguments. NPL_IPTABLES_BIN_DIR is always set here: the
	// wrapper then never runs update-alternatives, and PATH holds only the
	// stubs and the basic tools, so no real iptables command runs.
	cmd := exec.Command("/bin/sh", wrapper, "/bin/sh", "-c",
		`readlink "$(command -v iptables)"; readlink "$(command -v ip6tables-restore)"; echo "$@"`, "sh", "arg1", "--arg2")
	cmd.Env = []string{"PATH=" + stubs + ":/usr/bin:/bin", "NPL_IPTABLES_BIN_DIR=" + bin, "NPL_IPTABLES_SBIN=" + sbin}
	if h.mode != "" {
		cmd.Env = append(cmd.Env, "NPL_IPTABLES_MODE="+h.mode)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return strings.ReplaceAll(out.String(), sbin+"/", ""), errOut.String(), err
}

func TestIPTablesWrapper_picksTheHostBackend(t *testing.T) {
	const (
		hint  = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"
		rules = "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A PREROUTING -j X\n-A OUTPUT -j Y\nCOMMIT\n"
		one   = "*filter\n-A INPUT -j ACCEPT\nCOMMIT\n"
	)
	for _, tc := range []struct {
		name string
		host wrapperHost
		want string
	}{
		{"empty host: nft", wrapperHost{}, "nft"},
		{"more legacy rules", wrapperHost{legacy: rules, nft: one}, "legacy"},
		{"more nft rules", wrapperHost{legacy: one, nft: rules}, "nft"},
		{"a tie: nft", wrapperHost{legacy: one, nft: one}, "nft"},
		{"kubelet's hint chain in legacy wins over rule counts", wrapperHost{legacy: hint + one, nft: rules}, "legacy"},
		{"kubelet's hint chain in nft wins over rule counts", wrapperHost{legacy: rules, nft: hint}, "nft"},
		{"forced legacy", wrapperHost{nft: rules, mode: "legacy"}, "legacy"},
		{"forced nft", wrapperHost{legacy: rules, mode: "nft"}, "nft"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := runWrapper(t, tc.host)
			if err != nil {
				t.Fatalf("wrapper: %v\n%s", err, stderr)
			}
			want := "xtables-" + tc.want + "-multi\nxtables-" + tc.want + "-multi\narg1 --arg2\n"
			if diff := cmp.Diff(want, out); diff != "" {
				t.Errorf("iptables links and arguments (-want +got):\n%s\nstderr: %s", diff, stderr)
			}
			if !strings.Contains(stderr, "using the "+tc.want+" backend") {
				t.Errorf("stderr %q does not say which backend it chose", stderr)
			}
		})
	}
}

func TestIPTablesWrapper_rejectsABadMode(t *testing.T) {
	_, stderr, err := runWrapper(t, wrapperHost{mode: "iptables"})
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr, "NPL_IPTABLES_MODE") {
		t.Errorf("wrapper with NPL_IPTABLES_MODE=iptables: %v, stderr %q; want exit 2 naming the variable", err, stderr)
	}
}
