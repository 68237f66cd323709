package haproxy

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/providers"
)

func sampleProxies() Proxies {
	vip := netip.MustParseAddr("198.18.200.1")
	return Proxies{
		Frontends: []Frontend{
			{Name: "c1--ns-web-TCP-80", Cluster: "c1", LoadBalancer: "c1--ns-web", Service: "ns/web", VIP: vip, Port: 80,
				DefaultBackend: "c1--ns-web-TCP-80"},
			{Name: "c1--ns-web-TCP-443", Cluster: "c1", LoadBalancer: "c1--ns-web", Service: "ns/web", VIP: vip, Port: 443,
				DefaultBackend: "c1--ns-web-TCP-443"},
			{Name: "c1--ns-v6-TCP-80", Cluster: "c1", LoadBalancer: "c1--ns-v6", Service: "ns/v6", VIP: netip.MustParseAddr("fd00:198:18::1"),
				Port: 80, DefaultBackend: "c1--ns-v6-TCP-80"},
			{Name: "c1--ns-ing-L7-HTTP-80", Cluster: "c1", LoadBalancer: "c1--ns-ing-L7", Ingress: "ns/ing", HTTP: true,
				VIP: netip.MustParseAddr("198.18.200.2"), Port: 80, DefaultBackend: "c1--ns-ing-L7-ns-web-80", Rules: []providers.Rule{
					{Host: "a.example.com", Path: "/api", PathType: providers.PathExact, Pool: "c1--ns-ing-L7-ns-api-80"},
					{Host: "*.example.com", Path: "/shop", PathType: providers.PathPrefix, Pool: "c1--ns-ing-L7-ns-web-80"},
					{Path: "/", PathType: providers.PathPrefix, Pool: "c1--ns-ing-L7-ns-web-80"},
				}},
		},
		Backends: []Backend{
			{Name: "c1--ns-web-TCP-80", Cluster: "c1", LoadBalancer: "c1--ns-web", Members: []providers.Member{
				{IP: "198.18.0.11", Port: 61001, Enabled: true},
				{IP: "198.18.0.12", Port: 61002, Enabled: false},
			}},
			{Name: "c1--ns-web-TCP-443", Cluster: "c1", LoadBalancer: "c1--ns-web", Members: []providers.Member{}},
			{Name: "c1--ns-v6-TCP-80", Cluster: "c1", LoadBalancer: "c1--ns-v6", Members: []providers.Member{
				{IP: "fd00:198:18::11", Port: 61001, Enabled: true},
			}},
			{Name: "c1--ns-ing-L7-ns-api-80", Cluster: "c1", LoadBalancer: "c1--ns-ing-L7", HTTP: true, Members: []providers.Member{
				{IP: "198.18.0.11", Port: 61003, Enabled: true},
			}},
			{Name: "c1--ns-ing-L7-ns-web-80", Cluster: "c1", LoadBalancer: "c1--ns-ing-L7", HTTP: true, Members: []providers.Member{}},
		},
	}
}

func sorted(p Proxies) Proxies {
	p.Frontends = slices.Clone(p.Frontends)
	p.Backends = slices.Clone(p.Backends)
	slices.SortFunc(p.Frontends, func(a, b Frontend) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(p.Backends, func(a, b Backend) int { return strings.Compare(a.Name, b.Name) })
	return p
}

func TestRender_parseReadsBackWhatWasRendered(t *testing.T) {
	in := sampleProxies()
	r := Render(Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}, in)
	got, err := Parse(r.Text)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(in), got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("Parse(Render) (-want +got):\n%s", diff)
	}
}

func TestRender_frameIgnoresMembers(t *testing.T) {
	g := Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}
	a := sampleProxies()
	b := sampleProxies()
	b.Backends[0].Members = append(slices.Clone(b.Backends[0].Members), providers.Member{IP: "198.18.0.13", Port: 61003, Enabled: true})
	b.Backends[0].Members[0].Enabled = false
	ra, rb := Render(g, a), Render(g, b)
	if ra.Frame != rb.Frame {
		t.Errorf("member changes changed the frame:\n%s\n---\n%s", ra.Frame, rb.Frame)
	}
	if string(ra.Text) == string(rb.Text) {
		t.Error("member changes did not change the configuration")
	}
	c := sampleProxies()
	c.Frontends[1].Port = 8443
	if Render(g, c).Frame == ra.Frame {
		t.Error("a new port did not change the frame")
	}
	d := sampleProxies()
	d.Frontends[3].Rules = d.Frontends[3].Rules[1:]
	if Render(g, d).Frame == ra.Frame {
		t.Error("a removed rule did not change the frame")
	}
}

func TestRender_rulesAsHAProxyConditions(t *testing.T) {
	text := string(Render(Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}, sampleProxies()).Text)
	for _, want := range []string{
		"    use_backend c1--ns-ing-L7-ns-api-80 if { req.hdr(host),field(1,:),lower -m str a.example.com } { path /api }\n",
		"    use_backend c1--ns-ing-L7-ns-web-80 if { req.hdr(host),field(1,:),lower -m reg ^[^.]+\\.example\\.com$ } { path /shop }\n",
		"    use_backend c1--ns-ing-L7-ns-web-80 if { req.hdr(host),field(1,:),lower -m reg ^[^.]+\\.example\\.com$ } { path_beg /shop/ }\n",
		"    use_backend c1--ns-ing-L7-ns-web-80 if TRUE\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the configuration lacks %q:\n%s", want, text)
		}
	}
}

