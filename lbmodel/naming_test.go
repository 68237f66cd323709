package lbmodel

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The names of two tenants' objects that one name served up to 0.x, when
// namespace and name were joined with "-" (REFERENCE §17): each pair must
// now get two names.
func TestNaming_tenantsNeverShareAName(t *testing.T) {
	const c = "c1"
	shared := SharedIngressLoadBalancerName(c, "npl")
	gw := GatewayLoadBalancerName(c, "infra", "gw")
	for _, pair := range []struct {
		what string
		a, b string
	}{
		{"Services team-a/x and team/a-x", LoadBalancerName(c, "team-a", "x"), LoadBalancerName(c, "team", "a-x")},
		{"their L4 pools", PoolName(LoadBalancerName(c, "team-a", "x"), TCP, 80), PoolName(LoadBalancerName(c, "team", "a-x"), TCP, 80)},
		{"Ingresses a-b/c and a/b-c", IngressLoadBalancerName(c, "a-b", "c"), IngressLoadBalancerName(c, "a", "b-c")},
		{"Gateways a-b/c and a/b-c", GatewayLoadBalancerName(c, "a-b", "c"), GatewayLoadBalancerName(c, "a", "b-c")},
		{"shared-VIP Ingress pools of a/b-web and a-b/web", IngressPoolName(shared, "a", "b-web", "80"), IngressPoolName(shared, "a-b", "web", "80")},
		{"Ingress pools of Service b-web port 80 and Service b port web-80", IngressPoolName(shared, "a", "b-web", "80"), IngressPoolName(shared, "a", "b", "web-80")},
		{"Gateway route pools of a/b-shop and a-b/shop", GatewayPoolName(gw, "a", "b-shop", 0), GatewayPoolName(gw, "a-b", "shop", 0)},
		{"certificates of Secrets a/b-tls and a-b/tls", CertificateName(shared, "a/b-tls"), CertificateName(shared, "a-b/tls")},
		{"namespaces with --: a--b/c and a/-b-c", LoadBalancerName(c, "a--b", "c"), LoadBalancerName(c, "a", "-b-c")},
	} {
		if pair.a == pair.b {
			t.Errorf("%s: both named %q", pair.what, pair.a)
		}
	}
	// What the upgrade takes over was ambiguous: both Services had it.
	a := &LoadBalancer{Name: LoadBalancerName(c, "team-a", "x"), Service: "team-a/x"}
	b := &LoadBalancer{Name: LoadBalancerName(c, "team", "a-x"), Service: "team/a-x"}
	if LegacyName(c, a) != "c1--team-a-x" || LegacyName(c, b) != "c1--team-a-x" || SameOwner(a, b) {
		t.Errorf("legacy names %q and %q, same owner %v: want both c1--team-a-x, different owners",
			LegacyName(c, a), LegacyName(c, b), SameOwner(a, b))
	}
}

// A cluster name that could own another's objects is refused: the cluster
// of an object name is the part before its first "--".
func TestNaming_noClusterOwnsAnothersObjects(t *testing.T) {
	for _, bad := range []string{"a--b", "a-", "-a", "A", "a_b", "a.b", "", strings.Repeat("a", MaxClusterNameLength+1)} {
		if CheckClusterName(bad) == nil {
			t.Errorf("CheckClusterName(%q) accepted it", bad)
		}
	}
	for _, good := range []string{"a", "a-b", "prod-eu-1", strings.Repeat("a", MaxClusterNameLength)} {
		if err := CheckClusterName(good); err != nil {
			t.Errorf("CheckClusterName(%q): %v", good, err)
		}
	}
	// With valid cluster names, a name belongs to one of them only.
	for _, c := range []struct{ owner, other string }{{"a", "a-b"}, {"a-b", "a"}, {"a", "b-a"}} {
		name := LoadBalancerName(c.other, "ns", "svc")
		if OwnedBy(c.owner, name) {
			t.Errorf("cluster %q owns %q of cluster %q", c.owner, name, c.other)
		}
	}
}

