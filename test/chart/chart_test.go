package chart

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/nodeportlocal/npl/lbsync/config"
)

// The names of the objects of release "npl".
const (
	agentName        = "npl-agent"
	agentCleanupName = "npl-agent-cleanup"
	lbsyncName       = "npl-lbsync"
	uninstallName    = "npl-uninstall"
	configMapName    = "npl-lbsync-config"
)

// str reads a string at a dotted path of the release's values.
func (r *release) str(path string) string {
	v, err := r.values.PathValue(path)
	if err != nil {
		return ""
	}
	s, _ := v.(string)
	return s
}

func (r *release) agentEnabled() bool {
	v, _ := r.values.PathValue("agent.enabled")
	return v == true
}

func (r *release) gatewayAPIEnabled() bool {
	v, _ := r.values.PathValue("gatewayAPI.enabled")
	return v == true
}

// readsSecrets reports whether the values let npl-lbsync read TLS Secrets.
func (r *release) readsSecrets() bool {
	ing, _ := r.values.PathValue("ingressClass.readTLSSecrets")
	gw, _ := r.values.PathValue("gatewayAPI.readTLSSecrets")
	return ing == true || (r.gatewayAPIEnabled() && gw == true)
}

// lbsyncWant is what the lbsync ClusterRole grants with the release's
// values.
func (r *release) lbsyncWant() []string {
	want := lbsyncGrants
	if r.webhookEnabled() || r.gatewayAPIEnabled() {
		want = sortedJoin(want, lbsyncNamespaceGrants)
	}
	if r.gatewayAPIEnabled() {
		want = sortedJoin(want, lbsyncGatewayGrants)
	}
	if r.readsSecrets() {
		want = sortedJoin(want, []string{"/secrets:get"})
	}
	return want
}

func (r *release) webhookEnabled() bool {
	v, _ := r.values.PathValue("lbsync.webhook.enabled")
	return v == true
}

func TestChart_everyCIValueFile(t *testing.T) {
	for _, file := range ciValueFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := render(t, file, nil)
			t.Run("standard labels and namespace", func(t *testing.T) { checkLabels(t, r) })
			t.Run("agent runs on the host network with NET_ADMIN and NET_RAW only", func(t *testing.T) { checkAgent(t, r) })
			t.Run("npl-lbsync runs as non-root, read-only, with no capability", func(t *testing.T) { checkLbsync(t, r) })
			t.Run("every container is hardened", func(t *testing.T) { checkContainers(t, r) })
			t.Run("images are the values' repositories at appVersion", func(t *testing.T) { checkImages(t, r) })
			t.Run("no secret outside Secrets", func(t *testing.T) { checkNoSecretsOutsideSecrets(t, r) })
			t.Run("the npl-lbsync configuration parses with the mounted files", func(t *testing.T) { checkConfigParses(t, r) })
			t.Run("RBAC is what the binaries do", func(t *testing.T) { checkRBAC(t, r) })
			t.Run("uninstall hooks run in order on the release's objects", func(t *testing.T) { checkUninstallHooks(t, r) })
			t.Run("the readiness-gate webhook reaches npl-lbsync over TLS", func(t *testing.T) { checkWebhook(t, r) })
		})
	}
}

var standardLabels = []string{
	"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
	"app.kubernetes.io/version", "app.kubernetes.io/managed-by",
}

var clusterScoped = map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "IngressClass": true, "MutatingWebhookConfiguration": true,
	"CustomResourceDefinition": true, "ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}

func checkLabels(t *testing.T, r *release) {
	for _, o := range r.objects {
		for _, l := range standardLabels {
			if o.u.GetLabels()[l] == "" {
				t.Errorf("%s: no label %s", o, l)
			}
		}
		switch ns := o.u.GetNamespace(); {
		case clusterScoped[o.u.GetKind()] && ns != "":
			t.Errorf("%s: cluster-scoped but has namespace %q", o, ns)
		case !clusterScoped[o.u.GetKind()] && ns != r.namespace:
			t.Errorf("%s: namespace %q; want the release namespace %q", o, ns, r.namespace)
		}
	}
	// A workload's selector must select its own Pods and no other
	// component's (the metrics Services and the PDB rely on it).
	components := map[string]string{}
	for _, o := range workloads(r) {
		_, podLabels := podSpec(o)
		c := podLabels["app.kubernetes.io/component"]
		if prev, ok := components[c]; ok && o.u.GetKind() != "Job" {
			t.Errorf("%s and %s share component %q", o, prev, c)
		}
		components[c] = o.String()
	}
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name {
			return "", true
		}
	}
	return "", false
}

// checkProbesAndPorts checks that the health and metrics ports are those the
// binary listens on.
func checkProbesAndPorts(t *testing.T, o object, c corev1.Container) {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for flag, port := range map[string]string{"metrics-bind-address": "metrics", "health-probe-bind-address": "health"} {
		v, _ := flagValue(c.Args, flag)
		if want := fmt.Sprintf(":%d", ports[port]); v != want {
			t.Errorf("%s: --%s=%s; want %s, the %s port", o, flag, v, want, port)
		}
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "health" || p.HTTPGet.Path != want {
			t.Errorf("%s: %s probe %+v; want GET %s on port health", o, name, p, want)
		}
	}
}

