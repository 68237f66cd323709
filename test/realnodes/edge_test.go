package realnodes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/podreply"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// The story's load balancer: HAProxy on an edge host of test/harness/edgebed
// (npl-edge and HAProxy in a network namespace on the cluster's bridge,
// the VIPs routed to it), which the chart's npl-lbsync feeds with the
// haproxy provider, as users run it. The requests of the story's steps go
// through its VIPs; what the edge serves is read back through the provider
// (npl-edge's API) and from HAProxy itself (its admin socket).

const (
	// lbCluster is the chart's clusterName: every object on the edge is
	// named <lbCluster>--….
	lbCluster = "real-nodes"
	// edgeSecret holds npl-lbsync's client certificate for the edge and
	// the CA of the edge's own (provider.haproxy.existingSecret).
	edgeSecret = "npl-edge-client"
	// vipStreamClients is how many requests a stream to a VIP keeps going
	// at once, each every streamInterval.
	vipStreamClients = 4
)

// startEdge starts the edge host on the cluster's bridge, with a load
// balancer of another cluster on it (which helm uninstall must leave), and
// the Secret the chart's provider.haproxy.existingSecret names. The edge
// closes when the test ends, before the cluster.
func (s *story) startEdge(t *testing.T, ctx context.Context) {
	t.Helper()
	bin, err := stack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	bed, err := edgebed.Start(ctx, t.TempDir(), edgebed.ClusterOptions(bin, "rn"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if log := bed.EdgeLog(); t.Failed() {
			t.Logf("npl-edge's log, its end:\n%s", log[max(0, len(log)-6000):])
		}
		if err := bed.Close(); err != nil {
			t.Errorf("close the edge: %v", err)
		}
	})
	if err := bed.StartEdge(ctx); err != nil {
		t.Fatal(err)
	}
	s.bed = bed
	if s.lb, err = edgebed.NewLBBackend(ctx, bed, lbCluster); err != nil {
		t.Fatal(err)
	}
	if s.foreignServed, err = s.lb.AddForeign(); err != nil {
		t.Fatal(err)
	}
	// npl-lbsync's client certificate names its cluster, as the edge
	// requires of a client that changes the cluster's load balancers.
	certFile, keyFile, err := bed.Certs.ClientFor(lbCluster)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for key, file := range map[string]string{"tls.crt": certFile, "tls.key": keyFile, "ca.crt": bed.Certs.CA} {
		if data[key], err = os.ReadFile(file); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := s.client.CoreV1().Secrets(releaseNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: edgeSecret, Namespace: releaseNamespace}, Type: corev1.SecretTypeTLS, Data: data,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// providerValues is the chart's provider section for the story's edge.
func (s *story) providerValues() map[string]any {
	return map[string]any{"name": "haproxy", "haproxy": map[string]any{
		"edges": []any{s.bed.EdgeURL}, "existingSecret": edgeSecret, "timeout": "10s"}}
}

// lbName is the name of the load balancer of the Service ns/app.
func lbName(ns, app string) string { return lbmodel.LoadBalancerName(lbCluster, ns, app) }

// poolName is the name of the pool of port 80 of the Service ns/app.
func poolName(ns, app string) string { return lbmodel.PoolName(lbName(ns, app), lbmodel.TCP, 80) }

// edgeMembers lists the enabled members of the pool of port 80 of the
// Service ns/app as the edge serves them (npl-edge's List: HAProxy's
// configuration and its runtime state), sorted, and the load balancer's VIPs.
func (s *story) edgeMembers(ns, app string) ([]string, []string, error) {
	pools, vips, found, err := s.lb.Pools(lbName(ns, app))
	if err != nil {
		return nil, nil, err
	}
	if !found {
		return nil, nil, fmt.Errorf("the edge serves no load balancer %s", lbName(ns, app))
	}
	members, ok := pools[poolName(ns, app)]
	if !ok {
		return nil, nil, fmt.Errorf("load balancer %s has no pool %s: %v", lbName(ns, app), poolName(ns, app), pools)
	}
	var have []string
	for _, m := range members {
		if m.Enabled {
			have = append(have, net.JoinHostPort(m.IP, strconv.Itoa(int(m.Port))))
		}
	}
	slices.Sort(have)
	return have, vips, nil
}

// vipOf is the VIP the Service ns/app has in its status.
func (s *story) vipOf(ctx context.Context, ns, app string) (string, error) {
	svc, err := s.client.CoreV1().Services(ns).Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if ing := svc.Status.LoadBalancer.Ingress; len(ing) == 1 && ing[0].IP != "" {
		return ing[0].IP, nil
	}
	return "", fmt.Errorf("service %s/%s: load balancer status %+v", ns, app, svc.Status.LoadBalancer.Ingress)
}

// vipStream sends requests from outside the nodes to port 80 of the VIP of
// the Service ns/app, vipStreamClients at a time, each every streamInterval
// on a new connection: a failure, or an answer from a Pod that is not app's,
// counts.
func (s *story) vipStream(t *testing.T, ns, app string) *requestStream {
	t.Helper()
	vip, err := s.vipOf(s.ctx, ns, app)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(vip, "80")
	targets := slices.Repeat([]string{addr}, vipStreamClients)
	return startStream(func(context.Context) []string { return targets },
		func(_ context.Context, _ string, err error, pod string) error {
			if err != nil {
				return err
			}
			if !strings.HasPrefix(pod, ns+"/"+app+"-") {
				return fmt.Errorf("%s answered by %s, not a Pod of %s/%s", addr, pod, ns, app)
			}
			return nil
		})
}

// checkVIPStream stops stream and fails the test unless it sent at least
// minimum requests through the VIP of app, none failed. On a failure it
// logs HAProxy's counters of app's servers, which tell where the failed
// requests went (connection errors, retries, redispatches, state changes).
func (s *story) checkVIPStream(t *testing.T, stream *requestStream, app string, minimum int) {
	t.Helper()
	res := stream.stop()
	t.Logf("request stream through %s's VIP: %s", app, res)
	if res.failed > 0 || res.sent < minimum {
		t.Errorf("request stream through %s's VIP: %s; want no failure among at least %d", app, res, minimum)
		t.Logf("HAProxy's servers of %s at %s:\n%s", app, time.Now().Format("15:04:05.000"), s.serverCounters(workloadNS, app))
	}
}

// serverCounters are the rows of HAProxy's "show stat" for the backends of
// the load balancer of ns/app (serverCountersOf).
func (s *story) serverCounters(ns, app string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stat, err := haproxy.Command(ctx, s.bed.Edges[0].AdminSocket(), "show stat")
	if err != nil {
		return err.Error()
	}
	return serverCountersOf(stat, lbName(ns, app))
}

// serverCountersOf picks from a "show stat" CSV the rows of the proxies
// whose name starts with prefix, and of them per server its state, weight,
// sessions and errors, and how long ago its state last changed.
func serverCountersOf(stat, prefix string) string {
	lines := strings.Split(strings.TrimSpace(stat), "\n")
	header := strings.Split(strings.TrimPrefix(lines[0], "# "), ",")
	want := []string{"pxname", "svname", "status", "weight", "scur", "stot", "econ", "eresp", "wretr", "wredis", "chkfail", "lastchg"}
	var out strings.Builder
	out.WriteString(strings.Join(want, " ") + "\n")
	for _, l := range lines[1:] {
		fields := strings.Split(l, ",")
		if !strings.HasPrefix(fields[0], prefix) {
			continue
		}
		for i, name := range want {
			if i > 0 {
				out.WriteString(" ")
			}
			if j := slices.Index(header, name); j >= 0 && j < len(fields) {
				out.WriteString(fields[j])
			}
		}
		out.WriteString("\n")
	}
	return out.String()
}

// checkEdgeHoldsNothingOfTheCluster: after the uninstall, the edge serves
// no load balancer of lbCluster (npl-edge's List), HAProxy has no frontend
// or backend of it (show stat) and npl-edge keeps and HAProxy holds no
// certificate (the story's TLS Ingress had one); the other cluster's load
// balancer is still served.
func (s *story) checkEdgeHoldsNothingOfTheCluster(t *testing.T, ctx context.Context) {
	t.Helper()
	e := s.bed.Edges[0]
	lbs, err := s.lb.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, lb := range lbs {
		t.Errorf("the edge still serves the load balancer %s (VIPs %v)", lb.Name, lb.VIPs)
	}
	stat, err := haproxy.Command(ctx, e.AdminSocket(), "show stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(stat, "\n") {
		if strings.HasPrefix(line, lbCluster+"--") {
			t.Errorf("HAProxy still has a proxy of the cluster: %s", line)
		}
	}
	pems, err := filepath.Glob(filepath.Join(e.StateDir(), "tls", "*.pem"))
	if err != nil || len(pems) > 0 {
		t.Errorf("npl-edge still keeps certificates %v (%v)", pems, err)
	}
	certs, err := haproxy.Command(ctx, e.AdminSocket(), "show ssl cert")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(certs, ".pem") {
		t.Errorf("HAProxy still holds certificates:\n%s", certs)
	}
	if !s.foreignServed() {
		t.Error("the other cluster's load balancer on the edge is gone")
	}
}

// edgeCertificates lists the certificates npl-edge keeps for HAProxy.
func edgeCertificates(e *edgebed.EdgeHost) []string {
	pems, _ := filepath.Glob(filepath.Join(e.StateDir(), "tls", "*.pem"))
	return pems
}

// waitServed waits until the edge's HAProxy has n servers in the pool of
// port 80 of the Service ns/app, each up.
func (s *story) waitServed(ctx context.Context, ns, app string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return s.bed.Edges[0].WaitUp(ctx, poolName(ns, app), n)
}

// ingressHost is the host of the story's TLS Ingress.
const ingressHost = "web.shop.test"

// tlsIngress: an Ingress of the chart's class with TLS for ingressHost in
// front of web gets a VIP of its own on the edge, whose HTTPS listener
// serves the Secret's certificate (verified by the client) and sends each
// request to one of web's Pods (members: node port → Pod name); npl-edge
// keeps the certificate for HAProxy.
func (s *story) tlsIngress(t *testing.T, members map[string]string) {
	t.Helper()
	ctx := s.ctx
	certPEM, keyPEM, err := edgebed.ServingCertificate(ingressHost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CoreV1().Secrets(workloadNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "web-tls", Namespace: workloadNS}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prefix, class := networkingv1.PathTypePrefix, "npl" // the chart's ingressClass.name
	if _, err := s.client.NetworkingV1().Ingresses(workloadNS).Create(ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: workloadNS},
		Spec: networkingv1.IngressSpec{
			IngressClassName: &class,
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{ingressHost}, SecretName: "web-tls"}},
			Rules: []networkingv1.IngressRule{{Host: ingressHost, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
					Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}},
			}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	httpsc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: ingressHost, MinVersion: tls.VersionTLS12}}}
	eventually(t, ctx, "the TLS Ingress answers HTTPS through its VIP with its Secret's certificate", func(ctx context.Context) error {
		ing, err := s.client.NetworkingV1().Ingresses(workloadNS).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(ing.Status.LoadBalancer.Ingress) != 1 {
			return fmt.Errorf("Ingress status %+v", ing.Status.LoadBalancer.Ingress)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ing.Status.LoadBalancer.Ingress[0].IP+"/", nil)
		if err != nil {
			return err
		}
		req.Host = ingressHost
		resp, err := httpsc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		pod := resp.Header.Get(podreply.Header)
		if _, name, _ := strings.Cut(pod, "/"); resp.StatusCode != http.StatusOK || !slices.Contains(slices.Collect(maps.Values(members)), name) {
			return fmt.Errorf("HTTPS %s: %s from %q; want one of web's Pods", ingressHost, resp.Status, pod)
		}
		return nil
	})
	if certs := edgeCertificates(s.bed.Edges[0]); len(certs) != 1 {
		t.Errorf("npl-edge keeps %d certificates (%v); want the Ingress's", len(certs), certs)
	}
}
