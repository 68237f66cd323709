package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeportlocal/npl/agent/controller"
	"github.com/nodeportlocal/npl/agent/portalloc"
	"github.com/nodeportlocal/npl/agent/portalloc/portalloctest"
	"github.com/nodeportlocal/npl/contract"
)

// TestRestore_programsAColdStartInOneDatapathUpdate: Pods that are there
// when the agent starts, with no annotation yet, get their node ports
// before the workers run, in one datapath update for all of them; the
// workers then only write the annotations.
func TestRestore_programsAColdStartInOneDatapathUpdate(t *testing.T) {
	const pods, ports = 5, 2
	objects := []runtime.Object{testNode(),
		service("web", "web", svcPort("a", corev1.ProtocolTCP, 8080), svcPort("b", corev1.ProtocolTCP, 8081))}
	for i := range pods {
		ip := fmt.Sprintf("198.19.0.%d", 10+i)
		objects = append(objects, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "ns", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
		})
	}
	client := fake.NewClientset(objects...)
	rng := portalloc.Range{Start: 61000, End: 61099}
	alloc, err := portalloc.New(rng, portalloctest.NewReserver())
	if err != nil {
		t.Fatal(err)
	}
	dp, ctx := runController(t, controller.Config{PortRange: rng}, client, alloc)

	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range list.Items {
			entries, err := contract.Parse(p.Annotations[contract.PodKey])
			if err != nil || len(entries) != ports {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("every Pod annotated with %d entries: %v", ports, err)
	}
	dp.mu.Lock()
	defer dp.mu.Unlock()
	if dp.gen != 1 || len(dp.last.Mappings) != pods*ports {
		t.Errorf("cold start: %d datapath updates, the last with %d mappings; want 1 update with %d", dp.gen, len(dp.last.Mappings), pods*ports)
	}
}