func TestNaming_legacyNames(t *testing.T) {
	for _, c := range []struct {
		lb   LoadBalancer
		want string
	}{
		{LoadBalancer{Name: "c1--shop_web", Service: "shop/web"}, "c1--shop-web"},
		{LoadBalancer{Name: "c1--shop_web-L7", Kind: L7, Ingress: "shop/web"}, "c1--shop-web-L7"},
		{LoadBalancer{Name: "c1--shop_gw-GW", Kind: L7, Gateway: "shop/gw"}, "c1--shop-gw-GW"},
		{LoadBalancer{Name: "c1--Shared-L7-npl", Kind: L7}, ""},
		{LoadBalancer{Name: "c1--shop-web", Service: "shop/web"}, ""}, // already the legacy name
		{LoadBalancer{Name: "c1--x", Service: "no-slash"}, ""},
	} {
		if got := LegacyName("c1", &c.lb); got != c.want {
			t.Errorf("LegacyName(%s) = %q, want %q", c.lb.Name, got, c.want)
		}
	}
	// What garbage collection keeps for its owner: the old name of its
	// recorded owner, not another's.
	for _, c := range []struct {
		lb   LoadBalancer
		want string
	}{
		{LoadBalancer{Name: "c1--team-a-x", Service: "team-a/x"}, "c1--team-a_x"},
		// The old name was ambiguous: the owner the object records decides.
		{LoadBalancer{Name: "c1--team-a-x", Service: "team/a-x"}, "c1--team_a-x"},
		{LoadBalancer{Name: "c1--other", Service: "team/a-x"}, ""}, // not its owner's old name
		{LoadBalancer{Name: "c1--shop-web-L7", Kind: L7, Ingress: "shop/web"}, "c1--shop_web-L7"},
		{LoadBalancer{Name: "c1--shop-gw-GW", Kind: L7, Gateway: "shop/gw"}, "c1--shop_gw-GW"},
		{LoadBalancer{Name: "c1--shop_web", Service: "shop/web"}, ""}, // renamed already
		{LoadBalancer{Name: "c1--Shared-L7-npl", Kind: L7}, ""},
	} {
		if got := RenamedTo("c1", &c.lb); got != c.want {
			t.Errorf("RenamedTo(%s of %s) = %q, want %q", c.lb.Name, c.lb.Service, got, c.want)
		}
	}
}

// Every name of every kind, from every valid set of Kubernetes names, is
// read back into exactly those names by parseName: a left inverse, so two
// different objects never get one name. The names are all the labels of up
// to three characters of a, 0, - and . (where valid), so that every way of
// placing "-" and "--" is tried.
func TestNaming_everyNameParsesBackToItsObject(t *testing.T) {
	var labels, subdomains []string
	alphabet := []string{"a", "0", "-", "."}
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		if prefix != "" {
			if dnsLabel.MatchString(prefix) {
				labels = append(labels, prefix)
			}
			if dnsSubdomain.MatchString(prefix) {
				subdomains = append(subdomains, prefix)
			}
		}
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(prefix+c, n-1)
		}
	}
	gen("", 3)
	seen := map[string]objectName{}
	check := func(o objectName) {
		t.Helper()
		name := o.String()
		if prev, ok := seen[name]; ok && prev != o {
			t.Fatalf("%+v and %+v are both named %q", prev, o, name)
		}
		seen[name] = o
		got, err := parseName(name)
		if err != nil || got != o {
			t.Fatalf("parseName(%q) = %+v, %v; want %+v", name, got, err, o)
		}
	}
	for _, c := range []string{"a", "a-0"} {
		for _, ns := range labels {
			for _, n := range subdomains {
				for _, kind := range []string{kindService, kindIngress, kindGateway} {
					check(objectName{Cluster: c, LB: kind, NS: ns, Name: n})
					check(objectName{Cluster: c, LB: kind, NS: ns, Name: n, Object: "pool", Protocol: "TCP", Port: 80})
				}
			}
			check(objectName{Cluster: c, LB: kindShared, Name: ns})
		}
	}
	// Sub-objects with their own user parts, on each kind of load balancer.
	for _, lb := range []objectName{
		{Cluster: "a", LB: kindShared, Name: "a"},
		{Cluster: "a", LB: kindShared, Name: "a-0"},
		{Cluster: "a", LB: kindIngress, NS: "a", Name: "a-0"},
		{Cluster: "a", LB: kindGateway, NS: "a-0", Name: "a"},
	} {
		for _, ns := range labels {
			for _, n := range subdomains {
				o := lb
				o.Object, o.SubNS, o.SubName = "cert", ns, n
				check(o)
				o.Object, o.Mark, o.Rule = "route", "R", 1
				check(o)
				o.Ref = 3
				check(o)
				o.Mark, o.Ref = "T", 0
				check(o)
				if dnsLabel.MatchString(n) {
					o.Object, o.Mark, o.Rule, o.Port = "ingress", "", 0, 0
					for _, port := range []string{"80", "a", "a-0"} {
						o.PortName = port
						check(o)
					}
				}
			}
		}
	}
}