func envFieldRef(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

// checkAgentContainer checks what the agent and its cleanup need to reach
// the node's iptables safely.
func checkAgentContainer(t *testing.T, o object, spec *corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("%s: hostNetwork %v, dnsPolicy %s; want true, ClusterFirstWithHostNet", o, spec.HostNetwork, spec.DNSPolicy)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatalf("%s: container %s has no capabilities", o, c.Name)
	}
	if diff := cmp.Diff([]corev1.Capability{"NET_ADMIN", "NET_RAW"}, sc.Capabilities.Add); diff != "" {
		t.Errorf("%s: capabilities added (-want +got):\n%s", o, diff)
	}
	if diff := cmp.Diff([]corev1.Capability{"ALL"}, sc.Capabilities.Drop); diff != "" {
		t.Errorf("%s: capabilities dropped (-want +got):\n%s", o, diff)
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Errorf("%s: privileged %v; want false", o, sc.Privileged)
	}
	if got := envFieldRef(c, "NODE_NAME"); got != "spec.nodeName" {
		t.Errorf("%s: NODE_NAME from %q; want the fieldRef spec.nodeName", o, got)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	var lock *corev1.Volume
	for i, v := range spec.Volumes {
		if mounts[v.Name] == "/run/xtables.lock" {
			lock = &spec.Volumes[i]
		}
	}
	if lock == nil || lock.HostPath == nil || lock.HostPath.Path != "/run/xtables.lock" ||
		lock.HostPath.Type == nil || *lock.HostPath.Type != corev1.HostPathFileOrCreate {
		t.Errorf("%s: /run/xtables.lock is not the host's (hostPath FileOrCreate): %+v", o, lock)
	}
}

func checkAgent(t *testing.T, r *release) {
	if !r.agentEnabled() {
		for _, kind := range []string{"DaemonSet", "ClusterRole", "ServiceAccount"} {
			if r.has(kind, agentName) {
				t.Errorf("agent.enabled is false but %s %s is rendered", kind, agentName)
			}
		}
		return
	}
	o := r.one(t, "DaemonSet", agentName)
	ds := o.typed.(*appsv1.DaemonSet)
	spec := &ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers; want 1", o, len(spec.Containers))
	}
	c := spec.Containers[0]
	checkAgentContainer(t, o, spec, c)
	checkProbesAndPorts(t, o, c)
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("%s: priorityClassName %q; want system-node-critical", o, spec.PriorityClassName)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Operator == corev1.TolerationOpExists && tl.Key == "" }) {
		t.Errorf("%s: tolerations %+v; want every taint tolerated", o, spec.Tolerations)
	}
	if spec.TerminationGracePeriodSeconds == nil {
		t.Errorf("%s: no terminationGracePeriodSeconds", o)
	}
	for flag, path := range map[string]string{
		"port-range": "agent.portRange", "node-ip-preference": "agent.nodeIPPreference",
		"datapath-check-interval": "agent.datapathCheckInterval", "service-node-port-range": "agent.serviceNodePortRange",
		"retired-port-grace": "agent.retiredPortGrace",
	} {
		if v, _ := flagValue(c.Args, flag); v != r.str(path) {
			t.Errorf("%s: --%s=%q; want %s %q", o, flag, v, path, r.str(path))
		}
	}
}

func checkLbsync(t *testing.T, r *release) {
	o := r.one(t, "Deployment", lbsyncName)
	d := o.typed.(*appsv1.Deployment)
	spec := &d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers; want 1", o, len(spec.Containers))
	}
	c := spec.Containers[0]
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("%s: pod security context %+v; want runAsNonRoot and user 65532", o, psc)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccomp profile not RuntimeDefault", o)
	}
	if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: capabilities %+v; want ALL dropped and none added", o, sc)
	}
	if spec.HostNetwork {
		t.Errorf("%s: on the host network", o)
	}
	if _, ok := flagValue(c.Args, "leader-elect"); !ok {
		t.Errorf("%s: args %v lack --leader-elect", o, c.Args)
	}
	if got := envFieldRef(c, "POD_NAMESPACE"); got != "metadata.namespace" {
		t.Errorf("%s: POD_NAMESPACE from %q; want the fieldRef metadata.namespace", o, got)
	}
	checkProbesAndPorts(t, o, c)
	if len(spec.TopologySpreadConstraints) == 0 {
		t.Errorf("%s: no topology spread constraint", o)
	}
	mount := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/npl" })
	if mount < 0 || !c.VolumeMounts[mount].ReadOnly {
		t.Errorf("%s: /etc/npl is not mounted read-only: %+v", o, c.VolumeMounts)
	}
	replicas, _ := r.values.PathValue("lbsync.replicas")
	if d.Spec.Replicas == nil || float64(*d.Spec.Replicas) != replicas {
		t.Errorf("%s: replicas %v; want lbsync.replicas %v", o, d.Spec.Replicas, replicas)
	}
	pdbs := r.find("PodDisruptionBudget")
	if wantPDB := replicas.(float64) > 1; wantPDB != (len(pdbs) == 1) {
		t.Errorf("%d PodDisruptionBudgets with %v replicas; want one only with more than 1", len(pdbs), replicas)
	} else if wantPDB {
		pdb := pdbs[0].typed.(*policyv1.PodDisruptionBudget)
		if diff := cmp.Diff(d.Spec.Selector, pdb.Spec.Selector); diff != "" {
			t.Errorf("PDB selector differs from the Deployment's (-deployment +pdb):\n%s", diff)
		}
	}
	ingressClass, _ := r.values.PathValue("ingressClass.create")
	if got := r.has("IngressClass", r.str("ingressClass.name")); got != (ingressClass == true) {
		t.Errorf("IngressClass %s rendered: %v; want %v", r.str("ingressClass.name"), got, ingressClass)
	}
}

