package realnodes

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
	"github.com/nodeportlocal/npl/test/harness/images"
	"github.com/nodeportlocal/npl/test/harness/podreply"
)

const (
	releaseNamespace = "npl-system"
	releaseName      = "npl"
	// vipRange is where npl-lbsync takes VIPs from: routed to the edge.
	vipRange = "198.18.200.0/28"
)

// TestRealNodes_theChartFromHelmInstallToHelmUninstall is the chart's life
// as users live it, on three dual-stack real nodes (kubelet, containerd,
// kube-proxy, CNI bridge) sharing one cluster per kube-proxy mode, with
// HAProxy on an edge host as the load balancer (the haproxy provider and
// npl-edge): the first hour (`helm install`, a 3-replica Deployment behind a
// LoadBalancer Service and a TLS Ingress, a dual-stack Service), a rolling
// update with and without the readiness gate, then day two (the agent's
// rolling update to a new image tag, kube-proxy restarted, `helm upgrade` to
// another port range, the NodePort contrast, a node drained and deleted)
// and `helm uninstall`, the steps' requests going through the VIPs. A step
// that fails leaves the later ones to run on what is left, except the
// install, without which nothing follows.
//
// It runs once with kube-proxy in iptables mode and once in nftables mode:
// the agent picks the matching datapath (--datapath auto) in each.
func TestRealNodes_theChartFromHelmInstallToHelmUninstall(t *testing.T) {
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run("kube-proxy "+mode, func(t *testing.T) {
			c := startRealCluster(t, cluster.Options{Nodes: 3, KubeProxyMode: mode, DualStack: true})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			s := &story{mode: mode, c: c, client: c.Client(), off: map[string]bool{}}
			s.startEdge(t, ctx)
			if !s.step(t, ctx, "helm install feeds HAProxy on the edge and every Pod answers through the VIPs", s.helmInstallFeedsTheLoadBalancer) {
				return
			}
			s.step(t, ctx, "a dual-stack Service's Pods get an entry per family, and IPv6 reaches every member", s.dualStackService)
			if mode == "iptables" {
				// Once is enough: the datapath backend plays no part in the gate.
				s.step(t, ctx, "a rolling update through the VIP: without the readiness gate Pods are Ready before the load balancer has them, with it none is and no request fails", s.readinessGateRollout)
			}
			s.step(t, ctx, "an agent rolling update to a new image tag changes no port and fails no request", s.agentRollingUpdate)
			s.step(t, ctx, "kube-proxy restarted keeps npl's rules, and npl's repair leaves kube-proxy's alone", s.kubeProxyRestart)
			s.step(t, ctx, "helm upgrade to another port range moves the mappings outside it, the pools follow, the members that stay never fail", s.portRangeUpgrade)
			s.step(t, ctx, "a NodePort opens on every node, an npl node port only on its Pod's node", s.nodePortContrast)
			s.step(t, ctx, "a drained and deleted node's members leave the pools, the others stay", s.drainAndDeleteANode)
			s.step(t, ctx, "helm uninstall leaves no rule, mark or load balancer, and the workload still serves", s.helmUninstall)
		})
	}
}

// story is one cluster and the chart's release on it, which the steps of
// TestRealNodes_theChartFromHelmInstallToHelmUninstall share.
type story struct {
	mode string // kube-proxy's
	// ctx is the current step's.
	ctx    context.Context
	c      *cluster.Cluster
	client kubernetes.Interface
	tag    string         // of the images the nodes imported
	vals   map[string]any // the release's values
	// bed is the edge host, lb what it serves of lbCluster (through
	// npl-edge's API), foreignServed whether it still serves the load
	// balancer of another cluster it was given.
	bed           *edgebed.Bed
	lb            *edgebed.LBBackend
	foreignServed func() bool
	// lbsyncPod is the name of npl-lbsync's ready replica.
	lbsyncPod string
	// off holds the nodes switched off.
	off map[string]bool
}

// stepTimeout bounds one step of the story.
const stepTimeout = 3 * time.Minute

// step runs one step of the story as a subtest, with s.ctx ending after
// stepTimeout, so that a step that hangs leaves the next ones their time.
func (s *story) step(t *testing.T, ctx context.Context, name string, fn func(*testing.T)) bool {
	return t.Run(name, func(t *testing.T) {
		var cancel context.CancelFunc
		s.ctx, cancel = context.WithTimeout(ctx, stepTimeout)
		defer cancel()
		fn(t)
	})
}

