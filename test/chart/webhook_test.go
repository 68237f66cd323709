package chart

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"helm.sh/helm/v3/pkg/engine"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeportlocal/npl/lbsync/webhook"
)

// The webhook's objects of release "npl".
const (
	webhookName       = "npl-lbsync-webhook"
	webhookSecretName = "npl-lbsync-webhook-tls"
	// webhookCertDir is where npl-lbsync reads tls.crt and tls.key.
	webhookCertDir = "/etc/npl/webhook"
	// notAfterAnnotation records on the generated Secret when its
	// certificate expires, so that an upgrade renews it in time.
	notAfterAnnotation = "npl.io/webhook-cert-not-after"
	checksumAnnotation = "checksum/webhook-cert"
)

func isHook(o object) bool { return o.u.GetAnnotations()["helm.sh/hook"] != "" }

// webhookConfigs returns the release's MutatingWebhookConfigurations, hooks
// left out.
func webhookConfigs(r *release) []object {
	var out []object
	for _, o := range r.find("MutatingWebhookConfiguration") {
		if !isHook(o) {
			out = append(out, o)
		}
	}
	return out
}

// expectedWebhook is the registration npl-lbsync's webhook needs: CREATE of
// Pods in labelled namespaces but the release's, at webhook.Path of the
// chart's Service, failure policy and timeout from the values.
func expectedWebhook(r *release) admissionregistrationv1.MutatingWebhook {
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	never := admissionregistrationv1.NeverReinvocationPolicy
	scope := admissionregistrationv1.NamespacedScope
	policy := admissionregistrationv1.FailurePolicyType(r.str("lbsync.webhook.failurePolicy"))
	timeout, _ := r.values.PathValue("lbsync.webhook.timeoutSeconds")
	seconds := int32(timeout.(float64))
	path, port := webhook.Path, int32(443)
	return admissionregistrationv1.MutatingWebhook{
		Name: "readiness-gate.npl.io",
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: r.namespace, Name: r.name + "-lbsync-webhook", Path: &path, Port: &port,
		}},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope},
		}},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: webhook.NamespaceLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"enabled"}},
			{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{r.namespace}},
		}},
		SideEffects:             &none,
		AdmissionReviewVersions: []string{"v1"},
		FailurePolicy:           &policy,
		TimeoutSeconds:          &seconds,
		MatchPolicy:             &equivalent,
		ReinvocationPolicy:      &never,
	}
}

// projectedSecretItems returns key → path of the projected sources of a
// Secret in a Pod spec.
func projectedSecretItems(spec *corev1.PodSpec, secret string) map[string]string {
	out := map[string]string{}
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret != nil && src.Secret.Name == secret {
				for _, it := range src.Secret.Items {
					out[it.Key] = it.Path
				}
			}
		}
	}
	return out
}