// allContainers returns the init and regular containers of a Pod spec.
func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

func checkContainers(t *testing.T, r *release) {
	for _, o := range workloads(r) {
		spec, _ := podSpec(o)
		for _, c := range allContainers(spec) {
			sc := c.SecurityContext
			if sc == nil {
				t.Errorf("%s: container %s has no security context", o, c.Name)
				continue
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: container %s is privileged", o, c.Name)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: container %s may escalate privileges", o, c.Name)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: container %s has a writable root filesystem", o, c.Name)
			}
			if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("%s: container %s does not drop ALL capabilities", o, c.Name)
			}
			if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 && !spec.HostNetwork {
				t.Errorf("%s: container %s adds capabilities %v off the host network", o, c.Name, sc.Capabilities.Add)
			}
		}
	}
}

func checkImages(t *testing.T, r *release) {
	appVersion := loadChart(t).Metadata.AppVersion
	want := map[string]bool{}
	for _, comp := range []string{"agent", "lbsync"} {
		want[r.str(comp+".image.repository")+":"+appVersion] = true
	}
	for _, o := range workloads(r) {
		spec, _ := podSpec(o)
		for _, c := range allContainers(spec) {
			if !want[c.Image] {
				t.Errorf("%s: container %s image %s; want one of %v", o, c.Name, c.Image, want)
			}
		}
	}
}

func checkNoSecretsOutsideSecrets(t *testing.T, r *release) {
	var secrets []string
	for _, p := range []string{"provider.avi.password", "provider.bigip.password"} {
		if s := r.str(p); s != "" {
			secrets = append(secrets, s)
		}
	}
	for _, o := range r.find("Secret") {
		for _, v := range o.typed.(*corev1.Secret).Data {
			// Short values (a user name such as "admin") also occur as
			// ordinary words; passwords of the ci files are longer.
			if len(v) >= 8 {
				secrets = append(secrets, string(v))
			}
		}
	}
	for _, o := range r.objects {
		if o.u.GetKind() == "Secret" {
			continue
		}
		text, _ := yaml.Marshal(o.u.Object)
		for _, s := range secrets {
			if strings.Contains(string(text), s) {
				t.Errorf("%s holds secret data %q", o, s)
			}
		}
	}
	for _, o := range r.find("ConfigMap") {
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(o.typed.(*corev1.ConfigMap).Data["config.yaml"]), &cfg); err != nil {
			continue
		}
		walkKeys(cfg, "", func(path string) {
			leaf := path[strings.LastIndex(path, ".")+1:]
			if slices.Contains([]string{"username", "password", "token"}, strings.ToLower(leaf)) {
				t.Errorf("%s: config.yaml has an inline secret field %s; want a *File field", o, path)
			}
		})
	}
}

func walkKeys(m map[string]any, prefix string, fn func(path string)) {
	for k, v := range m {
		fn(prefix + k)
		if sub, ok := v.(map[string]any); ok {
			walkKeys(sub, prefix+k+".", fn)
		}
	}
}

// testCAPEM is a CA certificate for Secrets the chart does not make.
func testCAPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "existing secret CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// testKeyPairPEM is a certificate and its key, for the tls.crt and tls.key
// of Secrets the chart does not make (the haproxy provider loads them).
func testKeyPairPEM(t *testing.T) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "existing secret certificate"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// mountedFiles returns the files a container sees under its read-only
// mounts of projected ConfigMaps and Secrets, by absolute path. The content
// of a Secret the release does not make (existingSecret, certSecret) is made
// up.
func mountedFiles(t *testing.T, r *release, o object, c corev1.Container) map[string][]byte {
	t.Helper()
	spec, _ := podSpec(o)
	files := map[string][]byte{}
	for _, m := range c.VolumeMounts {
		vi := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if vi < 0 || spec.Volumes[vi].Projected == nil {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("%s: volume %s is mounted writable", o, m.Name)
		}
		for _, src := range spec.Volumes[vi].Projected.Sources {
			var data map[string][]byte
			var items []corev1.KeyToPath
			switch {
			case src.ConfigMap != nil:
				cm := r.one(t, "ConfigMap", src.ConfigMap.Name).typed.(*corev1.ConfigMap)
				data = map[string][]byte{}
				for k, v := range cm.Data {
					data[k] = []byte(v)
				}
				items = src.ConfigMap.Items
			case src.Secret != nil:
				if r.has("Secret", src.Secret.Name) {
					data = r.one(t, "Secret", src.Secret.Name).typed.(*corev1.Secret).Data
				} else {
					crt, key := testKeyPairPEM(t)
					data = map[string][]byte{"username": []byte("existing-user"), "password": []byte("existing-password"), "ca.crt": testCAPEM(t),
						"tls.crt": crt, "tls.key": key}
				}
				items = src.Secret.Items
			}
			for _, it := range items {
				v, ok := data[it.Key]
				if !ok {
					t.Errorf("%s: volume %s projects key %s, which is not in its source", o, m.Name, it.Key)
				}
				files[filepath.Join(m.MountPath, it.Path)] = v
			}
		}
	}
	return files
}

