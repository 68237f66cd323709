package gateway

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// FuzzBuild feeds an arbitrary HTTPRoute spec and an arbitrary extra
// listener, as JSON, to Build beside a valid neighbour: the Gateway's HTTP
// listener on port 80 and an older HTTPRoute "good" with the exact path
// /good to the Service web (one mapped Pod). Whatever the fuzzed objects
// say, Build must not panic nor modify its input, the model it returns
// must pass lbmodel.Normalize (the one check every provider relies on),
// the neighbour must still be served on port 80 with web's member and be
// Accepted, and every parent status must carry Accepted and ResolvedRefs
// of the route's generation.
func FuzzBuild(f *testing.F) {
	f.Add(`{"parentRefs":[{"name":"gw","namespace":"infra"}],"rules":[{"matches":[{"path":{"type":"PathPrefix","value":"/a"}}],"backendRefs":[{"name":"web","port":80,"weight":3},{"name":"nope","port":80}]}]}`, `{}`)
	f.Add(`{"parentRefs":[{"name":"gw","namespace":"infra","sectionName":"extra"}],"hostnames":["*.example.com"],"rules":[{"matches":[{"path":{"type":"RegularExpression","value":"^/(x|y)"},"headers":[{"name":"X-A","value":"1"}],"method":"GET"}],"filters":[{"type":"RequestRedirect","requestRedirect":{"statusCode":302,"scheme":"https"}}]}]}`,
		`{"name":"extra","port":8080,"protocol":"HTTP","hostname":"a.example.com"}`)
	f.Add(`{"parentRefs":[{"name":"gw","namespace":"infra"}],"rules":[{"matches":[{"path":{"type":"Exact","value":"/good"}}],"backendRefs":[{"name":"web","port":81}],"filters":[{"type":"URLRewrite","urlRewrite":{"path":{"type":"ReplacePrefixMatch","replacePrefixMatch":"/"}}}]}]}`,
		`{"name":"tls","port":443,"protocol":"HTTPS","tls":{"certificateRefs":[{"name":"missing"}]}}`)
	f.Add(`{"parentRefs":[{"name":"gw","namespace":"infra","port":80}],"rules":[{"matches":[{"queryParams":[{"name":"q","value":"\n"}]}],"backendRefs":[{"name":"web","port":80,"weight":0}],"filters":[{"type":"RequestHeaderModifier","requestHeaderModifier":{"set":[{"name":"bad name","value":"x"}]}}]}]}`,
		`{"name":"tcp","port":9000,"protocol":"TCP"}`)
	f.Fuzz(func(t *testing.T, spec, listener string) {
		fuzzed := route("fuzzed", 2)
		if json.Unmarshal([]byte(spec), &fuzzed.Spec) != nil {
			return
		}
		listeners := []gatewayv1.Listener{httpL("http", 80, "")}
		var extra gatewayv1.Listener
		if json.Unmarshal([]byte(listener), &extra) == nil && extra.Name != "" && extra.Name != "http" && extra.Port != 80 {
			listeners = append(listeners, extra)
		}
		good := route("good", 1, rule([]gatewayv1.HTTPRouteMatch{exactM("/good")}, svcRef("web", 1)))
		in := Input{ClusterName: testCluster, Gateway: gateway(listeners...),
			Routes:     []*gatewayv1.HTTPRoute{good, fuzzed},
			Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, {ObjectMeta: metav1.ObjectMeta{Name: infraNS}}},
			Services:   []*corev1.Service{service(appNS, "web")},
			Pods:       []*corev1.Pod{pod(appNS, "web", "web-1", "198.18.0.11", 61000)}}
		gw, before := in.Gateway.DeepCopy(), fuzzed.DeepCopy()
		res := Build(in)
		if diff := cmp.Diff(before, fuzzed); diff != "" {
			t.Fatalf("Build modified the route (-before +after):\n%s", diff)
		}
		if diff := cmp.Diff(gw, in.Gateway); diff != "" {
			t.Fatalf("Build modified the Gateway (-before +after):\n%s", diff)
		}
		if res.LB == nil {
			t.Fatalf("no model beside the valid listener and route; report %+v, accepted %+v", res.Report, res.Accepted)
		}
		if _, err := lbmodel.Normalize(res.LB); err != nil {
			t.Fatalf("the model fails Normalize: %v\nroute %s\nlistener %s", err, spec, listener)
		}
		served := slices.ContainsFunc(res.LB.HTTP.Rules, func(r lbmodel.Rule) bool {
			if r.Host != "" || r.Path != "/good" || r.PathType != lbmodel.PathExact || !slices.Contains(r.Ports, 80) {
				return false
			}
			i := slices.IndexFunc(res.LB.Pools, func(p lbmodel.Pool) bool { return p.Name == r.Pool })
			return i >= 0 && slices.ContainsFunc(res.LB.Pools[i].Members, func(m lbmodel.Member) bool { return m.IP == "198.18.0.11" && m.Port == 61000 })
		})
		if !served {
			t.Errorf("the valid neighbour is not served on port 80 beside\nroute %s\nlistener %s\nrules %+v", spec, listener, res.LB.HTTP.Rules)
		}
		for _, rr := range res.Routes {
			gen := good.Generation
			if rr.Name == "fuzzed" {
				gen = fuzzed.Generation
			}
			for _, p := range rr.Parents {
				for _, typ := range []string{string(gatewayv1.RouteConditionAccepted), string(gatewayv1.RouteConditionResolvedRefs)} {
					c := cond(p.Conditions, typ)
					if c.Type != typ || c.ObservedGeneration != gen {
						t.Errorf("route %s: parent %+v lacks %s of generation %d: %+v", rr.Name, p.ParentRef, typ, gen, p.Conditions)
					}
				}
				if rr.Name == "good" && cond(p.Conditions, string(gatewayv1.RouteConditionAccepted)).Status != metav1.ConditionTrue {
					t.Errorf("the valid neighbour is not Accepted beside\nroute %s\nlistener %s: %+v", spec, listener, p.Conditions)
				}
			}
		}
	})
}
