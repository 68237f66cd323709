package cluster

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckHost_refusesWithOneLineSayingWhatIsMissing(t *testing.T) {
	all := func(string) (string, error) { return "/usr/bin/x", nil }
	missing := func(name string) func(string) (string, error) {
		return func(file string) (string, error) {
			if file == name {
				return "", errors.New("executable file not found in $PATH")
			}
			return "/usr/bin/" + file, nil
		}
	}
	tests := []struct {
		name string
		host hostEnv
		want string
	}{
		{"root with every tool", hostEnv{euid: 0, lookPath: all}, ""},
		{"not root", hostEnv{euid: 1000, lookPath: all},
			"npl test cluster: must run as root (network namespaces and iptables need it)"},
		{"no unshare", hostEnv{euid: 0, lookPath: missing("unshare")},
			"npl test cluster: 'unshare' not found: apt-get install util-linux"},
		{"no ip", hostEnv{euid: 0, lookPath: missing("ip")},
			"npl test cluster: 'ip' not found: apt-get install iproute2"},
		{"no iptables", hostEnv{euid: 0, lookPath: missing("iptables")},
			"npl test cluster: 'iptables' not found: apt-get install iptables"},
		{"not root and no tools: root first", hostEnv{euid: 1000, lookPath: missing("unshare")},
			"npl test cluster: must run as root (network namespaces and iptables need it)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := checkHost(tt.host); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("checkHost() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckPrivateNetns_refusesTheHostNamespace(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inodeA, err := netnsInode(a)
	if err != nil {
		t.Fatal(err)
	}
	// The launcher of this test binary runs in the host's namespace.
	launcher := "/proc/" + strconv.Itoa(os.Getppid()) + "/ns/net"

	tests := []struct {
		name                string
		self, pid1, hostIno string
		wantRefused         bool
	}{
		{"same namespace as PID 1", a, a, "", true},
		{"same as the namespace the launcher recorded", a, filepath.Join(dir, "unreadable"), strconv.FormatUint(inodeA, 10), true},
		{"the real host namespace, seen through the launcher", launcher, "/proc/1/ns/net", "", true},
		{"a namespace of its own", a, b, "1", false},
		{"this test binary's private namespace", "/proc/thread-self/ns/net", "/proc/1/ns/net", os.Getenv(envHostNetns), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPrivateNetns(tt.self, tt.pid1, tt.hostIno)
			if refused := err != nil; refused != tt.wantRefused {
				t.Errorf("checkPrivateNetns(%s) = %v, want refused=%t", tt.self, err, tt.wantRefused)
			}
		})
	}
}

func TestIPPool_doesNotReuseAReleasedAddressAtOnce(t *testing.T) {
	p := newIPPool(netip.MustParsePrefix("198.19.4.0/24"))
	var got []string
	for range 3 {
		ip, err := p.allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip.String())
	}
	p.release(netip.MustParseAddr("198.19.4.2"))
	ip, err := p.allocate()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, ip.String())
	want := []string{"198.19.4.2", "198.19.4.3", "198.19.4.4", "198.19.4.5"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocations (-want +got):\n%s", diff)
	}
}

func TestIPPool_wrapsAroundSkippingUsedAddressesAndFillsUp(t *testing.T) {
	p := newIPPool(netip.MustParsePrefix("198.19.5.0/29")) // .2 to .6 are Pod addresses
	var got []string
	for range 5 {
		ip, err := p.allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip.String())
	}
	if _, err := p.allocate(); !errors.Is(err, errPoolFull) {
		t.Fatalf("allocate from a full pool: err %v, want errPoolFull", err)
	}
	p.release(netip.MustParseAddr("198.19.5.4"))
	ip, err := p.allocate()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, ip.String())
	want := []string{"198.19.5.2", "198.19.5.3", "198.19.5.4", "198.19.5.5", "198.19.5.6", "198.19.5.4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocations (-want +got):\n%s", diff)
	}
}
