package realnodes

import (
	"context"
	"encoding/json"
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
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/mock"
	"github.com/nodeportlocal/npl/test/harness/cluster"
	"github.com/nodeportlocal/npl/test/harness/images"
	"github.com/nodeportlocal/npl/test/harness/podreply"
)

const (
	releaseNamespace = "npl-system"
	releaseName      = "npl"
	// vipRange is where the mock provider takes VIPs from.
	vipRange = "198.18.200.0/28"
	// lbsyncMetricsPort is the chart's lbsync.metricsPort, where the mock
	// provider serves its state.
	lbsyncMetricsPort = 9103
)

// TestRealNodes_theChartFromHelmInstallToHelmUninstall is the chart's life
// as users live it, on three real nodes (kubelet, containerd, kube-proxy, CNI
// bridge) sharing one cluster per kube-proxy mode: the first hour (`helm
// install` with the mock provider, a 3-replica Deployment behind a
// LoadBalancer Service), then day two (the agent's rolling update to a new
// image tag, kube-proxy restarted, `helm upgrade` to another port range, the
// NodePort contrast, a node drained and deleted) and `helm uninstall`. A
// step that fails leaves the later ones to run on what is left, except the
// install, without which nothing follows.
//
// It runs once with kube-proxy in iptables mode and once in nftables mode:
// the agent picks the matching datapath (--datapath auto) in each.
func TestRealNodes_theChartFromHelmInstallToHelmUninstall(t *testing.T) {
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run("kube-proxy "+mode, func(t *testing.T) {
			c := startRealCluster(t, cluster.Options{Nodes: 3, KubeProxyMode: mode})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			s := &story{mode: mode, c: c, off: map[string]bool{}}
			s.client = s.c.Client()
			if !s.step(t, ctx, "helm install feeds the mock load balancer and every member reaches its Pod", s.helmInstallFeedsTheLoadBalancer) {
				return
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
	// lbsyncIP and lbsyncPod are the Pod IP and name of npl-lbsync's ready
	// replica, where the mock provider's state is served.
	lbsyncIP, lbsyncPod string
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
		"clusterName": "real-nodes",
		"vipPool":     []any{vipRange},
		"lbsync":      map[string]any{"replicas": 1, "image": map[string]any{"tag": tag}},
		// A short drift check, so that a repair shows within seconds.
		"agent":    map[string]any{"image": map[string]any{"tag": tag}, "datapathCheckInterval": datapathCheckInterval.String()},
		"provider": map[string]any{"name": "mock"},
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
				s.lbsyncIP, s.lbsyncPod = p.Status.PodIP, p.Name
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

	// The load balancer has exactly those members and a VIP, in the Service
	// status too.
	eventually(t, ctx, "the load balancer's members are the Pods' node ports", func(ctx context.Context) error {
		st, err := mockState(ctx, s.lbsyncIP)
		if err != nil {
			return err
		}
		lb := findLB(st, ns+"/web")
		if lb == nil {
			return fmt.Errorf("no load balancer for %s/web in %d", ns, len(st.LoadBalancers))
		}
		if len(lb.Listeners) != 1 || lb.Listeners[0].Port != 80 {
			return fmt.Errorf("listeners %+v", lb.Listeners)
		}
		var have []string
		for _, m := range lb.Listeners[0].Pool.Members {
			if m.Enabled {
				have = append(have, net.JoinHostPort(m.IP, strconv.Itoa(int(m.Port))))
			}
		}
		slices.Sort(have)
		if want := slices.Sorted(maps.Keys(members)); !slices.Equal(have, want) {
			return fmt.Errorf("members %v; want %v", have, want)
		}
		if len(lb.VIPs) != 1 || !netipIn(lb.VIPs[0], vipRange) {
			return fmt.Errorf("VIPs %v; want one from %s", lb.VIPs, vipRange)
		}
		s, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ing := s.Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != lb.VIPs[0] {
			return fmt.Errorf("Service status %+v; want the VIP %s", ing, lb.VIPs[0])
		}
		return nil
	})

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

// workloadDeployment is app, 3 replicas of the workload image answering on
// port 8080.
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
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name:            "web",
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

// mockState reads the mock provider's state from npl-lbsync's metrics port.
func mockState(ctx context.Context, podIP string) (*mock.State, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(podIP, strconv.Itoa(lbsyncMetricsPort))+mock.StatePath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", mock.StatePath, resp.Status)
	}
	var st mock.State
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

func findLB(st *mock.State, service string) *lbmodel.LoadBalancer {
	for i := range st.LoadBalancers {
		if st.LoadBalancers[i].Service == service {
			return &st.LoadBalancers[i]
		}
	}
	return nil
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
