package bigipsim

import "testing"

func TestSplitEndpoint(t *testing.T) {
	cases := []struct {
		in       string
		addr     string
		port     int
		wantFail bool
	}{
		{in: "/Common/198.18.0.10:61000", addr: "198.18.0.10", port: 61000},
		{in: "198.18.0.10%2:80", addr: "198.18.0.10", port: 80},
		{in: "/npl/fd00:198:18::10.61000", addr: "fd00:198:18::10", port: 61000},
		{in: "/npl/fd00:198:202::1%3.443", addr: "fd00:198:202::1", port: 443},
		{in: "/npl/fd00:198:18::10:61000", wantFail: true}, // IPv6 takes a dot before the port
		{in: "/Common/node-a:80", wantFail: true},          // a node name, not an address
		{in: "198.18.0.10", wantFail: true},
	}
	for _, tc := range cases {
		addr, port, ok := SplitEndpoint(tc.in)
		if ok == tc.wantFail || (ok && (addr != tc.addr || port != tc.port)) {
			t.Errorf("SplitEndpoint(%q) = %q, %d, %t; want %q, %d, %t", tc.in, addr, port, ok, tc.addr, tc.port, !tc.wantFail)
		}
	}
}
