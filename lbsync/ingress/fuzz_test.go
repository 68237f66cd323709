package ingress

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// FuzzBuild feeds arbitrary Ingress specs, as JSON, to Build (seeds in
// testdata/fuzz/FuzzBuild), beside a Service web (port 80 named http) with
// one mapped Pod and a valid TLS Secret tls-good. Build must not panic nor
// modify its input, and must give what the test derives itself from the
// spec: the listeners, one rule per distinct (host, normalised path, type)
// with a Service backend that the model accepts (the first wins), the default backend, the
// certificate, and pools that rules or the default backend use, whose
// members are the Pod's only for web's port.
func FuzzBuild(f *testing.F) {
	cert := newCert(f, "a.example.com")
	f.Fuzz(func(t *testing.T, spec string) {
		ing := ingress("fuzzed")
		if json.Unmarshal([]byte(spec), &ing.Spec) != nil {
			return
		}
		in := Input{
			ClusterName: testCluster, Ingresses: []*networkingv1.Ingress{ing},
			Services: []*corev1.Service{service("web")},
			Pods:     []*corev1.Pod{pod("web", "web-1", "198.18.0.11", 61000)},
			Secrets:  []*corev1.Secret{cert.secret(testNS, "tls-good")},
		}
		before := ing.DeepCopy()
		lb, report := Build(in)
		if lb == nil {
			t.Fatalf("no model for %s; report %+v", spec, report)
		}
		if diff := cmp.Diff(before, ing); diff != "" {
			t.Fatalf("Build modified the Ingress (-before +after):\n%s", diff)
		}
		want := expectedRoutes(&ing.Spec)

		// Listeners: HTTP always, HTTPS with a certificate.
		wantListeners := []lbmodel.Listener{httpListener}
		if want.certHosts != nil {
			wantListeners = append(wantListeners, httpsListener)
		}
		if diff := cmp.Diff(wantListeners, lb.Listeners); diff != "" {
			t.Errorf("%s: listeners (-want +got):\n%s", spec, diff)
		}
		var gotCerts []string
		for _, c := range lb.HTTP.TLS {
			gotCerts = append(gotCerts, c.Secret+" "+strings.Join(c.Hosts, ","))
		}
		var wantCerts []string
		if want.certHosts != nil {
			wantCerts = []string{testNS + "/tls-good " + strings.Join(want.certHosts, ",")}
		}
		if diff := cmp.Diff(wantCerts, gotCerts); diff != "" {
			t.Errorf("%s: certificates (-want +got):\n%s", spec, diff)
		}

		// Rules and the default backend, by backend rather than pool name;
		// two uses of one backend share a pool, other backends do not.
		pools := map[string]lbmodel.Pool{}
		for _, p := range lb.Pools {
			pools[p.Name] = p
		}
		backendOf := map[string]string{} // pool name -> backend
		poolOf := map[string]string{}    // backend -> pool name
		use := func(what, pool, backend string) {
			if _, ok := pools[pool]; !ok {
				t.Errorf("%s: %s uses pool %q, which the model lacks", spec, what, pool)
			}
			if b, ok := backendOf[pool]; ok && b != backend {
				t.Errorf("%s: pool %q serves both %s and %s", spec, pool, b, backend)
			}
			if p, ok := poolOf[backend]; ok && p != pool {
				t.Errorf("%s: backend %s has two pools %q and %q", spec, backend, p, pool)
			}
			backendOf[pool], poolOf[backend] = backend, pool
		}
		var gotRules []wantRule
		for _, r := range lb.HTTP.Rules {
			gotRules = append(gotRules, wantRule{r.Host, r.Path, r.PathType, ""})
		}
		var plain []wantRule
		for _, r := range want.rules {
			plain = append(plain, wantRule{r.host, r.path, r.typ, ""})
		}
		if diff := cmp.Diff(sortedRules(plain), sortedRules(gotRules), cmp.AllowUnexported(wantRule{})); diff != "" {
			t.Fatalf("%s: rules (-want +got):\n%s", spec, diff)
		}
		for _, r := range lb.HTTP.Rules {
			i := slices.IndexFunc(want.rules, func(w wantRule) bool { return w.host == r.Host && w.path == r.Path && w.typ == r.PathType })
			use("rule "+r.Host+r.Path, r.Pool, want.rules[i].backend)
		}
		switch {
		case want.defaultBackend == "" && lb.HTTP.DefaultPool != "":
			t.Errorf("%s: default pool %q without a default Service backend", spec, lb.HTTP.DefaultPool)
		case want.defaultBackend != "" && lb.HTTP.DefaultPool == "":
			t.Errorf("%s: no default pool for the default backend %s", spec, want.defaultBackend)
		case want.defaultBackend != "":
			use("the default backend", lb.HTTP.DefaultPool, want.defaultBackend)
		}
		ready := 0
		for name, p := range pools {
			backend, used := backendOf[name]
			if !used {
				t.Errorf("%s: pool %q is used by no rule", spec, name)
			}
			wantMembers := []lbmodel.Member{}
			if backend == "web:80" {
				wantMembers = []lbmodel.Member{up("198.18.0.11", 61000)}
			}
			if diff := cmp.Diff(wantMembers, p.Members); diff != "" {
				t.Errorf("%s: members of pool %q of %s (-want +got):\n%s", spec, name, backend, diff)
			}
			ready += len(wantMembers)
		}
		if report.ReadyBackends != ready {
			t.Errorf("%s: ReadyBackends = %d, want %d", spec, report.ReadyBackends, ready)
		}
	})
}

