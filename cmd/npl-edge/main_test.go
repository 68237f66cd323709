package main

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/nodeportlocal/npl/internal/cli"
)

// npl-edge refuses to start its API on every address (the VIPs' port would
// be taken) or without an address, with a usage error naming --listen.
func TestCommand_listenNeedsTheManagementAddress(t *testing.T) {
	for _, args := range [][]string{{}, {"--listen", ":8443"}, {"--listen", "0.0.0.0:8443"}, {"--listen", "[::]:8443"}, {"--listen", "198.18.2.2"}} {
		cmd := newCommand()
		cmd.SetArgs(args)
		err := cmd.Execute()
		var usage *cli.UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--listen") {
			t.Errorf("npl-edge %v: %v, want a usage error naming --listen", args, err)
		}
	}
	if err := checkListen("198.18.2.2:8443"); err != nil {
		t.Errorf("a management address: %v", err)
	}
	if err := checkListen("edge-a.example.net:8443"); err != nil {
		t.Errorf("a host name: %v", err)
	}
}

// The attach flags go together: a master CLI without the host's files or
// admin socket, or those without a master CLI, is a usage error naming
// what is missing; all three attach, none runs HAProxy itself.
func TestCommand_attachFlagsGoTogether(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--haproxy-master-socket", "/run/m.sock"}, "--haproxy-config"},
		{[]string{"--haproxy-master-socket", "/run/m.sock", "--haproxy-config", "/etc/haproxy/haproxy.cfg"}, "--haproxy-admin-socket"},
		{[]string{"--haproxy-config", "/etc/haproxy/haproxy.cfg"}, "--haproxy-master-socket"},
		{[]string{"--haproxy-admin-socket", "/run/a.sock"}, "--haproxy-master-socket"},
	} {
		cmd := newCommand()
		cmd.SetArgs(append([]string{"--listen", "198.18.2.2:8443"}, c.args...))
		err := cmd.Execute()
		var usage *cli.UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("npl-edge %v: %v, want a usage error naming %s", c.args, err, c.want)
		}
	}
	o := &options{hostMaster: "/run/m.sock", hostAdmin: "/run/a.sock", hostConfigs: []string{"/etc/haproxy/haproxy.cfg", "/etc/haproxy/conf.d"}}
	a, err := attach(o)
	if err != nil || a == nil || a.MasterSocket != "/run/m.sock" || a.AdminSocket != "/run/a.sock" || len(a.Configs) != 2 {
		t.Errorf("attach(all three) = %+v, %v", a, err)
	}
	if a, err := attach(&options{}); a != nil || err != nil {
		t.Errorf("attach(none) = %+v, %v; want npl-edge's own HAProxy", a, err)
	}
}

// The metrics listener answers without authentication: by default on
// loopback only, not on every address (the VIPs' included).
func TestCommand_metricsListenOnLoopbackByDefault(t *testing.T) {
	def := newCommand().Flags().Lookup("metrics-bind-address").DefValue
	host, _, err := net.SplitHostPort(def)
	if err != nil {
		t.Fatalf("default %q: %v", def, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		t.Errorf("--metrics-bind-address defaults to %q, want a loopback address", def)
	}
}