func checkWebhook(t *testing.T, r *release) {
	d := r.one(t, "Deployment", lbsyncName)
	spec := &d.typed.(*appsv1.Deployment).Spec.Template.Spec
	c := spec.Containers[0]
	addr, hasAddr := flagValue(c.Args, "webhook-bind-address")
	if !r.webhookEnabled() {
		if objs := r.find("MutatingWebhookConfiguration"); len(objs) != 0 {
			t.Errorf("webhook disabled, yet rendered %v", objs)
		}
		if r.has("Service", webhookName) || r.has("Secret", webhookSecretName) {
			t.Errorf("webhook disabled, yet its Service or Secret is rendered")
		}
		if hasAddr || slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" }) {
			t.Errorf("webhook disabled, yet npl-lbsync serves it: args %v, ports %v", c.Args, c.Ports)
		}
		return
	}

	configs := webhookConfigs(r)
	if len(configs) != 1 {
		t.Fatalf("%d MutatingWebhookConfigurations; want 1", len(configs))
	}
	mwc := configs[0].typed.(*admissionregistrationv1.MutatingWebhookConfiguration)
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("%s: %d webhooks; want 1", configs[0], len(mwc.Webhooks))
	}
	got := mwc.Webhooks[0]
	if diff := cmp.Diff(expectedWebhook(r), got, cmpopts.IgnoreFields(admissionregistrationv1.WebhookClientConfig{}, "CABundle")); diff != "" {
		t.Errorf("%s webhook (-want +got):\n%s", configs[0], diff)
	}

	// Which Pods it sees: those of a labelled namespace, never the
	// release's own (npl-lbsync must start even when the webhook is down).
	sel, err := metav1.LabelSelectorAsSelector(got.NamespaceSelector)
	if err != nil {
		t.Fatalf("namespaceSelector: %v", err)
	}
	for _, tc := range []struct {
		namespace, label string
		want             bool
	}{
		{"shop", "enabled", true},
		{"shop", "", false},
		{"shop", "disabled", false},
		{r.namespace, "enabled", false},
	} {
		ns := labels.Set{corev1.LabelMetadataName: tc.namespace}
		if tc.label != "" {
			ns[webhook.NamespaceLabel] = tc.label
		}
		if sel.Matches(ns) != tc.want {
			t.Errorf("namespace %v is sent to the webhook: %v; want %v", ns, !tc.want, tc.want)
		}
	}

	// The API server reaches npl-lbsync: Service port 443 → the named
	// container port → the address npl-lbsync listens on.
	ref := got.ClientConfig.Service
	if ref == nil || ref.Port == nil {
		t.Fatalf("clientConfig %+v names no Service port", got.ClientConfig)
	}
	svcObj := r.one(t, "Service", ref.Name)
	svc := svcObj.typed.(*corev1.Service)
	if !labelsMatch(svc.Spec.Selector, d.typed.(*appsv1.Deployment).Spec.Template.Labels) {
		t.Errorf("%s selects %v, not npl-lbsync's Pods", svcObj, svc.Spec.Selector)
	}
	sp := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == *ref.Port })
	if sp < 0 {
		t.Fatalf("%s has no port %d", svcObj, *ref.Port)
	}
	target := svc.Spec.Ports[sp].TargetPort
	cp := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return target.Type == intstr.String && p.Name == target.StrVal })
	if cp < 0 {
		t.Fatalf("%s targets port %s, which is not a named port of npl-lbsync (%v)", svcObj, target.String(), c.Ports)
	}
	port, _ := r.values.PathValue("lbsync.webhook.port")
	if want := fmt.Sprintf(":%v", port); c.Ports[cp].ContainerPort != int32(port.(float64)) || addr != want {
		t.Errorf("container port %d, --webhook-bind-address=%q; want both lbsync.webhook.port (%s)", c.Ports[cp].ContainerPort, addr, want)
	}

	// The certificate and key are files of the read-only mount, where
	// --webhook-cert-dir points; the root filesystem stays read-only.
	if dir, _ := flagValue(c.Args, "webhook-cert-dir"); dir != webhookCertDir {
		t.Errorf("--webhook-cert-dir=%q; want %s", dir, webhookCertDir)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("npl-lbsync's root filesystem is writable")
	}
	files := mountedFiles(t, r, d, c)
	crt, key := files[webhookCertDir+"/tls.crt"], files[webhookCertDir+"/tls.key"]
	if crt == nil || key == nil {
		t.Fatalf("no %s/tls.crt and tls.key among the mounted files", webhookCertDir)
	}
	secret := r.str("lbsync.webhook.certSecret")
	checksum := d.typed.(*appsv1.Deployment).Spec.Template.Annotations[checksumAnnotation]
	if secret != "" {
		// The user's Secret (cert-manager's): the chart makes none.
		if r.has("Secret", webhookSecretName) {
			t.Errorf("certSecret %s set, yet the chart makes %s", secret, webhookSecretName)
		}
		if diff := cmp.Diff(map[string]string{"tls.crt": "webhook/tls.crt", "tls.key": "webhook/tls.key"}, projectedSecretItems(spec, secret)); diff != "" {
			t.Errorf("items projected from certSecret %s (-want +got):\n%s", secret, diff)
		}
		if checksum != "" {
			t.Errorf("annotation %s with a certificate the chart does not make", checksumAnnotation)
		}
		return
	}
	s := r.one(t, "Secret", webhookSecretName).typed.(*corev1.Secret)
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret %s type %q; want %s", s.Name, s.Type, corev1.SecretTypeTLS)
	}
	if checksum == "" {
		t.Errorf("no annotation %s: a new certificate would not restart npl-lbsync", checksumAnnotation)
	}
	host := ref.Name + "." + ref.Namespace + ".svc"
	checkServingCert(t, host, got.ClientConfig.CABundle, crt, key)
	if diff := cmp.Diff(string(got.ClientConfig.CABundle), string(s.Data["ca.crt"])); diff != "" {
		t.Errorf("the Secret's ca.crt is not the caBundle (-caBundle +ca.crt):\n%s", diff)
	}
}