// parseMountedConfig writes the mounted files under a temporary root and
// parses the configuration given by --config with the paths moved there.
func parseMountedConfig(t *testing.T, r *release, o object, c corev1.Container) *config.Config {
	t.Helper()
	path, ok := flagValue(c.Args, "config")
	if !ok {
		t.Fatalf("%s: container %s has no --config", o, c.Name)
	}
	files := mountedFiles(t, r, o, c)
	data, ok := files[path]
	if !ok {
		t.Fatalf("%s: --config=%s is not a mounted file (mounted: %v)", o, path, slices.Sorted(maps.Keys(files)))
	}
	root := t.TempDir()
	for p, content := range files {
		writeFile(t, filepath.Join(root, p), content)
	}
	dir := filepath.Dir(path)
	moved := strings.ReplaceAll(string(data), dir+"/", filepath.Join(root, dir)+"/")
	cfg, err := config.Parse([]byte(moved), filepath.Join(root, dir))
	if err != nil {
		t.Fatalf("%s: the rendered configuration does not parse: %v\n%s", o, err, data)
	}
	return cfg
}

// configView is what the tests compare of a parsed configuration.
type configView struct {
	ClusterName, ServiceType, LoadBalancerClass, IngressClass, IPFamily, Provider string
	DefaultLoadBalancer                                                           bool
	ResyncPeriod                                                                  time.Duration
	DrainSeconds                                                                  int
}

func checkConfigParses(t *testing.T, r *release) {
	d := r.one(t, "Deployment", lbsyncName)
	cfg := parseMountedConfig(t, r, d, d.typed.(*appsv1.Deployment).Spec.Template.Spec.Containers[0])
	resync, _ := time.ParseDuration(r.str("lbsync.resyncPeriod"))
	drain, _ := r.values.PathValue("lbsync.drainSeconds")
	dlb, _ := r.values.PathValue("defaultLoadBalancer")
	want := configView{
		ClusterName: r.str("clusterName"), ServiceType: r.str("serviceType"), LoadBalancerClass: r.str("loadBalancerClass"),
		IngressClass: r.str("ingressClass.name"), IPFamily: r.str("ipFamily"), Provider: r.str("provider.name"),
		DefaultLoadBalancer: dlb == true, ResyncPeriod: resync, DrainSeconds: int(drain.(float64)),
	}
	got := configView{
		ClusterName: cfg.ClusterName(), ServiceType: cfg.ServiceType(), LoadBalancerClass: cfg.LoadBalancerClass(),
		IngressClass: cfg.IngressClass(), IPFamily: cfg.IPFamily(), Provider: cfg.ProviderName(),
		DefaultLoadBalancer: cfg.DefaultLoadBalancer(), ResyncPeriod: cfg.ResyncPeriod(), DrainSeconds: int(cfg.DrainPeriod() / time.Second),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parsed configuration differs from the values (-values +parsed):\n%s", diff)
	}
	// The uninstall Job reads the same configuration.
	if r.has("Job", uninstallName) {
		j := r.one(t, "Job", uninstallName)
		parseMountedConfig(t, r, j, j.typed.(*batchv1.Job).Spec.Template.Spec.Containers[0])
	}
}

