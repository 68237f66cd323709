package gateway

import (
	"fmt"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
)

// TestLBSync_gatewayFrontendCAWatched: a Gateway whose HTTPS listener asks
// for client certificates verified with the CA of a ConfigMap that does not
// exist yet has that listener refused (ResolvedRefs InvalidCACertificateRef,
// Accepted NoValidCACertificate) while its HTTP listener is served; the
// ConfigMap created later (a watched object, no change of the Gateway)
// resolves it — the mock cannot verify clients, so the listener then reads
// Accepted False UnsupportedValue, as a provider that cannot must say — and
// emptying its ca.crt takes it back.
func TestLBSync_gatewayFrontendCAWatched(t *testing.T) {
	e := setup(t)
	b := e.startGatewayBed(t, "mock", "gwfe", "198.18.122.0/28")
	ctx, gw1, ns := b.ctx, b.gw1, b.ns
	certPEM, keyPEM := selfSigned(t, "*.example.com")
	if _, err := e.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tls"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(b.class),
		Listeners: []gatewayv1.Listener{
			{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
			{Name: "https", Port: 443, Protocol: gatewayv1.HTTPSProtocolType,
				TLS: &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "tls"}}}},
		},
		TLS: &gatewayv1.GatewayTLSConfig{Frontend: &gatewayv1.FrontendTLSConfig{Default: gatewayv1.TLSConfig{
			Validation: &gatewayv1.FrontendTLSValidation{CACertificateRefs: []gatewayv1.ObjectReference{{Kind: "ConfigMap", Name: "client-ca"}}}}}},
	}}
	if _, err := gw1.Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// listeners waits until the Gateway's listeners have the conditions
	// want (listener: type: status/reason), for its current generation.
	listeners := func(what string, want map[string]map[string]string) {
		t.Helper()
		lbsyncbed.WaitFor(t, 30*time.Second, what, func() (bool, error) {
			g, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got := map[string]map[string]string{}
			for _, l := range g.Status.Listeners {
				conds := map[string]string{}
				for _, c := range l.Conditions {
					if c.ObservedGeneration != g.Generation {
						return false, nil
					}
					if c.Type == "Accepted" || c.Type == "ResolvedRefs" {
						conds[c.Type] = string(c.Status) + "/" + c.Reason
					}
				}
				got[string(l.Name)] = conds
			}
			if diff := gocmp.Diff(want, got); diff != "" {
				return false, fmt.Errorf("listeners (-want +got):\n%s", diff)
			}
			return true, nil
		})
	}
	httpOK := map[string]string{"Accepted": "True/Accepted", "ResolvedRefs": "True/ResolvedRefs"}
	missing := map[string]string{"Accepted": "False/NoValidCACertificate", "ResolvedRefs": "False/InvalidCACertificateRef"}
	listeners("the CA ConfigMap missing", map[string]map[string]string{"http": httpOK, "https": missing})

	caPEM, _ := selfSigned(t, "client-ca.example.com")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client-ca"}, Data: map[string]string{gateway.CACertKey: string(caPEM)}}
	if _, err := e.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	listeners("the CA ConfigMap created", map[string]map[string]string{"http": httpOK,
		"https": {"Accepted": "False/UnsupportedValue", "ResolvedRefs": "True/ResolvedRefs"}})

	cm.Data[gateway.CACertKey] = ""
	if _, err := e.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	listeners("the CA ConfigMap emptied", map[string]map[string]string{"http": httpOK, "https": missing})
}
