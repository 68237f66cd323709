package ingress

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// What a tenant's Ingress can do to the others on a shared VIP: each is
// checked alone before it joins the shared model, a refusal stops only
// itself, and a host belongs to the namespace that claimed it first.

// sharedIn is the input of a shared VIP with Services web of shop and evil,
// each with a Pod, and the given Ingresses and Secrets.
func sharedIn(ings []*networkingv1.Ingress, secrets ...*corev1.Secret) Input {
	return Input{ClusterName: testCluster, SharedVIP: true, IngressClass: "npl", Ingresses: ings,
		Services: []*corev1.Service{service("web"), service("web", svcNS("evil"))},
		Pods:     []*corev1.Pod{pod("web", "web-1", "198.18.0.11", 61000), pod("web", "web-1", "198.18.0.12", 61001, podNS("evil"))},
		Secrets:  secrets}
}

// rulesOf returns "host path -> pool" for each rule of lb.
func rulesOf(lb *lbmodel.LoadBalancer) []string {
	var out []string
	for _, r := range lb.HTTP.Rules {
		out = append(out, r.Host+r.Path+" -> "+r.Pool)
	}
	return out
}

func hasError(r []string, want string) bool {
	return slices.ContainsFunc(r, func(e string) bool { return strings.Contains(e, want) })
}

// TestBuild_aStolenHostAndCertificateAreRefused: on a shared VIP, another
// namespace's newer Ingress can add no path to a host an older Ingress
// claims (not even one the owner does not route), nor serve a certificate
// for it: not one that names the host in its TLS hosts, not one whose
// names meet it under another TLS host (the load balancer picks a
// certificate by its names), not a wildcard one. Its own host is served.
func TestBuild_aStolenHostAndCertificateAreRefused(t *testing.T) {
	shopCert, evilShop, evilWild, evilOwn := newCert(t, "shop.example"), newCert(t, "shop.example"), newCert(t, "*.example"),
		newCert(t, "evil.example")
	victim := ingress("shop", createdAt(100), rule("shop.example", prefix("/app", backend("web", 80))), tlsFor("shop-tls", "shop.example"))
	attacker := ingress("steal", inNS("evil"), createdAt(200),
		rule("shop.example", prefix("/login", backend("web", 80))),
		rule("evil.example", prefix("/", backend("web", 80))),
		tlsFor("aaa-shop", "shop.example"), tlsFor("aaa-named-elsewhere", "evil.example"), tlsFor("aaa-wild"),
		tlsFor("evil-tls", "evil.example"))
	lb, r := Build(sharedIn(ingresses(attacker, victim), shopCert.secret(testNS, "shop-tls"), evilShop.secret("evil", "aaa-shop"),
		evilShop.secret("evil", "aaa-named-elsewhere"), evilWild.secret("evil", "aaa-wild"), evilOwn.secret("evil", "evil-tls")))
	if lb == nil {
		t.Fatalf("no model: %v", r.Errors)
	}
	if _, err := lbmodel.Normalize(lb); err != nil {
		t.Fatalf("the model does not pass Normalize: %v", err)
	}
	shared := lbmodel.SharedIngressLoadBalancerName(testCluster, "npl")
	wantRules := []string{
		"evil.example/ -> " + lbmodel.IngressPoolName(shared, "evil", "web", "80"),
		"shop.example/app -> " + lbmodel.IngressPoolName(shared, testNS, "web", "80"),
	}
	if got := rulesOf(lb); !slices.Equal(got, wantRules) {
		t.Errorf("rules %v, want %v", got, wantRules)
	}
	var certs []string
	for _, c := range lb.HTTP.TLS {
		certs = append(certs, c.Secret+" "+strings.Join(c.Hosts, ","))
	}
	if want := []string{"evil/evil-tls evil.example", "shop/shop-tls shop.example"}; !slices.Equal(certs, want) {
		t.Errorf("certificates %v, want %v", certs, want)
	}
	for _, want := range []string{
		"ingress evil/steal: host shop.example ignored: namespace shop owns it on the shared VIP",
		"ingress evil/steal: TLS host shop.example is not served over HTTPS with Secret evil/aaa-shop: namespace shop owns it",
		"ingress evil/steal: TLS Secret evil/aaa-named-elsewhere is not served: its name shop.example meets host shop.example, which namespace shop owns",
		"ingress evil/steal: TLS Secret evil/aaa-wild is not served: its name *.example meets host shop.example, which namespace shop owns",
	} {
		if !hasError(r.Errors, want) {
			t.Errorf("errors %q: none says %q", r.Errors, want)
		}
	}

	// The same namespace shares its hosts.
	sibling := ingress("login", createdAt(200), rule("shop.example", prefix("/login", backend("web", 80))))
	lb, r = Build(sharedIn(ingresses(victim, sibling), shopCert.secret(testNS, "shop-tls")))
	if got := rulesOf(lb); len(got) != 2 || len(r.Errors) != 0 {
		t.Errorf("two Ingresses of one namespace for one host: rules %v, errors %v; want both paths", got, r.Errors)
	}
}