// grants flattens RBAC rules into "group/resource:verb" (with "@name" when
// the rule is limited to names), sorted.
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if len(r.ResourceNames) == 0 {
						out = append(out, g+"/"+res+":"+v)
					}
					for _, n := range r.ResourceNames {
						out = append(out, g+"/"+res+":"+v+"@"+n)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func expand(groupResources []string, verbs ...string) []string {
	var out []string
	for _, gr := range groupResources {
		for _, v := range verbs {
			out = append(out, gr+":"+v)
		}
	}
	return out
}

func sortedJoin(parts ...[]string) []string {
	out := slices.Concat(parts...)
	sort.Strings(out)
	return out
}

var (
	agentGrants = sortedJoin(
		expand([]string{"/pods", "/services", "/nodes", "discovery.k8s.io/endpointslices"}, "get", "list", "watch"),
		expand([]string{"/pods/status"}, "patch"),
		expand([]string{"/events", "events.k8s.io/events"}, "create", "patch"),
	)
	lbsyncGrants = sortedJoin(
		expand([]string{"/services", "/pods", "/nodes", "discovery.k8s.io/endpointslices",
			"networking.k8s.io/ingresses", "networking.k8s.io/ingressclasses"}, "get", "list", "watch"),
		expand([]string{"/services", "/services/status"}, "patch", "update"),
		expand([]string{"/pods/status", "networking.k8s.io/ingresses", "networking.k8s.io/ingresses/status"}, "patch"),
		expand([]string{"/events", "events.k8s.io/events"}, "create", "patch"),
		expand([]string{"npl.io/loadbalancerpolicies"}, "get", "list", "watch"),
		[]string{"npl.io/loadbalancerpolicies/status:update"},
		expand([]string{"apiextensions.k8s.io/customresourcedefinitions"}, "get", "list", "watch"),
	)
	// The webhook reads the readiness-gate label of Namespaces, the Gateway
	// API support their labels (listeners' namespace selectors).
	lbsyncNamespaceGrants = expand([]string{"/namespaces"}, "get", "list", "watch")
	lbsyncGatewayGrants   = sortedJoin(
		expand([]string{"gateway.networking.k8s.io/gatewayclasses", "gateway.networking.k8s.io/gateways",
			"gateway.networking.k8s.io/httproutes", "gateway.networking.k8s.io/grpcroutes", "gateway.networking.k8s.io/tcproutes",
			"gateway.networking.k8s.io/udproutes", "gateway.networking.k8s.io/tlsroutes", "gateway.networking.k8s.io/referencegrants",
			"gateway.networking.k8s.io/backendtlspolicies", "/configmaps"},
			"get", "list", "watch"),
		expand([]string{"gateway.networking.k8s.io/gatewayclasses/status", "gateway.networking.k8s.io/gateways/status",
			"gateway.networking.k8s.io/httproutes/status", "gateway.networking.k8s.io/grpcroutes/status", "gateway.networking.k8s.io/tcproutes/status",
			"gateway.networking.k8s.io/udproutes/status", "gateway.networking.k8s.io/tlsroutes/status",
			"gateway.networking.k8s.io/backendtlspolicies/status"}, "update", "patch"),
		expand([]string{"gateway.networking.x-k8s.io/xbackendtrafficpolicies"}, "get", "list", "watch"),
		[]string{"gateway.networking.x-k8s.io/xbackendtrafficpolicies/status:update"})
	lbsyncLeaseGrants = []string{"coordination.k8s.io/leases:create", "coordination.k8s.io/leases:get@npl-lbsync", "coordination.k8s.io/leases:update@npl-lbsync"}
	uninstallGrants   = sortedJoin(expand([]string{"/services", "networking.k8s.io/ingresses"}, "get", "list", "patch"),
		expand([]string{"/services/status", "networking.k8s.io/ingresses/status"}, "patch"),
		expand([]string{"networking.k8s.io/ingressclasses"}, "list"),
		expand([]string{"npl.io/loadbalancerpolicies"}, "get", "list"),
		[]string{"npl.io/loadbalancerpolicies/status:update"})
)

func checkRBAC(t *testing.T, r *release) {
	for _, tc := range []struct {
		kind, name string
		want       []string
		when       bool
	}{
		{"ClusterRole", agentName, agentGrants, r.agentEnabled()},
		{"ClusterRole", lbsyncName, r.lbsyncWant(), true},
		{"Role", lbsyncName + "-lease", lbsyncLeaseGrants, true},
		{"ClusterRole", uninstallName, uninstallGrants, true},
	} {
		if !tc.when {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch role := r.one(t, tc.kind, tc.name).typed.(type) {
		case *rbacv1.ClusterRole:
			rules = role.Rules
		case *rbacv1.Role:
			rules = role.Rules
		}
		if diff := cmp.Diff(tc.want, grants(rules)); diff != "" {
			t.Errorf("%s %s grants (-want +got):\n%s", tc.kind, tc.name, diff)
		}
	}
	// The Lease Role names the Lease npl-lbsync is told to use.
	d := r.one(t, "Deployment", lbsyncName).typed.(*appsv1.Deployment)
	if lease, _ := flagValue(d.Spec.Template.Spec.Containers[0].Args, "leader-elect-lease-name"); lease != "npl-lbsync" {
		t.Errorf("--leader-elect-lease-name=%q; want npl-lbsync, the name the Role allows", lease)
	}
	// No role reads Secrets (but npl-lbsync's when the values let it) or
	// uses wildcards.
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, o := range r.find(kind) {
			if r.readsSecrets() && kind == "ClusterRole" && o.u.GetName() == lbsyncName {
				continue // checked above: get, nothing else
			}
			var rules []rbacv1.PolicyRule
			switch role := o.typed.(type) {
			case *rbacv1.ClusterRole:
				rules = role.Rules
			case *rbacv1.Role:
				rules = role.Rules
			}
			for _, g := range grants(rules) {
				if strings.Contains(g, "secrets") || strings.Contains(g, "*") {
					t.Errorf("%s grants %s", o, g)
				}
			}
		}
	}
	// Every binding binds the release's own ServiceAccounts to its own roles.
	sas := map[string]bool{}
	for _, o := range r.find("ServiceAccount") {
		sas[o.u.GetName()] = true
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range r.find(kind) {
			var ref rbacv1.RoleRef
			var subjects []rbacv1.Subject
			switch b := o.typed.(type) {
			case *rbacv1.ClusterRoleBinding:
				ref, subjects = b.RoleRef, b.Subjects
			case *rbacv1.RoleBinding:
				ref, subjects = b.RoleRef, b.Subjects
			}
			if !r.has(ref.Kind, ref.Name) {
				t.Errorf("%s refers to %s %s, which the release does not make", o, ref.Kind, ref.Name)
			}
			for _, s := range subjects {
				if s.Kind != "ServiceAccount" || !sas[s.Name] || s.Namespace != r.namespace {
					t.Errorf("%s binds %+v; want a ServiceAccount of the release", o, s)
				}
			}
		}
	}
	for _, o := range workloads(r) {
		spec, _ := podSpec(o)
		if !sas[spec.ServiceAccountName] {
			t.Errorf("%s runs as ServiceAccount %q, which the release does not make", o, spec.ServiceAccountName)
		}
	}
}

func hookWeight(t *testing.T, o object) int {
	t.Helper()
	w, err := strconv.Atoi(o.u.GetAnnotations()["helm.sh/hook-weight"])
	if err != nil {
		t.Fatalf("%s: hook weight: %v", o, err)
	}
	return w
}

func checkUninstallHooks(t *testing.T, r *release) {
	var hooks []object
	for _, o := range r.objects {
		a := o.u.GetAnnotations()
		if a["helm.sh/hook"] == "" {
			continue
		}
		hooks = append(hooks, o)
		if a["helm.sh/hook"] != "pre-delete" {
			t.Errorf("%s: hook %q; want pre-delete only", o, a["helm.sh/hook"])
		}
		if !strings.Contains(a["helm.sh/hook-delete-policy"], "before-hook-creation") {
			t.Errorf("%s: delete policy %q; want before-hook-creation so a retried uninstall starts afresh", o, a["helm.sh/hook-delete-policy"])
		}
	}
	job := r.one(t, "Job", uninstallName)
	stopWeight := hookWeight(t, job)
	for _, o := range hooks {
		if k := o.u.GetKind(); (k == "ServiceAccount" || strings.HasSuffix(k, "Role") || strings.HasSuffix(k, "Binding")) && hookWeight(t, o) >= stopWeight {
			t.Errorf("%s: weight %d; want it created before the Job %s (weight %d)", o, hookWeight(t, o), uninstallName, stopWeight)
		}
	}
	checkWebhookUninstallHook(t, r, hooks, stopWeight)
	// Step 1 stops exactly the release's workloads, by the names the Role allows.
	args := job.typed.(*batchv1.Job).Spec.Template.Spec.Containers[0].Args
	var stopDeploy, stopDS []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--stop-deployment="); ok {
			stopDeploy = append(stopDeploy, v)
		}
		if v, ok := strings.CutPrefix(a, "--stop-daemonset="); ok {
			stopDS = append(stopDS, v)
		}
	}
	if args[0] != "cleanup" || !slices.Equal(stopDeploy, []string{lbsyncName}) {
		t.Errorf("%s: args %v; want cleanup --stop-deployment=%s", job, args, lbsyncName)
	}
	role := grants(r.one(t, "Role", uninstallName).typed.(*rbacv1.Role).Rules)
	wantRole := []string{"/pods:list", "apps/deployments:get@" + lbsyncName, "apps/deployments:patch@" + lbsyncName}
	if !r.agentEnabled() {
		if len(stopDS) != 0 || r.has("DaemonSet", agentCleanupName) {
			t.Errorf("agent disabled, yet the uninstall stops %v or cleans nodes", stopDS)
		}
		if diff := cmp.Diff(sortedJoin(wantRole), role); diff != "" {
			t.Errorf("uninstall Role (-want +got):\n%s", diff)
		}
		return
	}
	if !slices.Equal(stopDS, []string{agentName}) {
		t.Errorf("%s: args %v; want --stop-daemonset=%s", job, args, agentName)
	}
	wantRole = append(wantRole, "apps/daemonsets:get@"+agentName, "apps/daemonsets:delete@"+agentName, "apps/daemonsets:get@"+agentCleanupName)
	if diff := cmp.Diff(sortedJoin(wantRole), role); diff != "" {
		t.Errorf("uninstall Role (-want +got):\n%s", diff)
	}

	// Step 2 runs `npl-agent cleanup` where the agent ran, as the agent.
	cleanupObj := r.one(t, "DaemonSet", agentCleanupName)
	cleanupDS := cleanupObj.typed.(*appsv1.DaemonSet)
	agent := r.one(t, "DaemonSet", agentName).typed.(*appsv1.DaemonSet)
	if w := hookWeight(t, cleanupObj); w <= stopWeight {
		t.Errorf("%s: weight %d; want it after the Job %s (weight %d) has stopped the agent", cleanupObj, w, uninstallName, stopWeight)
	}
	cs, as := &cleanupDS.Spec.Template.Spec, &agent.Spec.Template.Spec
	placement := func(s *corev1.PodSpec) []any {
		return []any{s.NodeSelector, s.Tolerations, s.Affinity, s.ServiceAccountName}
	}
	if diff := cmp.Diff(placement(as), placement(cs)); diff != "" {
		t.Errorf("cleanup DaemonSet placement or identity differs from the agent's (-agent +cleanup):\n%s", diff)
	}
	if len(cs.InitContainers) != 1 || len(cs.InitContainers[0].Args) == 0 || cs.InitContainers[0].Args[0] != "cleanup" {
		t.Fatalf("%s: init containers %+v; want one running `npl-agent cleanup`", cleanupObj, cs.InitContainers)
	}
	checkAgentContainer(t, cleanupObj, cs, cs.InitContainers[0])
	for _, c := range cs.Containers {
		if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil || len(c.SecurityContext.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s adds capabilities; only the cleanup needs them", cleanupObj, c.Name)
		}
	}

	// Step 3 waits for step 2.
	wait := r.one(t, "Job", agentCleanupName+"-wait")
	if w := hookWeight(t, wait); w <= hookWeight(t, cleanupObj) {
		t.Errorf("%s: weight %d; want it after the cleanup DaemonSet", wait, w)
	}
	wargs := wait.typed.(*batchv1.Job).Spec.Template.Spec.Containers[0].Args
	if diff := cmp.Diff([]string{"cleanup", "wait-daemonset", agentCleanupName}, wargs[:min(3, len(wargs))]); diff != "" {
		t.Errorf("%s args (-want +got):\n%s", wait, diff)
	}
}