// workloadNS is the namespace of the user's workload, web.
const workloadNS = "shop"

func (s *story) helmInstallFeedsTheLoadBalancer(t *testing.T) {
	ctx, c, client := s.ctx, s.c, s.client
	s.tag = imageTag(t, c)
	tag := s.tag
	s.vals = map[string]any{
		"clusterName": lbCluster,
		"vipPool":     []any{vipRange},
		"lbsync":      map[string]any{"replicas": 1, "image": map[string]any{"tag": tag}},
		// A short drift check, so that a repair shows within seconds.
		"agent":        map[string]any{"image": map[string]any{"tag": tag}, "datapathCheckInterval": datapathCheckInterval.String()},
		"provider":     s.providerValues(),
		"ingressClass": map[string]any{"readTLSSecrets": true},
	}
	helmInstall(t, ctx, c, s.vals)
	proxyMode := s.mode

	eventually(t, ctx, "the agent DaemonSet Ready on every node", func(ctx context.Context) error {
		dss, err := client.AppsV1().DaemonSets(releaseNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(dss.Items) != 1 {
			return fmt.Errorf("daemonsets: %v (%d)", err, len(dss.Items))
		}
		st := dss.Items[0].Status
		if st.DesiredNumberScheduled != 3 || st.NumberReady != 3 {
			return fmt.Errorf("%d of %d ready", st.NumberReady, st.DesiredNumberScheduled)
		}
		return nil
	})
	agentPod := ""
	// Each agent runs the iptables backend of its node, where kube-proxy
	// and the kubelet put their rules, and the datapath of kube-proxy's
	// mode; its log, read through the apiserver from the node's kubelet,
	// says so.
	for _, n := range c.Nodes() {
		out, err := n.Command(ctx, "iptables", "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables --version on %s: %v: %s", n.Name, err, out)
		}
		mode := "legacy"
		if strings.Contains(string(out), "nf_tables") {
			mode = "nft"
		}
		pods, err := client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			t.Fatal(err)
		}
		want := "iptables-wrapper: using the " + mode + " backend (kubelet's hint chain is in " + mode + ")"
		found := false
		for _, p := range pods.Items {
			if !strings.Contains(p.Name, "agent") {
				continue
			}
			agentPod = p.Name
			logs, err := client.CoreV1().Pods(releaseNamespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("logs of %s through the apiserver: %v", p.Name, err)
			}
			found = strings.Contains(string(logs), want)
			if !found {
				t.Errorf("agent %s on %s (iptables %s): log lacks %q:\n%s", p.Name, n.Name, mode, want, logs)
			}
			if datapath := regexp.MustCompile(`"Datapath" .*backend="` + proxyMode + `"`); !datapath.Match(logs) {
				t.Errorf("agent %s on %s (kube-proxy in %s mode): log lacks %s:\n%s", p.Name, n.Name, proxyMode, datapath, logs)
			}
		}
		if !found {
			t.Errorf("no agent Pod on %s says %q", n.Name, want)
		}
	}

	eventually(t, ctx, "npl-lbsync Ready", func(ctx context.Context) error {
		deps, err := client.AppsV1().Deployments(releaseNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(deps.Items) != 1 {
			return fmt.Errorf("deployments: %v (%d)", err, len(deps.Items))
		}
		if deps.Items[0].Status.ReadyReplicas != 1 {
			return fmt.Errorf("%d ready", deps.Items[0].Status.ReadyReplicas)
		}
		pods, err := client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: metav1.FormatLabelSelector(deps.Items[0].Spec.Selector)})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if podutils.IsPodReady(&p) {
				s.lbsyncPod = p.Name
				return nil
			}
		}
		return fmt.Errorf("no ready Pod")
	})

	// The user's workload.
	ns := workloadNS
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, workloadDeployment(ns, "web", tag), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, loadBalancerService(ns, "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Every Pod annotated with one node port on its own node.
	members := map[string]string{} // nodeIP:nodePort -> Pod name
	var webPod string
	eventually(t, ctx, "3 ready web Pods, each annotated with a node port on its node", func(ctx context.Context) error {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, p := range pods.Items {
			if !podutils.IsPodReady(&p) || p.DeletionTimestamp != nil {
				continue
			}
			entries, err := contract.Parse(p.Annotations[contract.PodKey])
			if err != nil || len(entries) != 1 {
				return fmt.Errorf("pod %s: annotation %q (%v)", p.Name, p.Annotations[contract.PodKey], err)
			}
			if len(p.Status.ContainerStatuses) != 1 || !strings.HasPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://") {
				return fmt.Errorf("pod %s: container %+v is not containerd's", p.Name, p.Status.ContainerStatuses)
			}
			e := entries[0]
			if e.NodeIP != p.Status.HostIP || e.PodPort != 8080 || e.Protocol != contract.ProtocolTCP {
				return fmt.Errorf("pod %s on %s: entry %+v", p.Name, p.Status.HostIP, e)
			}
			got[net.JoinHostPort(e.NodeIP, strconv.Itoa(e.NodePort))] = p.Name
		}
		if len(got) != 3 {
			return fmt.Errorf("%d annotated ready Pods: %v", len(got), got)
		}
		members = got
		for _, name := range got {
			webPod = name
		}
		return nil
	})

	// HAProxy on the edge serves exactly those members on a VIP, the one in
	// the Service's status.
	var vip string
	eventually(t, ctx, "HAProxy's members are the Pods' node ports, on the VIP of the Service's status", func(ctx context.Context) error {
		have, vips, err := s.edgeMembers(ns, "web")
		if err != nil {
			return err
		}
		if want := slices.Sorted(maps.Keys(members)); !slices.Equal(have, want) {
			return fmt.Errorf("members %v; want %v", have, want)
		}
		if len(vips) != 1 || !netipIn(vips[0], vipRange) {
			return fmt.Errorf("VIPs %v; want one from %s", vips, vipRange)
		}
		if vip, err = s.vipOf(ctx, ns, "web"); err != nil || vip != vips[0] {
			return fmt.Errorf("Service status VIP %q (%v); want the VIP %s", vip, err, vips[0])
		}
		return s.waitServed(ctx, ns, "web", 3)
	})
	// Through the VIP, from outside the nodes, every Pod answers.
	answered := map[string]int{}
	for range 3 * len(members) {
		pod, err := get(ctx, net.JoinHostPort(vip, "80"))
		if err != nil {
			t.Fatalf("GET through the VIP %s: %v", vip, err)
		}
		answered[pod]++
	}
	t.Logf("through the VIP %s: %v", vip, answered)
	for _, name := range members {
		if pod := ns + "/" + name; answered[pod] == 0 {
			t.Errorf("%s never answered through the VIP %s (answers: %v)", pod, vip, answered)
		}
	}
	s.tlsIngress(t, members)

	// Least privilege in operation, with the Pods' own tokens.
	checkLeastPrivilege(t, ctx, c, agentPod, s.lbsyncPod, ns, webPod)

	// From outside the nodes (the test's namespace, across the bridge), each
	// member answers with the name of its own Pod.
	httpc := &http.Client{Timeout: 3 * time.Second}
	for addr, pod := range members {
		resp, err := httpc.Get("http://" + addr + "/")
		if err != nil {
			t.Errorf("GET %s (pod %s): %v", addr, pod, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != podreply.Body(pod) || resp.Header.Get(podreply.Header) != podreply.HeaderValue(ns, pod) {
			t.Errorf("GET %s: %q from %q; want pod %s", addr, body, resp.Header.Get(podreply.Header), pod)
		}
	}
}

// loadBalancerService is a LoadBalancer Service of npl's class in front of
// app's Pods.
func loadBalancerService(ns, app string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr.To("npl.io/lb"),
			Selector:          map[string]string{"app": app},
			Ports:             []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// workloadPreStop is how long a deleted workload Pod keeps serving, a
// preStop sleep, while npl-lbsync drains its member: what users give Pods
// behind a load balancer (README: Zero-downtime rollouts).
const workloadPreStop = 2

// workloadDeployment is app, 3 replicas of the workload image answering on
// port 8080, each Pod serving workloadPreStop seconds once deleted.
func workloadDeployment(ns, app, tag string) *appsv1.Deployment {
	labels := map[string]string{"app": app}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](workloadPreStop + 3),
					Containers: []corev1.Container{{
						Name:            "web",
						Lifecycle:       &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: workloadPreStop}}},
						Image:           images.Ref(images.Workload, tag),
						ImagePullPolicy: corev1.PullNever,
						Env:             []corev1.EnvVar{{Name: "TCP_PORTS", Value: "8080"}, fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace")},
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
}

// imageTag is the tag of the images the nodes imported.
func imageTag(t testing.TB, c *cluster.Cluster) string {
	t.Helper()
	ref, err := images.TagOf(filepath.Join(c.ImagesDir(), images.Agent+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	_, tag, _ := cutLast(ref, ":")
	return tag
}