// FuzzNames builds names of random valid Kubernetes names and checks that
// each reads back into exactly its object (so distinct objects have
// distinct names), and that two random objects share a name only when
// they are the same.
func FuzzNames(f *testing.F) {
	f.Add("team-a", "x", "team", "a-x", uint8(0), uint8(0), uint16(80))
	f.Add("a", "b-web", "a-b", "web", uint8(5), uint8(5), uint16(80))
	f.Add("a--b", "c.d", "a", "-b--c.d", uint8(3), uint8(7), uint16(443))
	f.Fuzz(func(t *testing.T, ns1, n1, ns2, n2 string, k1, k2 uint8, port uint16) {
		a := fuzzObject(ns1, n1, k1, port)
		b := fuzzObject(ns2, n2, k2, port)
		for _, o := range []objectName{a, b} {
			got, err := parseName(o.String())
			if err != nil || got != o {
				t.Fatalf("parseName(%q) = %+v, %v; want %+v", o.String(), got, err, o)
			}
		}
		if a != b && a.String() == b.String() {
			t.Fatalf("%+v and %+v are both named %q", a, b, a.String())
		}
	})
}

// fuzzObject makes a valid object of kind k from arbitrary strings: a
// load balancer of each kind, or a part of one.
func fuzzObject(ns, name string, k uint8, port uint16) objectName {
	ns, name = validName(ns, false), validName(name, true)
	kinds := []string{kindService, kindIngress, kindGateway, kindShared}
	o := objectName{Cluster: "c1", LB: kinds[k%4], NS: ns, Name: name}
	if o.LB == kindShared {
		o.NS = ""
	}
	switch k / 4 % 5 {
	case 1:
		o.Object, o.Protocol, o.Port = "pool", "TCP", int32(port)%65535+1
	case 2:
		o.Object, o.SubNS, o.SubName = "cert", ns, name
	case 3:
		o.Object, o.SubNS, o.SubName, o.Mark, o.Rule, o.Ref = "route", ns, name, "G", int(port), int(port)%3
	case 4:
		o.Object, o.SubNS, o.SubName, o.PortName = "ingress", ns, validName(name, false), strconv.Itoa(int(port))
	}
	return o
}

// validName maps s onto a valid DNS label (or subdomain): its characters
// onto a-z, 0-9, - (and .), with a letter at both ends.
func validName(s string, subdomain bool) string {
	const chars = "abcz019-.--"
	b := []byte(s)
	if len(b) > 40 {
		b = b[:40]
	}
	for i, c := range b {
		b[i] = chars[int(c)%len(chars)]
		if b[i] == '.' && !subdomain {
			b[i] = '-'
		}
	}
	out := "a" + string(b) + "a"
	if subdomain {
		// No empty labels: "a..b" or "a.-b" are not names.
		for strings.Contains(out, "..") || strings.Contains(out, ".-") || strings.Contains(out, "-.") {
			out = strings.NewReplacer("..", ".a.", ".-", ".a-", "-.", "-a.").Replace(out)
		}
	}
	return out
}