func TestRender_linesNameTheirObject(t *testing.T) {
	r := Render(Globals{AdminSocket: "/run/a.sock", Checks: DefaultChecks}, sampleProxies())
	lines := strings.Split(string(r.Text), "\n")
	for n, obj := range r.Objects {
		line := lines[n-1]
		if !strings.Contains(obj, "c1--ns-") {
			t.Errorf("line %d %q: object %q", n, line, obj)
		}
	}
	if len(r.Objects) == 0 {
		t.Fatal("no line is mapped to an object")
	}
}

// TestRender_haproxyAcceptsIt checks the rendered configuration with the
// real haproxy -c.
func TestRender_haproxyAcceptsIt(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("haproxy not found: run make deps (apt-get install haproxy)")
	}
	dir := t.TempDir()
	r := Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), Checks: DefaultChecks}, sampleProxies())
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, r.Text, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(context.Background(), bin, path); err != nil {
		t.Fatalf("haproxy refused the rendered configuration: %v\n%s", err, r.Text)
	}

	bad := sampleProxies()
	bad.Frontends[1].Name = "c1--ns-web-TCP{443"
	r = Render(Globals{AdminSocket: filepath.Join(dir, "admin.sock"), Checks: DefaultChecks}, bad)
	if err := os.WriteFile(path, r.Text, 0o600); err != nil {
		t.Fatal(err)
	}
	err = Check(context.Background(), bin, path)
	ce, ok := err.(*CheckError)
	if !ok {
		t.Fatalf("Check of an illegal proxy name: got %v, want a *CheckError", err)
	}
	var named bool
	for _, n := range ce.Lines() {
		named = named || strings.Contains(r.Objects[n], "c1--ns-web-TCP{443")
	}
	if !named {
		t.Errorf("the lines HAProxy names (%v) do not map to the bad proxy:\n%s", ce.Lines(), ce.Output)
	}
}

func TestUnrenderable(t *testing.T) {
	if why := Unrenderable(providers.Rule{Host: "a.example.com", Path: "/a-b_c.d~e", Pool: "p"}); why != "" {
		t.Errorf("a plain rule: %s", why)
	}
	for _, path := range []string{"/a b", "/a#b", "/a'b", `/a"b`, `/a\b`, "/a{b"} {
		if Unrenderable(providers.Rule{Path: path, Pool: "p"}) == "" {
			t.Errorf("path %q is accepted", path)
		}
	}
}

func TestParseServersState(t *testing.T) {
	out := `1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 be1 1 127.0.0.1_18081 127.0.0.1 2 4 1 1 0 1 0 1 6 0 0 0 - 18081 - 0 0 - - 0
3 be1 2 127.0.0.1_18082 127.0.0.1 2 8 1 1 0 1 0 0 6 0 0 0 - 18082 - 0 0 - - 0
3 be1 3 127.0.0.1_18083 127.0.0.1 0 5 1 1 0 1 0 0 6 0 0 0 - 18083 - 0 0 - - 0

`
	got, err := ParseServersState(out)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name             string
		port             int32
		up, enabled, dra bool
	}
	var rows []row
	for _, s := range got {
		rows = append(rows, row{s.Name, s.Port, s.Up, s.Enabled(), s.Draining()})
	}
	want := []row{
		{"127.0.0.1_18081", 18081, true, true, false},   // configured disabled, then set ready
		{"127.0.0.1_18082", 18082, true, false, true},   // draining
		{"127.0.0.1_18083", 18083, false, false, false}, // in maintenance
	}
	if diff := cmp.Diff(want, rows, cmp.AllowUnexported(row{})); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestParseShowProc(t *testing.T) {
	out := `#<PID>          <type>          <reloads>       <uptime>        <version>
11510           master          1 [failed: 2]   0d00h00m02s     2.6.12-1+deb12u4
# workers
11613           worker          0               0d00h00m01s     2.6.12-1+deb12u4
11517           worker          1               0d00h00m03s     2.6.12-1+deb12u4
# programs
`
	procs, err := ParseShowProc(out)
	if err != nil {
		t.Fatal(err)
	}
	if procs[0].Type != "master" || procs[0].Reloads != 1 || procs[0].Failed != 2 {
		t.Errorf("master: %+v", procs[0])
	}
	if w := CurrentWorker(procs); w != 11613 {
		t.Errorf("current worker %d, want 11613", w)
	}
	// After a failed reload the old worker, which lived through it, is
	// the one that serves.
	failed, err := ParseShowProc("#<PID> <type> <reloads>\n10 master 1 [failed: 1] 0d 2.6\n# workers\n11 worker 1 0d 2.6\n")
	if err != nil {
		t.Fatal(err)
	}
	if w := CurrentWorker(failed); w != 11 {
		t.Errorf("current worker after a failed reload %d, want 11", w)
	}
	if _, err := ParseShowProc("Unknown command\n"); err == nil {
		t.Error("an answer without a master parsed")
	}
}
