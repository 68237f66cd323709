package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/providers"
)

// serving is a provider that applies every model on one VIP.
type serving struct{ failing }

func (serving) Ensure(context.Context, *lbmodel.LoadBalancer) (providers.Status, error) {
	return providers.Status{VIPs: []string{"198.18.0.9"}}, nil
}

// servicePatches returns the patches sent to Services, as
// "subresource: patch".
func servicePatches(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "services" {
			out = append(out, p.GetSubresource()+": "+string(p.GetPatch()))
		}
	}
	return out
}

// unclaimedService is shop/web, a LoadBalancer Service of class
// npl.io/lb that npl-lbsync has not claimed yet.
func unclaimedService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1", ResourceVersion: "5"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("npl.io/lb"),
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

// startServiceController starts a Controller of cluster c1 for the
// Services of class npl.io/lb on client, with provider p; it stops when
// the test ends.
func startServiceController(t *testing.T, client *fake.Clientset, serviceType string, p providers.Provider) (context.Context, *Controller) {
	t.Helper()
	c := New(Settings{ClusterName: "c1", ServiceType: serviceType, Claim: claim.ClaimConfig{LoadBalancerClass: "npl.io/lb"}},
		client, p, NewMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, c
}

// The first sync of a Service claims it and writes its status in one
// request to the status subresource (the API server keeps the metadata of
// a Service written through status): a cold start claiming many Services
// is bound by the client's rate of writes. A sync that has no status to
// write sends the claim alone.
func TestServiceSync_claimRidesWithTheStatus(t *testing.T) {
	svc := unclaimedService()
	client := fake.NewClientset(svc)
	ctx, c := startServiceController(t, client, builder.ServiceTypeNodePortLocal, serving{})
	key := serviceKey("shop", "web")
	if res := c.services.sync(ctx, key); res.state != syncDone {
		t.Fatalf("first sync: %+v", res)
	}
	patches := servicePatches(client)
	if len(patches) != 1 || !strings.HasPrefix(patches[0], "status: ") {
		t.Fatalf("first sync wrote %d patch(es), want one to status: %q", len(patches), patches)
	}
	for _, want := range []string{contract.ClaimedByKey, contract.ServiceEnabledKey, contract.CleanupFinalizer, `"resourceVersion":"5"`, `"ip":"198.18.0.9"`, contract.SyncedConditionType} {
		if !strings.Contains(patches[0], want) {
			t.Errorf("the one write lacks %s: %s", want, patches[0])
		}
	}

	// The claim record taken away by hand: the model and the status are
	// unchanged, so no status write carries the claim; it goes alone.
	client.ClearActions()
	written, err := client.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(written.Annotations, contract.ClaimedByKey)
	written.Annotations["test.npl.io/edited"] = "true" // the cache shows this update, not the first
	if _, err := client.CoreV1().Services("shop").Update(ctx, written, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		s, err := c.services.lister.Services("shop").Get("web")
		return err == nil && s.Annotations["test.npl.io/edited"] == "true", nil
	}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	if res := c.services.sync(ctx, key); res.state != syncDone {
		t.Fatalf("sync after the claim was removed: %+v", res)
	}
	patches = servicePatches(client)
	if len(patches) != 1 || !strings.HasPrefix(patches[0], ": ") || !strings.Contains(patches[0], contract.ClaimedByKey) {
		t.Fatalf("sync after the claim was removed wrote %q, want the claim alone", patches)
	}
}

// deletingDuringApply is a provider whose first Ensure sees the Service
// deleted meanwhile, and which records its deletes.
type deletingDuringApply struct {
	serving
	client  *fake.Clientset
	deleted []string
}

func (p *deletingDuringApply) Ensure(ctx context.Context, lb *lbmodel.LoadBalancer) (providers.Status, error) {
	if err := p.client.CoreV1().Services("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		return providers.Status{}, err
	}
	return p.serving.Ensure(ctx, lb)
}

func (p *deletingDuringApply) Delete(_ context.Context, name string, _ lbmodel.Kind) error {
	p.deleted = append(p.deleted, name)
	return nil
}

// A Service deleted between its first apply and the status write that
// claims it has no finalizer to wait on: the sync that finds it gone
// deletes the load balancer, rather than the next garbage collection.
func TestServiceSync_goneBeforeItsClaimDeletesItsLoadBalancer(t *testing.T) {
	client := fake.NewClientset(unclaimedService())
	p := &deletingDuringApply{client: client}
	ctx, c := startServiceController(t, client, "", p)
	key := serviceKey("shop", "web")
	if res := c.services.sync(ctx, key); res.state != syncRetry {
		t.Fatalf("the claim's write to a deleted Service: %+v, want a retry", res)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := c.services.lister.Services("shop").Get("web")
		return err != nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if res := c.services.sync(ctx, key); res.state != syncDone {
		t.Fatalf("sync of the gone Service: %+v", res)
	}
	if want := lbmodel.LoadBalancerName("c1", "shop", "web"); len(p.deleted) != 1 || p.deleted[0] != want {
		t.Errorf("deleted %q, want [%s]", p.deleted, want)
	}
	if res := c.services.sync(ctx, key); res.state != syncDone || len(p.deleted) != 1 {
		t.Errorf("a second sync of the gone Service: %+v, deletes %q", res, p.deleted)
	}
}

// A sync that reads the cache before it shows our last write, which
// claimed the Service, takes the claim as done: claiming again from the
// cache's older metadata would be a write, and its resourceVersion a
// conflict.
func TestServiceSync_ourUnseenClaimIsNotSentAgain(t *testing.T) {
	svc := unclaimedService()
	client := fake.NewClientset(svc)
	ctx, c := startServiceController(t, client, builder.ServiceTypeNodePortLocal, serving{})
	// What our write of the claim and status returned, at a
	// resourceVersion the cache has not shown.
	written := svc.DeepCopy()
	written.ResourceVersion = "6"
	written.Finalizers = []string{contract.CleanupFinalizer}
	written.Annotations = map[string]string{contract.ClaimedByKey: "c1", contract.ServiceEnabledKey: "true", contract.AutoAnnotatedKey: "true"}
	written.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.0.9"}}
	written.Status.Conditions = []metav1.Condition{{Type: contract.SyncedConditionType, Status: metav1.ConditionTrue,
		Reason: "Synced", Message: "1 listener(s)", LastTransitionTime: metav1.Now()}}
	c.writes.wrote(written)
	if res := c.services.sync(ctx, serviceKey("shop", "web")); res.state != syncDone {
		t.Fatalf("sync: %+v", res)
	}
	if patches := servicePatches(client); len(patches) != 0 {
		t.Errorf("a sync behind our own claim wrote %q, want nothing", patches)
	}
}