// Shorten keeps distinct names distinct and never makes a name another
// name of full length could be: its suffix has an upper-case letter and
// 128 bits of hash.
func TestShorten_distinctAndRecognisable(t *testing.T) {
	const max = 255
	long := GatewayLoadBalancerName("c1", "infra", strings.Repeat("g", 253))
	a := Shorten(GatewayPoolName(long, "team-a", "x", 0), max)
	b := Shorten(GatewayPoolName(long, "team", "a-x", 0), max)
	if a == b || len(a) != max || len(b) != max {
		t.Errorf("shortened %q and %q: want distinct, %d long", a, b, max)
	}
	if !regexp.MustCompile(`-H[0-9a-f]{32}$`).MatchString(a) || len(a)-ShortenedSuffixLength != strings.LastIndex(a, "-H") {
		t.Errorf("shortened %q: want the -H<32 hex> suffix of %d characters", a, ShortenedSuffixLength)
	}
	// The cut keeps the cluster and the namespace of the load balancer.
	if !strings.HasPrefix(a, "c1--infra_") {
		t.Errorf("shortened %q lost its cluster or namespace", a)
	}
	if s := LoadBalancerName("c1", "ns", "svc"); Shorten(s, max) != s {
		t.Errorf("a short name was changed")
	}
	if got := Shorten(strings.Repeat("x", 50), 40); len(got) != 40 {
		t.Errorf("Shorten to 40: %q", got)
	}
}

// The test's own reading of object names, the left inverse of the name
// functions: it proves they are injective (TestNaming_everyNameParsesBack
// ToItsObject, FuzzNames). Production code never parses names: providers
// record whom an object belongs to beside it.

const (
	kindService = "service"
	kindIngress = "ingress"
	kindGateway = "gateway"
	kindShared  = "shared"
)

// objectName is what a name says: the load balancer (kind, namespace and
// name, or the IngressClass of a shared one) and, for a part of it, the
// part (Object: pool with Protocol and Port; ingress pool with SubNS,
// SubName and PortName; cert with SubNS and SubName (the Secret); route
// pool with SubNS, SubName, Mark, Rule and, for the pool of one of the
// rule's backendRefs, Ref: its index plus one).
type objectName struct {
	Cluster, LB, NS, Name string
	Object                string
	Protocol              string
	Port                  int32
	SubNS, SubName        string
	PortName              string
	Mark                  string
	Rule                  int
	Ref                   int
}

var kindOfMark = map[string]string{"R": "HTTPRoute", "G": "GRPCRoute", "T": "TLSRoute"}

func (o objectName) String() string {
	var lb string
	switch o.LB {
	case kindService:
		lb = LoadBalancerName(o.Cluster, o.NS, o.Name)
	case kindIngress:
		lb = IngressLoadBalancerName(o.Cluster, o.NS, o.Name)
	case kindGateway:
		lb = GatewayLoadBalancerName(o.Cluster, o.NS, o.Name)
	case kindShared:
		lb = SharedIngressLoadBalancerName(o.Cluster, o.Name)
	}
	switch o.Object {
	case "pool":
		return PoolName(lb, Protocol(o.Protocol), o.Port)
	case "ingress":
		return IngressPoolName(lb, o.SubNS, o.SubName, o.PortName)
	case "cert":
		return CertificateName(lb, o.SubNS+"/"+o.SubName)
	case "route":
		if o.Ref > 0 {
			return GatewayRouteBackendPoolName(lb, kindOfMark[o.Mark], o.SubNS, o.SubName, o.Rule, o.Ref-1)
		}
		return GatewayRoutePoolName(lb, kindOfMark[o.Mark], o.SubNS, o.SubName, o.Rule)
	}
	return lb
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	listenerTail = regexp.MustCompile(`-(TCP|UDP|HTTP|HTTPS|TLS)-([0-9]+)$`)
	routeTail    = regexp.MustCompile(`-([RGT])([0-9]+)(?:B([0-9]+))?$`)
)

