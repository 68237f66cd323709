package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/contract"
)

// The measuring helpers decide the reported figures, so they are specified
// here without a cluster.

func TestWriteLog_matchesEachChangeToTheFirstWriteAfterIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "npl-lbsync.log")
	lines := `I1122 10:31:03.964749   24982 mock.go:177] "Mock load balancer written" loadBalancer="bench--ns-svc-0001" vip="198.18.160.2" listeners=1
I1122 10:31:04.100000   24982 controller.go:499] "Applied load balancer" service="ns/svc-0001" lb="bench--ns-svc-0001" readyBackends=10
I1122 10:31:04.250000   24982 mock.go:177] "Mock load balancer written" loadBalancer="bench--ns-svc-0001" vip="198.18.160.2" listeners=1
I1122 10:31:04.300000   24982 mock.go:177] "Mock load balancer written" loadBalancer="bench--ns-svc-0002" vip="198.18.160.3" listeners=1
I1122 10:31:04.400000   24982 mock.go:177] "Mock load balancer written" loadBalancer="bench--ns-svc-0001" vip="198.18.160.2" listeners=1
I1122 10:31:04.5`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	year := time.Now().Year()
	at := func(sec, micro int) time.Time { return time.Date(year, 11, 22, 10, 31, sec, micro*1000, time.Local) }
	w := &writeLog{path: path, writes: map[string][]time.Time{}}
	if err := w.read(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		change change
		want   time.Time
		found  bool
	}{
		{"the write after the change, not the one before", change{lb: "bench--ns-svc-0001", at: at(4, 0)}, at(4, 250000), true},
		{"a write at the same microsecond counts", change{lb: "bench--ns-svc-0002", at: at(4, 300000)}, at(4, 300000), true},
		{"no write after the change", change{lb: "bench--ns-svc-0002", at: at(4, 300001)}, time.Time{}, false},
		{"another load balancer's writes do not count", change{lb: "bench--ns-svc-0003", at: at(3, 0)}, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := w.applied(tc.change)
			if found != tc.found || !got.Equal(tc.want) {
				t.Errorf("applied(%v) = %v, %t; want %v, %t", tc.change, got, found, tc.want, tc.found)
			}
		})
	}

	// The incomplete last line is read once it is complete.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`00000   24982 mock.go:177] "Mock load balancer written" loadBalancer="bench--ns-svc-0003" vip="198.18.160.4" listeners=1` + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := w.read(); err != nil {
		t.Fatal(err)
	}
	if got, found := w.applied(change{lb: "bench--ns-svc-0003", at: at(4, 0)}); !found || !got.Equal(at(4, 500000)) {
		t.Errorf("after the line was completed: applied = %v, %t; want %v, true", got, found, at(4, 500000))
	}
	if got := w.last(); !got.Equal(at(4, 500000)) {
		t.Errorf("last write = %v, want %v", got, at(4, 500000))
	}
	if diff := cmp.Diff(3, len(w.writes["bench--ns-svc-0001"])); diff != "" {
		t.Errorf("writes of svc-0001 read again or lost (-want +got):\n%s", diff)
	}
}

func TestPortChanges_countsMovedAndLostEntries(t *testing.T) {
	entry := func(podPort, nodePort int) contract.Entry {
		return contract.Entry{PodPort: podPort, NodeIP: "198.18.0.10", NodePort: nodePort, Protocol: "tcp", IPFamily: "IPv4"}
	}
	before := map[string][]contract.Entry{
		"a": {entry(8080, 61000), entry(8081, 61001)},
		"b": {entry(8080, 61002)},
	}
	for _, tc := range []struct {
		name  string
		after map[string][]contract.Entry
		want  int
	}{
		{"same ports in another order", map[string][]contract.Entry{
			"a": {entry(8081, 61001), entry(8080, 61000)}, "b": {entry(8080, 61002)}}, 0},
		{"one port moved", map[string][]contract.Entry{
			"a": {entry(8080, 61000), entry(8081, 61005)}, "b": {entry(8080, 61002)}}, 1},
		{"a Pod lost its annotation", map[string][]contract.Entry{
			"a": {entry(8080, 61000), entry(8081, 61001)}}, 1},
		{"a new Pod does not count", map[string][]contract.Entry{
			"a": {entry(8080, 61000), entry(8081, 61001)}, "b": {entry(8080, 61002)}, "c": {entry(8080, 61003)}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := portChanges(before, tc.after); got != tc.want {
				t.Errorf("portChanges = %d, want %d", got, tc.want)
			}
		})
	}
}