func TestChart_agentDisabledRendersNoNodeObjects(t *testing.T) {
	r := render(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), map[string]any{"agent.enabled": false})
	for _, o := range r.objects {
		if c := o.u.GetLabels()["app.kubernetes.io/component"]; strings.HasPrefix(c, "agent") {
			t.Errorf("agent.enabled=false still renders %s", o)
		}
	}
	checkUninstallHooks(t, r)
}

func TestChart_uninstallDisabledRendersNoHook(t *testing.T) {
	r := render(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), map[string]any{"uninstall.enabled": false})
	for _, o := range r.objects {
		if o.u.GetAnnotations()["helm.sh/hook"] != "" {
			t.Errorf("uninstall.enabled=false still renders hook %s", o)
		}
	}
}

func TestChart_serviceMonitorsSelectTheMetricsServices(t *testing.T) {
	if r := render(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), nil); len(r.find("ServiceMonitor")) != 0 {
		t.Errorf("ServiceMonitors rendered while metrics.serviceMonitor.enabled is false")
	}
	r := render(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), map[string]any{
		"metrics.serviceMonitor.enabled":          true,
		"metrics.serviceMonitor.additionalLabels": map[string]any{"release": "prom"},
	})
	monitors := r.find("ServiceMonitor")
	if len(monitors) != 2 {
		t.Fatalf("%d ServiceMonitors; want 2 (agent, lbsync)", len(monitors))
	}
	for _, m := range monitors {
		if m.u.GetLabels()["release"] != "prom" {
			t.Errorf("%s: additionalLabels not applied: %v", m, m.u.GetLabels())
		}
		sel := stringMapAt(m.u.Object, "spec", "selector", "matchLabels")
		matched := 0
		for _, s := range r.find("Service") {
			if labelsMatch(sel, s.u.GetLabels()) {
				matched++
				port := s.typed.(*corev1.Service).Spec.Ports[0].Name
				if port != "metrics" {
					t.Errorf("%s selects %s whose port is %q", m, s, port)
				}
			}
		}
		if matched != 1 {
			t.Errorf("%s selects %d Services; want exactly its metrics Service", m, matched)
		}
	}
}

