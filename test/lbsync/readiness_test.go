package lbsync

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/webhook"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// writeServingCert writes a CA-signed serving certificate for 127.0.0.1 as
// tls.crt and tls.key into dir and returns the CA in PEM.
func writeServingCert(t *testing.T, dir string) []byte {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "npl test webhook CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "npl-lbsync-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func condStatus(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// TestLBSync_readinessGate: the webhook served by npl-lbsync, registered in
// the real apiserver, injects the npl.io/lb-registered gate into Pods of a
// labelled namespace that a Service of ours selects; npl-lbsync sets the
// condition True once the provider holds the Pod, and only then is the Pod
// Ready. A Pod with no node port yet stays not Ready.
func TestLBSync_readinessGate(t *testing.T) {
	e := lbsyncbed.Setup(t)
	certDir := t.TempDir()
	caPEM := writeServingCert(t, certDir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	class := "npl.io/gate"
	l, err := stack.StartLBSync(context.Background(), e.Cluster, stack.LBSyncOptions{
		Name:      "npl-lbsync-gate",
		Config:    e.Config(lbsyncbed.ClusterName+"-gate", "NodePortLocal", class, "198.18.107.0/28"),
		ExtraArgs: []string{"--webhook-bind-address", "127.0.0.1:" + strconv.Itoa(port), "--webhook-cert-dir", certDir},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- npl-lbsync-gate log tail:\n%s", l.Tail(40))
		}
		_ = l.Stop()
	})
	s := &lbsyncbed.Syncer{LBSync: l, ClusterName: lbsyncbed.ClusterName + "-gate"}

	url := "https://127.0.0.1:" + strconv.Itoa(port) + webhook.Path
	none, fail := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Fail
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "npl-readiness-gate-" + strconv.Itoa(port)},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "readiness-gate.npl.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{webhook.NamespaceLabel: "enabled"}},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			// Fail, in this test only, so that a webhook that does not
			// answer makes the Pod creation fail rather than pass unnoticed.
			FailurePolicy: &fail,
		}},
	}
	if _, err := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(context.Background(), mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})

	ns := e.Namespace(t)
	if _, err := e.Client.CoreV1().Namespaces().Patch(context.Background(), ns, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"`+webhook.NamespaceLabel+`":"enabled"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.CreateService(t, lbsyncbed.LBService(ns, "web", &class))
	ip := e.NodeIP(0)
	var pod *corev1.Pod
	// The webhook reads its caches: retry until it has seen the Service.
	lbsyncbed.WaitFor(t, 30*time.Second, "a Pod created with the gate injected", func() (bool, error) {
		name := "web-" + strconv.FormatInt(time.Now().UnixNano()%100000, 10)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbsyncbed.WebLabels},
			Spec: corev1.PodSpec{NodeName: e.NodeName(0), Containers: []corev1.Container{{Name: "web", Image: "npl.io/test-server",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		}
		got, err := e.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		if slices.ContainsFunc(got.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == contract.RegisteredReadinessGate }) {
			pod = got
			return true, nil
		}
		_ = e.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		return false, nil
	})

	// No node port yet: containers ready, but not registered, so not Ready.
	lbsyncbed.WaitFor(t, 20*time.Second, "containers ready", func() (bool, error) {
		p, err := e.Client.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return err == nil && condStatus(p, corev1.ContainersReady) == corev1.ConditionTrue, err
	})
	// npl-lbsync has synced the Service since: it did not register the Pod.
	e.SyncedAfter(t, "pods", ns, pod.Name, s)
	p, err := e.Client.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if condStatus(p, contract.RegisteredReadinessGate) == corev1.ConditionTrue || condStatus(p, corev1.PodReady) == corev1.ConditionTrue {
		t.Fatalf("the Pod is registered or Ready before it is a member: %+v", p.Status.Conditions)
	}

	// Its node port appears (as npl-agent would write it): it becomes a
	// member, then registered, then Ready.
	e.Annotate(t, ns, pod.Name, lbsyncbed.List(lbsyncbed.Entry(8080, ip, 61000, "tcp")))
	lbsyncbed.WaitPools(t, s, ns, "web", map[string][]lbmodel.Member{s.PoolName(ns, "web", lbmodel.TCP, 80): {lbsyncbed.Member(ip, 61000, true)}})
	lbsyncbed.WaitFor(t, 20*time.Second, "registered and Ready", func() (bool, error) {
		p, err := e.Client.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return err == nil && condStatus(p, contract.RegisteredReadinessGate) == corev1.ConditionTrue &&
			condStatus(p, corev1.PodReady) == corev1.ConditionTrue, err
	})
	if v, err := l.Metric("npl_lbsync_readiness_gate_patches_total", `status="True"`); err != nil || v < 1 {
		t.Errorf("npl_lbsync_readiness_gate_patches_total{True} = %v (err %v)", v, err)
	}
}
