package realnodes

import (
	"os"
	"testing"
)

// TestServerCountersOf reads the counters a failed VIP stream logs from a
// "show stat" of HAProxy 2.6 (testdata: a frontend, a server and its
// backend of one load balancer, written by a real haproxy).
func TestServerCountersOf(t *testing.T) {
	stat, err := os.ReadFile("testdata/show-stat-2.6.csv")
	if err != nil {
		t.Fatal(err)
	}
	got := serverCountersOf(string(stat), "real-nodes--shop_web")
	want := "pxname svname status weight scur stot econ eresp wretr wredis chkfail lastchg\n" +
		"real-nodes--shop_web-TCP-80 FRONTEND OPEN  0 0      \n" +
		"real-nodes--shop_web_80 198.18.0.10_61000 no check 1 0 0 0 0 0 0  0\n" +
		"real-nodes--shop_web_80 BACKEND UP 1 0 0 0 0 0 0  0\n"
	if got != want {
		t.Errorf("serverCountersOf:\n%s\nwant:\n%s", got, want)
	}
	if got := serverCountersOf(string(stat), "real-nodes--shop_cart"); got != "pxname svname status weight scur stot econ eresp wretr wredis chkfail lastchg\n" {
		t.Errorf("another load balancer's rows: %q", got)
	}
}