// stringMapAt returns the map of strings at a path of an unstructured
// object.
func stringMapAt(obj map[string]any, path ...string) map[string]string {
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	out := map[string]string{}
	for k, v := range cur {
		out[k], _ = v.(string)
	}
	return out
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func TestChart_templatesRejectIncompleteProviderSettings(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overrides map[string]any
		want      string
	}{
		{"avi without controller", map[string]any{"provider.name": "avi", "provider.avi.vipNetwork": "n", "provider.avi.existingSecret": "s"},
			"provider.avi.controller is required"},
		{"avi without credentials", map[string]any{"provider.name": "avi", "provider.avi.controller": "c", "provider.avi.vipNetwork": "n",
			"provider.avi.insecureSkipVerify": true}, "set existingSecret, or username and password"},
		{"avi without CA", map[string]any{"provider.name": "avi", "provider.avi.controller": "c", "provider.avi.vipNetwork": "n",
			"provider.avi.username": "u", "provider.avi.password": "p"}, "set caData"},
		{"bigip https without CA", map[string]any{"provider.name": "bigip", "provider.bigip.url": "https://b",
			"provider.bigip.username": "u", "provider.bigip.password": "p"}, "set caData"},
		{"bigip without url", map[string]any{"provider.name": "bigip", "provider.bigip.existingSecret": "s"}, "provider.bigip.url is required"},
		{"bigip over http", map[string]any{"provider.name": "bigip", "provider.bigip.url": "http://b",
			"provider.bigip.username": "u", "provider.bigip.password": "p"}, "an http:// URL sends the BIG-IP login in clear"},
		{"haproxy without edges", map[string]any{"provider.name": "haproxy", "provider.haproxy.existingSecret": "s"}, "provider.haproxy.edges is required"},
		{"haproxy without client certificate", map[string]any{"provider.name": "haproxy", "provider.haproxy.edges": []any{"https://e:8443"}},
			"provider.haproxy.existingSecret is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := readValues(t, "", tc.overrides)
			vals["clusterName"] = "c1"
			_, err := renderValues(t, vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render error = %v; want one saying %q", err, tc.want)
			}
		})
	}
	// An http BIG-IP URL needs no CA (and insecure).
	vals := readValues(t, "", map[string]any{"clusterName": "c1", "provider.name": "bigip", "provider.bigip.url": "http://b",
		"provider.bigip.insecure": true, "provider.bigip.username": "u", "provider.bigip.password": "p"})
	if _, err := renderValues(t, vals); err != nil {
		t.Errorf("bigip over http without CA: %v", err)
	}
}