type wantRule struct {
	host, path string
	typ        lbmodel.PathType
	backend    string
}

func sortedRules(rs []wantRule) []wantRule {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b wantRule) int {
		return strings.Compare(a.host+"\x00"+a.path+"\x00"+string(a.typ), b.host+"\x00"+b.path+"\x00"+string(b.typ))
	})
	return out
}

type routes struct {
	rules          []wantRule
	defaultBackend string
	// certHosts are the hosts of tls-good, sorted, or nil when no TLS entry
	// names it.
	certHosts []string
}

// expectedRoutes reads the spec as the Ingress documentation and Build's
// contract describe it.
func expectedRoutes(spec *networkingv1.IngressSpec) routes {
	var r routes
	if d := spec.DefaultBackend; d != nil {
		r.defaultBackend = backendKey(d)
	}
	seen := map[wantRule]bool{}
	for _, rule := range spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			path, typ, ok := expectedPath(p)
			backend := backendKey(&p.Backend)
			if !ok || backend == "" {
				continue
			}
			key := wantRule{strings.ToLower(rule.Host), path, typ, ""}
			if seen[key] {
				continue
			}
			// A path the model refuses (a control character) is left out.
			if lbmodel.CheckRule(lbmodel.Rule{Host: key.host, Path: path, PathType: typ, Pool: "p"}, &lbmodel.Pool{Name: "p"}) != nil {
				continue
			}
			seen[key] = true
			key.backend = backend
			r.rules = append(r.rules, key)
		}
	}
	for _, t := range spec.TLS {
		if t.SecretName != "tls-good" {
			continue
		}
		if r.certHosts == nil {
			r.certHosts = []string{}
		}
		for _, h := range t.Hosts {
			r.certHosts = append(r.certHosts, strings.ToLower(h))
		}
	}
	slices.Sort(r.certHosts)
	r.certHosts = slices.Compact(r.certHosts)
	return r
}

// expectedPath: an Exact path as given; any other is a prefix, "" meaning
// "/", without its trailing slashes unless it is "/". Both start with "/".
func expectedPath(p networkingv1.HTTPIngressPath) (string, lbmodel.PathType, bool) {
	if p.PathType != nil && *p.PathType == networkingv1.PathTypeExact {
		return p.Path, lbmodel.PathExact, len(p.Path) > 0 && p.Path[0] == '/'
	}
	path := p.Path
	if path == "" {
		path = "/"
	}
	if path[0] != '/' {
		return "", "", false
	}
	for len(path) > 1 && path[len(path)-1] == '/' {
		path = path[:len(path)-1]
	}
	return path, lbmodel.PathPrefix, true
}

// backendKey names the Service port a backend reaches: web's port 80 by its
// name or number, else the Service and the port as given; "" when the
// backend is no Service.
func backendKey(b *networkingv1.IngressBackend) string {
	s := b.Service
	if s == nil || s.Name == "" {
		return ""
	}
	port := s.Port.Name
	if port == "" {
		port = strconv.Itoa(int(s.Port.Number))
	}
	if s.Name == "web" && (port == "http" || (s.Port.Name == "" && s.Port.Number == 80)) {
		port = "80"
	}
	return s.Name + ":" + port
}
