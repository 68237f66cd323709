package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
)

func TestRegisteredIn(t *testing.T) {
	settings := Settings{ClusterName: "c", ServiceType: builder.ServiceTypeNodePortLocal}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}
	pod := func(ann string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: contract.RegisteredReadinessGate}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.0.5", Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionFalse}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}},
		}
		if ann != "" {
			p.Annotations = map[string]string{contract.PodKey: ann}
		}
		return p
	}
	const ann = `[{"podPort":8080,"nodeIP":"198.18.0.10","nodePort":61000,"protocol":"tcp","ipFamily":"IPv4"}]`
	pool := lbmodel.PoolName(lbmodel.LoadBalancerName("c", "ns", "web"), lbmodel.TCP, 80)
	lb := func(members ...lbmodel.Member) *lbmodel.LoadBalancer {
		return &lbmodel.LoadBalancer{Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP,
			Pool: lbmodel.Pool{Name: pool, Members: members}}}}
	}
	member := lbmodel.Member{IP: "198.18.0.10", Port: 61000, Enabled: true}
	cases := []struct {
		name     string
		settings Settings
		pod      *corev1.Pod
		lb       *lbmodel.LoadBalancer
		want     bool
	}{
		{"its member is applied", settings, pod(ann), lb(member), true},
		{"its member is missing", settings, pod(ann), lb(lbmodel.Member{IP: "198.18.0.11", Port: 61000, Enabled: true}), false},
		{"its member is disabled", settings, pod(ann), lb(lbmodel.Member{IP: "198.18.0.10", Port: 61000}), false},
		{"no annotation yet", settings, pod(""), lb(), false},
		{"NodePort mode: members are nodes", Settings{ClusterName: "c", ServiceType: builder.ServiceTypeNodePort}, pod(""), lb(), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := registeredIn(tc.settings, svc, tc.pod, tc.lb); got != tc.want {
				t.Errorf("registeredIn = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestUpdateRegistrations_patchesAtOnce: the conditions of a Service's gated
// Pods are patched side by side, not one after another (each patch waits for
// the API server, and the last Pod would wait for all), and each Pod gets
// the condition its members say. client-go's fake clientset runs one action
// at a time, so an HTTP server stands in for the API server.
func TestUpdateRegistrations_patchesAtOnce(t *testing.T) {
	const class = "npl.io/test"
	var mu sync.Mutex
	inFlight, most := 0, 0
	got := map[string]corev1.ConditionStatus{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, name, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/pods/")
		name, status := strings.CutSuffix(name, "/status")
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodPatch || !ok || !status {
			w.WriteHeader(http.StatusCreated) // the Events
			_, _ = io.WriteString(w, `{"kind":"Event","apiVersion":"v1"}`)
			return
		}
		var patch struct {
			Status struct{ Conditions []corev1.PodCondition }
		}
		if err := json.NewDecoder(r.Body).Decode(&patch); err != nil || len(patch.Status.Conditions) != 1 {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Code: http.StatusBadRequest, Message: fmt.Sprintf("patch %+v: %v", patch, err)})
			return
		}
		// Each patch waits, up to a second, for a second one to be on
		// its way: one at a time, none ever sees another.
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		got[name] = patch.Status.Conditions[0].Status
		mu.Unlock()
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			mu.Lock()
			n := most
			mu.Unlock()
			if n >= 2 {
				break
			}
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(&corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Settings{ClusterName: "c", ServiceType: builder.ServiceTypeNodePortLocal, Claim: claim.ClaimConfig{LoadBalancerClass: class}},
		client, failing{}, NewMetrics(prometheus.NewRegistry()))
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To(class), Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := c.store.Services.Add(svc); err != nil {
		t.Fatal(err)
	}
	pool := lbmodel.PoolName(lbmodel.LoadBalancerName("c", "ns", "web"), lbmodel.TCP, 80)
	lb := &lbmodel.LoadBalancer{Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: pool}}}}
	want := map[string]corev1.ConditionStatus{}
	for i := range 4 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "ns", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: contract.RegisteredReadinessGate}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("198.19.0.%d", 10+i), Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionFalse}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}},
		}
		want[pod.Name] = corev1.ConditionFalse
		if i < 3 {
			// Three are annotated and applied; the fourth has no
			// annotation yet.
			port := 61000 + i
			pod.Annotations = map[string]string{contract.PodKey: fmt.Sprintf(`[{"podPort":8080,"nodeIP":"198.18.0.10","nodePort":%d,"protocol":"tcp","ipFamily":"IPv4"}]`, port)}
			lb.Listeners[0].Pool.Members = append(lb.Listeners[0].Pool.Members, lbmodel.Member{IP: "198.18.0.10", Port: int32(port), Enabled: true})
			want[pod.Name] = corev1.ConditionTrue
		}
		if err := c.store.Pods.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.services.updateRegistrations(context.Background(), svc, lb); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Errorf("at most %d condition patch(es) at once, want them side by side", most)
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s patched to %v, want %v", contract.RegisteredReadinessGate, got, want)
	}
}
