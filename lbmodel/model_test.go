package lbmodel

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadBalancer_l4JSONHasNoL7Fields(t *testing.T) {
	lb := LoadBalancer{Name: "c1--shop-web", Service: "shop/web", Listeners: []Listener{{Port: 80, Protocol: TCP,
		Pool: Pool{Name: "c1--shop-web-TCP-80", Members: []Member{{IP: "198.18.0.11", Port: 61000, Enabled: true}}}}}}
	got, err := json.Marshal(lb)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"c1--shop-web","service":"shop/web","listeners":[{"port":80,"protocol":"TCP","pool":` +
		`{"name":"c1--shop-web-TCP-80","members":[{"ip":"198.18.0.11","port":61000,"enabled":true}]}}]}`
	if string(got) != want {
		t.Errorf("JSON\n got %s\nwant %s", got, want)
	}
}

func TestLoadBalancer_l7JSONKeepsNoKeyMaterial(t *testing.T) {
	lb := LoadBalancer{Name: "c1--shop-web-L7", Kind: L7, Ingress: "shop/web",
		Listeners: []Listener{{Port: 80, Protocol: HTTP}},
		HTTP: &HTTPRoutes{Rules: []Rule{}, TLS: []TLSCert{{Secret: "shop/cert", Fingerprint: "ab",
			CertPEM: []byte("CERT"), KeyPEM: []byte("SECRET-KEY")}}}}
	got, err := json.Marshal(lb)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(got); strings.Contains(s, "SECRET-KEY") || strings.Contains(s, "CERT\"") || strings.Contains(s, `"pool"`) {
		t.Errorf("JSON holds PEM data or a listener pool: %s", s)
	}
	printed := fmt.Sprintf("%v %+v %#v", lb.HTTP.TLS, *lb.HTTP, lb.HTTP.TLS[0])
	if strings.Contains(printed, "SECRET") || strings.Contains(printed, "KeyPEM") {
		t.Errorf("printing shows the key: %s", printed)
	}
}

func TestSortRules_mostSpecificFirst(t *testing.T) {
	rules := []Rule{
		{Path: "/", PathType: PathPrefix, Pool: "p"},
		{Host: "*.example.com", Path: "/", PathType: PathPrefix, Pool: "p"},
		{Host: "a.example.com", Path: "/", PathType: PathPrefix, Pool: "p"},
		{Host: "*.a.example.com", Path: "/", PathType: PathPrefix, Pool: "p"},
		{Host: "a.example.com", Path: "/api", PathType: PathPrefix, Pool: "p"},
		{Host: "a.example.com", Path: "/api/v1", PathType: PathPrefix, Pool: "p"},
		{Host: "a.example.com", Path: "/", PathType: PathExact, Pool: "p"},
		{Host: "b.example.com", Path: "/", PathType: PathPrefix, Pool: "p"},
	}
	SortRules(rules)
	var got []string
	for _, r := range rules {
		got = append(got, fmt.Sprintf("%s %s %s", r.Host, r.PathType, r.Path))
	}
	want := []string{
		"a.example.com Exact /",
		"a.example.com Prefix /api/v1",
		"a.example.com Prefix /api",
		"a.example.com Prefix /",
		"b.example.com Prefix /",
		"*.a.example.com Prefix /",
		"*.example.com Prefix /",
		" Prefix /",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestRule_pathMatchesMatchElementWise(t *testing.T) {
	tests := []struct {
		rule Rule
		want []PathMatch
	}{
		{Rule{Path: "/a", PathType: PathExact}, []PathMatch{{Path: "/a"}}},
		{Rule{Path: "/", PathType: PathPrefix}, []PathMatch{{Path: "/", Prefix: true}}},
		{Rule{Path: "/a", PathType: PathPrefix}, []PathMatch{{Path: "/a"}, {Path: "/a/", Prefix: true}}},
	}
	for _, tt := range tests {
		got := tt.rule.PathMatches()
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tt.rule.PathType, tt.rule.Path, diff)
		}
		path, typ, ok := PathOf(got)
		if !ok || path != tt.rule.Path || typ != tt.rule.PathType {
			t.Errorf("PathOf(%v) = %q %q %v, want %q %q", got, path, typ, ok, tt.rule.Path, tt.rule.PathType)
		}
	}
	for _, bad := range [][]PathMatch{nil, {{Path: "/a", Prefix: true}}, {{Path: "/a"}, {Path: "/b/", Prefix: true}}} {
		if _, _, ok := PathOf(bad); ok {
			t.Errorf("PathOf(%v) accepted", bad)
		}
	}
}

func TestCertFingerprint_ignoresThePEMEncoding(t *testing.T) {
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("der-bytes")})
	reencoded := append([]byte("junk before\n"), append(block, '\n', '\n')...)
	if a, b := CertFingerprint(block), CertFingerprint(reencoded); a == "" || a != b {
		t.Errorf("fingerprints %q and %q, want equal and not empty", a, b)
	}
	other := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("other")})
	if CertFingerprint(other) == CertFingerprint(block) {
		t.Error("two certificates have one fingerprint")
	}
	if got := CertFingerprint([]byte("no pem")); got != "" {
		t.Errorf("fingerprint of no certificate = %q", got)
	}
}

func TestNaming_l7NamesNeverTakeL4Names(t *testing.T) {
	l4 := LoadBalancerName("c1", "shop", "web")
	l7 := IngressLoadBalancerName("c1", "shop", "web")
	if l4 == l7 || !OwnedBy("c1", l7) {
		t.Errorf("L4 %q and L7 %q: want distinct, owned by c1", l4, l7)
	}
	for _, n := range []string{
		SharedIngressLoadBalancerName("c1", "npl"),
		IngressPoolName(l7, "shop", "web", "80"),
		ListenerName(l7, HTTPS, 443),
		CertificateName(l7, "shop/cert"),
	} {
		if !strings.HasPrefix(n, "c1--") {
			t.Errorf("%q is not owned by c1", n)
		}
	}
	if got, want := CertificateName(l7, "shop/cert"), "c1--shop_web-L7_shop_cert-TLS"; got != want {
		t.Errorf("CertificateName = %q, want %q", got, want)
	}
}

func TestWeightGCD(t *testing.T) {
	for _, c := range []struct {
		weights []int32
		want    int32
	}{
		{nil, 0},
		{[]int32{0, 0}, 0},
		{[]int32{0, 6}, 6},
		{[]int32{256, 128, 64}, 64},
		{[]int32{6, 4, 9}, 1},
		{[]int32{70, 30, 0}, 10},
	} {
		if got := WeightGCD(c.weights...); got != c.want {
			t.Errorf("WeightGCD(%v) = %d, want %d", c.weights, got, c.want)
		}
	}
}