func parsePEMCert(t *testing.T, what string, data []byte) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" || len(strings.TrimSpace(string(rest))) != 0 {
		t.Fatalf("%s is not one PEM certificate: %q", what, data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return cert
}

// checkServingCert checks that the certificate npl-lbsync serves verifies,
// for the name the API server dials, against the caBundle the API server
// trusts, and that the key is the certificate's.
func checkServingCert(t *testing.T, host string, caBundle, crt, key []byte) {
	t.Helper()
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		t.Errorf("tls.crt and tls.key do not load as npl-lbsync loads them: %v", err)
	}
	ca := parsePEMCert(t, "caBundle", caBundle)
	cert := parsePEMCert(t, "tls.crt", crt)
	if !ca.IsCA {
		t.Errorf("caBundle %s is not a CA", ca.Subject)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		t.Errorf("tls.crt (issuer %s) is not signed by the caBundle's CA %s: %v", cert.Issuer, ca.Subject, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("tls.crt does not verify for %s against the caBundle: %v", host, err)
	}
	if left := time.Until(cert.NotAfter); left < 9*365*24*time.Hour {
		t.Errorf("tls.crt expires in %s; want about ten years", left.Round(time.Hour))
	}
}

// checkWebhookUninstallHook: the webhook goes before step 1 of the uninstall
// stops npl-lbsync. Helm 3 deletes a release's MutatingWebhookConfiguration
// only after its Services and Deployments (the kind is missing from
// releaseutil.UninstallOrder), and only after the hooks; so a hook of the
// same kind and name, by the before-hook-creation policy, makes Helm delete
// it, and registers no webhook itself.
func checkWebhookUninstallHook(t *testing.T, r *release, hooks []object, stopWeight int) {
	t.Helper()
	var got []object
	for _, o := range hooks {
		if o.u.GetKind() == "MutatingWebhookConfiguration" {
			got = append(got, o)
		}
	}
	if !r.webhookEnabled() {
		if len(got) != 0 {
			t.Errorf("webhook disabled, yet hooks %v", got)
		}
		return
	}
	if len(got) != 1 {
		t.Fatalf("%d MutatingWebhookConfiguration hooks; want 1", len(got))
	}
	h := got[0]
	if configs := webhookConfigs(r); len(configs) != 1 || configs[0].u.GetName() != h.u.GetName() {
		t.Errorf("%s does not have the name of the release's MutatingWebhookConfiguration %v", h, configs)
	}
	if w := hookWeight(t, h); w >= stopWeight {
		t.Errorf("%s: weight %d; want it before the Job %s (weight %d) stops npl-lbsync", h, w, uninstallName, stopWeight)
	}
	if n := len(h.typed.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks); n != 0 {
		t.Errorf("%s registers %d webhooks; want none", h, n)
	}
}

func TestChart_webhookDisabledRendersNoWebhookAndNoNamespaceGrant(t *testing.T) {
	r := render(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), map[string]any{"lbsync.webhook.enabled": false})
	if r.webhookEnabled() {
		t.Fatalf("lbsync.webhook.enabled is not false in the rendered values")
	}
	// No webhook object, flag or port; npl-lbsync may not read Namespaces;
	// no uninstall hook for the webhook.
	checkWebhook(t, r)
	checkRBAC(t, r)
	checkUninstallHooks(t, r)
}

