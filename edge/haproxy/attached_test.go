package haproxy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRender_attached: the file an attached edge writes has no global
// section (the host's holds the admin socket), a socket of the invalid
// share that the host's workers, another user, can connect to, and that
// they address from inside their chroot.
func TestRender_attached(t *testing.T) {
	g := Globals{InvalidSocket: "/var/lib/haproxy/npl-edge-500.sock", Chroot: "/var/lib/haproxy", Attached: true, Checks: DefaultChecks}
	r := Render(g, sampleProxies())
	text := string(r.Text)
	for _, line := range strings.Split(text, "\n") {
		if line == "global" || strings.Contains(line, "stats socket") || strings.Contains(line, "hard-stop-after") {
			t.Errorf("attached configuration has the global line %q", line)
		}
	}
	if !strings.Contains(text, "    bind unix@/var/lib/haproxy/npl-edge-500.sock mode 666\n") {
		t.Errorf("the invalid share's frontend is not bound where the workers reach it, mode 666:\n%s", text)
	}
	if want := "    server " + InvalidServer + " unix@/npl-edge-500.sock weight 3\n"; !strings.Contains(text, want) {
		t.Errorf("the invalid server is not addressed from inside the chroot: want %q in\n%s", want, text)
	}
	if got := g.InvalidServerArgs(2); got != "unix@/npl-edge-500.sock weight 2" {
		t.Errorf("InvalidServerArgs = %q, the runtime's add server must match the file's", got)
	}
	own := Render(testGlobals, sampleProxies())
	if !strings.HasPrefix(string(own.Text), "# Written by npl-edge; it replaces this file at every change.\nglobal\n") ||
		!strings.Contains(string(own.Text), "    bind unix@/run/500.sock mode 600\n") {
		t.Errorf("the edge's own configuration lost its global section or its private socket:\n%s", own.Text)
	}
}

// TestCheckError_linesOfTheEdgesFile: an attached check loads the host's
// files first; only the lines of the edge's file name its objects.
func TestCheckError_linesOfTheEdgesFile(t *testing.T) {
	ce := &CheckError{Output: "parsing [/etc/haproxy/haproxy.cfg:12] : unknown keyword; parsing [/var/lib/npl-edge/npl.cfg.new:30] : bad; " +
		"Binding [/var/lib/npl-edge/npl.cfg:31] for frontend x: cannot bind"}
	if got := ce.Lines(); !slices.Equal(got, []int{12, 30, 31}) {
		t.Errorf("Lines() = %v, want every file's", got)
	}
	if got := ce.Lines("/var/lib/npl-edge/npl.cfg", "/var/lib/npl-edge/npl.cfg.new"); !slices.Equal(got, []int{30, 31}) {
		t.Errorf("Lines(the edge's files) = %v, want [30 31]", got)
	}
}

// TestHostChroot reads the chroot of the host's global section, from files
// and from a directory of .cfg files, as HAProxy's -f takes them.
func TestHostChroot(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	debian := write("haproxy.cfg", "global\n\tlog /dev/log local0\n\tchroot /var/lib/haproxy/\n\tuser haproxy\n"+
		"defaults\n\tmode http\nfrontend f\n\tbind :80\n\t# chroot /not/this\n")
	none := write("plain.cfg", "global\n    maxconn 100\nlisten l\n    bind :81\n    chroot /not/global\n")
	write("conf.d/10-a.cfg", "defaults\n    mode tcp\n")
	write("conf.d/20-b.cfg", "global\n    chroot /srv/jail\n")
	write("conf.d/30-c.txt", "global\n    chroot /ignored\n")
	for _, c := range []struct {
		files []string
		want  string
	}{
		{[]string{debian}, "/var/lib/haproxy"},
		{[]string{none}, ""},
		{[]string{filepath.Join(dir, "conf.d")}, "/srv/jail"},
		{[]string{none, debian}, "/var/lib/haproxy"},
	} {
		got, err := HostChroot(c.files)
		if err != nil || got != c.want {
			t.Errorf("HostChroot(%v) = %q, %v; want %q", c.files, got, err, c.want)
		}
	}
	if _, err := HostChroot([]string{filepath.Join(dir, "missing.cfg")}); err == nil {
		t.Error("HostChroot of a missing file: no error")
	}
}

// TestCheck_hostAndEdgeFilesTogether: haproxy -c loads the host's file and
// the attached edge's file as the host's HAProxy does.
func TestCheck_hostAndEdgeFilesTogether(t *testing.T) {
	bin := haproxyBin(t)
	dir := t.TempDir()
	host := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(host, []byte("global\n    stats socket "+filepath.Join(dir, "a.sock")+" mode 660 level admin\n"+
		"defaults\n    mode http\n    timeout client 1s\n    timeout server 1s\n    timeout connect 1s\n"+
		"frontend host\n    bind 127.0.0.1:8080\n    http-request return status 200\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := Render(Globals{InvalidSocket: filepath.Join(dir, "500.sock"), Attached: true, Checks: DefaultChecks}, sampleWithCertsIn(t, dir))
	edge := filepath.Join(dir, "npl.cfg.new")
	if err := os.WriteFile(edge, r.Text, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(context.Background(), bin, host, edge); err != nil {
		t.Fatalf("haproxy -c -f <host's> -f <edge's>: %v\n%s", err, r.Text)
	}
	// The edge's file twice is refused (its proxies twice): the check
	// loads every file it is given.
	if err := Check(context.Background(), bin, host, edge, edge); err == nil {
		t.Error("haproxy -c accepted the edge's proxies twice: the check does not load the files it is given")
	}
}