// parseName reads name back, from the right: the upper-case marks first,
// then the parts "_" separates, then the load balancer.
func parseName(name string) (objectName, error) {
	var o objectName
	cluster, body, ok := strings.Cut(name, nameSeparator)
	if !ok || CheckClusterName(cluster) != nil {
		return o, fmt.Errorf("%q: no cluster name", name)
	}
	o.Cluster = cluster
	lb := body
	var err error
	switch m := listenerTail.FindStringSubmatchIndex(body); {
	case m != nil:
		port, _ := strconv.Atoi(body[m[4]:m[5]])
		o.Object, o.Protocol, o.Port, lb = "pool", body[m[2]:m[3]], int32(port), body[:m[0]]
	case strings.HasSuffix(body, "-TLS"):
		o.Object = "cert"
		lb, o.SubNS, o.SubName, err = cutParts(strings.TrimSuffix(body, "-TLS"))
	case routeTail.MatchString(body):
		m := routeTail.FindStringSubmatchIndex(body)
		o.Object, o.Mark = "route", body[m[2]:m[3]]
		o.Rule, _ = strconv.Atoi(body[m[4]:m[5]])
		if m[6] >= 0 {
			ref, _ := strconv.Atoi(body[m[6]:m[7]])
			o.Ref = ref + 1
		}
		lb, o.SubNS, o.SubName, err = cutParts(body[:m[0]])
	case strings.Count(body, partSeparator) >= 3:
		o.Object = "ingress"
		i := strings.LastIndex(body, partSeparator)
		o.PortName = body[i+1:]
		if !dnsLabel.MatchString(o.PortName) {
			return o, fmt.Errorf("%q: port %q", name, o.PortName)
		}
		lb, o.SubNS, o.SubName, err = cutParts(body[:i])
	}
	if err != nil {
		return o, fmt.Errorf("%q: %w", name, err)
	}
	if class, ok := strings.CutPrefix(lb, "Shared-L7-"); ok {
		o.LB, o.Name = kindShared, class
		if !dnsSubdomain.MatchString(class) {
			return o, fmt.Errorf("%q: class %q", name, class)
		}
		return o, nil
	}
	ns, rest, ok := strings.Cut(lb, partSeparator)
	if !ok || !dnsLabel.MatchString(ns) {
		return o, fmt.Errorf("%q: no namespace", name)
	}
	o.NS = ns
	switch {
	case strings.HasSuffix(rest, l7Suffix):
		o.LB, o.Name = kindIngress, strings.TrimSuffix(rest, l7Suffix)
	case strings.HasSuffix(rest, gatewaySuffix):
		o.LB, o.Name = kindGateway, strings.TrimSuffix(rest, gatewaySuffix)
	default:
		o.LB, o.Name = kindService, rest
	}
	if !dnsSubdomain.MatchString(o.Name) {
		return o, fmt.Errorf("%q: name %q", name, o.Name)
	}
	return o, nil
}

// cutParts cuts "<lb>_<namespace>_<name>" from the right.
func cutParts(s string) (lb, ns, name string, err error) {
	i := strings.LastIndex(s, partSeparator)
	if i < 0 {
		return "", "", "", fmt.Errorf("no name in %q", s)
	}
	name, s = s[i+1:], s[:i]
	i = strings.LastIndex(s, partSeparator)
	if i < 0 {
		return "", "", "", fmt.Errorf("no namespace in %q", s)
	}
	ns, lb = s[i+1:], s[:i]
	if !dnsLabel.MatchString(ns) || !dnsSubdomain.MatchString(name) {
		return "", "", "", fmt.Errorf("namespace %q or name %q", ns, name)
	}
	return lb, ns, name, nil
}