func TestChart_projectedConfigIsReadableByNonRootOnly(t *testing.T) {
	r := render(t, filepath.Join(chartDir, "ci", "avi-values.yaml"), nil)
	d := r.one(t, "Deployment", lbsyncName).typed.(*appsv1.Deployment)
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		if v.Projected.DefaultMode == nil || *v.Projected.DefaultMode != 0o440 {
			t.Errorf("volume %s mode %v; want 0440 (owner and fsGroup read)", v.Name, v.Projected.DefaultMode)
		}
	}
	if fs := d.Spec.Template.Spec.SecurityContext.FSGroup; fs == nil || *fs != 65532 {
		t.Errorf("fsGroup %v; want 65532 so the non-root user reads the 0440 files", fs)
	}
}

func TestChart_existingSecretIsMountedAndNoSecretIsMade(t *testing.T) {
	r := render(t, filepath.Join(chartDir, "ci", "existing-secret-values.yaml"), nil)
	if secrets := r.find("Secret"); len(secrets) != 0 {
		t.Errorf("existingSecret set, yet the chart makes %v", secrets)
	}
	want := r.str("provider.bigip.existingSecret")
	for _, name := range []string{lbsyncName, uninstallName} {
		kind := map[string]string{lbsyncName: "Deployment", uninstallName: "Job"}[name]
		spec, _ := podSpec(r.one(t, kind, name))
		var got []string
		for _, v := range spec.Volumes {
			if v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				// The webhook's certificate is checkWebhook's.
				if src.Secret != nil && src.Secret.Name != r.str("lbsync.webhook.certSecret") {
					got = append(got, src.Secret.Name)
					keys := []string{}
					for _, it := range src.Secret.Items {
						keys = append(keys, it.Key)
					}
					// TLS is verified and no caData is given: the CA
					// comes from the Secret.
					if diff := cmp.Diff([]string{"username", "password", "ca.crt"}, keys); diff != "" {
						t.Errorf("%s %s: keys of Secret %s (-want +got):\n%s", kind, name, src.Secret.Name, diff)
					}
				}
			}
		}
		if !slices.Equal(got, []string{want}) {
			t.Errorf("%s %s mounts Secrets %v; want %s", kind, name, got, want)
		}
	}
}

func TestChart_longestReleaseNameGivesValidObjectNames(t *testing.T) {
	// Helm allows release names of up to 53 characters.
	name := strings.Repeat("r", 53)
	r, err := renderRelease(t, readValues(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), nil), name, testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range r.objects {
		if o.u.GetKind() == "CustomResourceDefinition" {
			continue // named by its group and kind, not the release
		}
		// A label value (job-name, the ServiceMonitor selector) and a
		// Service name are DNS labels: 63 characters at most.
		if msgs := validation.IsDNS1123Label(o.u.GetName()); len(msgs) > 0 {
			t.Errorf("%s: name is not a DNS label: %v", o, msgs)
		}
	}
}

func TestChart_gatewayAPIGrantsOnlyWhenEnabled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		overrides map[string]any
		gateway   bool
		secrets   bool
	}{
		{"disabled", map[string]any{"gatewayAPI.enabled": false, "gatewayAPI.readTLSSecrets": true}, false, false},
		{"enabled", map[string]any{"gatewayAPI.enabled": true}, true, false},
		{"enabled with Secrets", map[string]any{"gatewayAPI.enabled": true, "gatewayAPI.readTLSSecrets": true, "lbsync.webhook.enabled": false}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, filepath.Join(chartDir, "ci", "mock-values.yaml"), tc.overrides)
			if r.gatewayAPIEnabled() != tc.gateway || r.readsSecrets() != tc.secrets {
				t.Fatalf("values: gatewayAPI %v secrets %v", r.gatewayAPIEnabled(), r.readsSecrets())
			}
			checkRBAC(t, r)
			got := grants(r.one(t, "ClusterRole", lbsyncName).typed.(*rbacv1.ClusterRole).Rules)
			for _, g := range lbsyncGatewayGrants {
				if slices.Contains(got, g) != tc.gateway {
					t.Errorf("grant %s: %v, want %v", g, !tc.gateway, tc.gateway)
				}
			}
			if slices.Contains(got, "/secrets:get") != tc.secrets {
				t.Errorf("secrets get granted: %v, want %v", !tc.secrets, tc.secrets)
			}
			// The configuration npl-lbsync reads says the same.
			cfg := r.one(t, "ConfigMap", configMapName).typed.(*corev1.ConfigMap).Data["config.yaml"]
			if want := fmt.Sprintf("gatewayAPI:\n  enabled: %v\n", tc.gateway); !strings.Contains(cfg, want) {
				t.Errorf("config.yaml lacks %q:\n%s", want, cfg)
			}
		})
	}
}