// TestBuild_theRulesForEveryHostAreOwnedToo: a rule without a host serves
// every host no other rule claims; on a shared VIP it is owned like a
// host.
func TestBuild_theRulesForEveryHostAreOwnedToo(t *testing.T) {
	first := ingress("any", createdAt(100), rule("", prefix("/", backend("web", 80))))
	later := ingress("any", inNS("evil"), createdAt(200), rule("", prefix("/login", backend("web", 80))))
	lb, r := Build(sharedIn(ingresses(later, first)))
	if got := rulesOf(lb); len(got) != 1 || !strings.HasPrefix(got[0], "/ -> ") {
		t.Errorf("rules %v, want shop's only", got)
	}
	if !hasError(r.Errors, "ingress evil/any: the rules for every host ignored: namespace shop owns it") {
		t.Errorf("errors %q", r.Errors)
	}
}

// TestBuild_aControlCharacterStopsOnlyItsPath: Kubernetes accepts control
// characters in Ingress paths; such a path made the shared model invalid,
// so that no Ingress of the class was updated. It is left out alone.
func TestBuild_aControlCharacterStopsOnlyItsPath(t *testing.T) {
	good := ingress("good", createdAt(100), rule("shop.example", prefix("/", backend("web", 80))))
	bad := ingress("bad", inNS("evil"), createdAt(200), rule("evil.example", prefix("/x\x7f", backend("web", 80)),
		prefix("/ok", backend("web", 80)), exact("/nul\x00", backend("web", 80))))
	lb, r := Build(sharedIn(ingresses(good, bad)))
	if lb == nil {
		t.Fatalf("no model: %v", r.Errors)
	}
	if _, err := lbmodel.Normalize(lb); err != nil {
		t.Fatalf("the model does not pass Normalize: %v", err)
	}
	if got := rulesOf(lb); len(got) != 2 {
		t.Errorf("rules %v, want shop.example/ and evil.example/ok", got)
	}
	if !hasError(r.Errors, `ingress evil/bad: path "/x\x7f" of host "evil.example" (Prefix) ignored: the path "/x\x7f" holds a control character`) {
		t.Errorf("errors %q", r.Errors)
	}
}

// TestBuild_anOversizeIngressStopsOnlyItself: an Ingress that adds more
// rules than one object may, or that would take the shared model over its
// size, is left out whole; the older ones are served.
func TestBuild_anOversizeIngressStopsOnlyItself(t *testing.T) {
	good := ingress("good", createdAt(100), rule("shop.example", prefix("/", backend("web", 80))))
	var paths []pathSpec
	for i := range lbmodel.MaxObjectRules + 1 {
		paths = append(paths, exact(fmt.Sprintf("/p%d", i), backend("web", 80)))
	}
	many := ingress("many", inNS("evil"), createdAt(200), rule("evil.example", paths...))
	long := "/" + strings.Repeat("a", 1000)
	var big []pathSpec
	for i := range 300 {
		big = append(big, exact(fmt.Sprintf("%s%d", long, i), backend("web", 80)))
	}
	var huge []*networkingv1.Ingress
	for i := range 20 {
		huge = append(huge, ingress(fmt.Sprintf("big%02d", i), inNS("evil"), createdAt(int64(300+i)),
			rule(fmt.Sprintf("h%d.example", i), big...)))
	}
	// A small Ingress newer than the ones that no longer fit still does.
	small := ingress("small", inNS("evil"), createdAt(400), rule("small.example", prefix("/", backend("web", 80))))
	lb, r := Build(sharedIn(append(append(ingresses(good, many), huge...), small)))
	if lb == nil {
		t.Fatalf("no model: %v", r.Errors)
	}
	if !slices.ContainsFunc(rulesOf(lb), func(s string) bool { return strings.HasPrefix(s, "small.example/ ") }) {
		t.Errorf("the small newer Ingress is not served: %v", r.Errors)
	}
	if _, err := lbmodel.Normalize(lb); err != nil {
		t.Fatalf("the model does not pass Normalize: %v", err)
	}
	if !slices.Contains(rulesOf(lb), "shop.example/ -> "+lbmodel.IngressPoolName(lbmodel.SharedIngressLoadBalancerName(testCluster, "npl"), testNS, "web", "80")) {
		t.Errorf("the oldest Ingress is not served")
	}
	if !hasError(r.Errors, fmt.Sprintf("ingress evil/many: left out of the shared load balancer: it adds %d rules, more than %d",
		lbmodel.MaxObjectRules+1, lbmodel.MaxObjectRules)) {
		t.Errorf("errors %q", r.Errors)
	}
	if !hasError(r.Errors, "left out of the shared load balancer: with its") {
		t.Errorf("no Ingress left out for the model's size: errors %q", r.Errors)
	}
	if n := lbmodel.Size(lb); n > lbmodel.MaxModelBytes {
		t.Errorf("model of %d bytes", n)
	}
}