func TestChart_webhookCertificateSources(t *testing.T) {
	ca := testCAPEM(t)
	for _, tc := range []struct {
		name      string
		overrides map[string]any
		// wantErr is part of the render error; empty: it renders.
		wantErr string
		// wantCABundle is the MutatingWebhookConfiguration's caBundle (PEM).
		wantCABundle    []byte
		wantAnnotations map[string]string
	}{
		{name: "certSecret with caBundle", overrides: map[string]any{"lbsync.webhook.certSecret": "my-cert", "lbsync.webhook.caBundle": string(ca)},
			wantCABundle: ca},
		{name: "certSecret with cert-manager's CA injection", overrides: map[string]any{"lbsync.webhook.certSecret": "my-cert",
			"lbsync.webhook.annotations": map[string]any{"cert-manager.io/inject-ca-from": "npl-system/my-cert"}},
			wantAnnotations: map[string]string{"cert-manager.io/inject-ca-from": "npl-system/my-cert"}},
		{name: "certSecret alone", overrides: map[string]any{"lbsync.webhook.certSecret": "my-cert"},
			wantErr: "set lbsync.webhook.caBundle"},
		{name: "port of the metrics", overrides: map[string]any{"lbsync.webhook.port": 9103}, wantErr: "lbsync.webhook.port 9103"},
		{name: "port of the probes", overrides: map[string]any{"lbsync.webhook.port": 9104}, wantErr: "lbsync.webhook.port 9104"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := renderValues(t, readValues(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), tc.overrides))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("render error %v; want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkWebhook(t, r)
			mwc := webhookConfigs(r)[0]
			got := mwc.typed.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks[0].ClientConfig.CABundle
			if diff := cmp.Diff(tc.wantCABundle, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("caBundle (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAnnotations, mwc.u.GetAnnotations(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s annotations (-want +got):\n%s", mwc, diff)
			}
		})
	}
}

// TestChart_webhookCertificateIsKeptAcrossUpgrades renders as `helm
// install` and `helm upgrade` do, with lookup reading the local cluster.
func TestChart_webhookCertificateIsKeptAcrossUpgrades(t *testing.T) {
	c := localCluster(t)
	cr := newCreator(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "npl-webhook-cert"
	if _, err := c.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	eng := engine.New(c.RESTConfig())
	eng.Strict = true
	vals := readValues(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), nil)
	renderNow := func(eng engine.Engine) *release {
		t.Helper()
		r, err := renderReleaseWith(t, eng, vals, "npl", ns)
		if err != nil {
			t.Fatal(err)
		}
		checkWebhook(t, r)
		return r
	}
	// What restarts npl-lbsync and what it serves and the API server trusts.
	type certView struct{ Checksum, Crt, Key, CABundle string }
	view := func(r *release) certView {
		d := r.one(t, "Deployment", lbsyncName).typed.(*appsv1.Deployment)
		s := r.one(t, "Secret", webhookSecretName).typed.(*corev1.Secret)
		mwc := webhookConfigs(r)[0].typed.(*admissionregistrationv1.MutatingWebhookConfiguration)
		return certView{Checksum: d.Spec.Template.Annotations[checksumAnnotation], Crt: string(s.Data["tls.crt"]),
			Key: string(s.Data["tls.key"]), CABundle: string(mwc.Webhooks[0].ClientConfig.CABundle)}
	}

	// Install: no Secret yet, so a new certificate.
	installed := renderNow(eng)
	if err := cr.create(ctx, installed.one(t, "Secret", webhookSecretName), false); err != nil {
		t.Fatal(err)
	}
	// Upgrade: the Secret is kept, so npl-lbsync does not restart.
	if diff := cmp.Diff(view(installed), view(renderNow(eng))); diff != "" {
		t.Errorf("an upgrade changed the webhook certificate (-installed +upgraded):\n%s", diff)
	}
	// `helm template` cannot look the Secret up: a new certificate, which
	// restarts npl-lbsync.
	templated := view(renderNow(engine.Engine{Strict: true}))
	if templated.Crt == view(installed).Crt || templated.Checksum == view(installed).Checksum {
		t.Errorf("a render without the cluster reused the installed certificate or checksum")
	}
	// A year before the certificate expires, an upgrade renews it.
	soon := time.Now().Add(300 * 24 * time.Hour).UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, notAfterAnnotation, soon)
	if _, err := c.Client().CoreV1().Secrets(ns).Patch(ctx, webhookSecretName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := renderNow(eng)
	if v := view(renewed); v.Crt == view(installed).Crt || v.CABundle == view(installed).CABundle || v.Checksum == view(installed).Checksum {
		t.Errorf("an upgrade 300 days before expiry kept the certificate, its CA or the checksum")
	}
	notAfter, err := time.Parse(time.RFC3339, renewed.one(t, "Secret", webhookSecretName).u.GetAnnotations()[notAfterAnnotation])
	if err != nil || time.Until(notAfter) < 9*365*24*time.Hour {
		t.Errorf("renewed Secret's %s = %v (%v); want about ten years ahead", notAfterAnnotation, notAfter, err)
	}
}
