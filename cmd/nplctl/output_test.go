package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inspect"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test ./cmd/nplctl -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

func sampleReport() inspect.Report {
	lb := func(name string, members ...lbmodel.Member) *lbmodel.LoadBalancer {
		return &lbmodel.LoadBalancer{Name: "c1--shop-" + name, Service: "shop/" + name, Listeners: []lbmodel.Listener{{
			Port: 80, Protocol: lbmodel.TCP,
			Pool: lbmodel.Pool{Name: "c1--shop-" + name + "-TCP-80", Members: members},
		}}}
	}
	m := func(ip string, port int32, enabled bool) lbmodel.Member {
		return lbmodel.Member{IP: ip, Port: port, Enabled: enabled}
	}
	expected := []*lbmodel.LoadBalancer{
		lb("web", m("198.18.0.10", 61000, true), m("198.18.0.11", 61001, true)),
		lb("api", m("198.18.0.12", 61002, true), m("198.18.0.10", 61003, false)),
		lb("new", m("198.18.0.11", 61004, true)),
	}
	// web's policy is applied; api's slow start is not.
	expected[0].Listeners[0].Pool.Policy = &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz"},
		Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP}}
	expected[1].Listeners[0].Pool.Policy = &lbmodel.Policy{SlowStartSeconds: 30}
	actual := []lbmodel.LoadBalancer{
		{Name: "c1--shop-web", VIPs: []string{"203.0.113.1"}, Listeners: expected[0].Listeners},
		{Name: "c1--shop-api", VIPs: []string{"203.0.113.2"}, Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP,
			Pool: lbmodel.Pool{Name: "c1--shop-api-TCP-80", Members: []lbmodel.Member{m("198.18.0.12", 61002, true), m("198.18.0.13", 61009, true)}}}}},
	}
	return inspect.Compare(expected, actual)
}

func TestPrintPools_golden(t *testing.T) {
	for _, format := range []string{"table", "wide", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			if err := printPools(&out, format, sampleReport(), false); err != nil {
				t.Fatal(err)
			}
			golden(t, "pools-"+format+".golden", out.Bytes())
		})
	}
}

func TestPrintPools_colorsStatesOnlyOnATerminal(t *testing.T) {
	var plain, color bytes.Buffer
	_ = printPools(&plain, "table", sampleReport(), false)
	_ = printPools(&color, "table", sampleReport(), true)
	if bytes.Contains(plain.Bytes(), []byte("\x1b[")) {
		t.Error("escape codes without a terminal")
	}
	if !bytes.Contains(color.Bytes(), []byte("\x1b[33mdrift")) {
		t.Errorf("no colored drift state on a terminal:\n%s", color.String())
	}
}

func TestPrintMappings_golden(t *testing.T) {
	rows := []mapping{
		{Namespace: "shop", Pod: "web-1", Node: "n0", PodPort: 8080, Protocol: "tcp", NodeIP: "198.18.0.10", NodePort: 61000, IPFamily: "IPv4", Services: []string{"web"}, Ready: true},
		{Namespace: "shop", Pod: "dns-1", Node: "n1", PodPort: 5353, Protocol: "udp", NodeIP: "198.18.0.11", NodePort: 61001, IPFamily: "IPv4", Services: []string{}, Ready: false},
		{Namespace: "shop", Pod: "bad-1", Node: "n1", Error: "parse nodeportlocal.antrea.io annotation: invalid character"},
	}
	for _, format := range []string{"table", "wide", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			if err := printMappings(&out, format, rows); err != nil {
				t.Fatal(err)
			}
			golden(t, "mappings-"+format+".golden", out.Bytes())
		})
	}
}
