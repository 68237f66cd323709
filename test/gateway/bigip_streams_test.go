package gateway

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

// TestLBSync_gatewayStreamsOnBIGIP: a Gateway's TCP and UDP listeners on
// the BIG-IP provider through go-bigip and the simulator: a TCPRoute with
// backends weighted 3:1 gives a tcp virtual server whose pool weighs its
// members by ratio (256/85, ratio-member), the UDP listener a udp virtual
// server; the Gateway is Programmed; a sync of nothing new writes nothing;
// the Gateway deleted, its objects go.
func TestLBSync_gatewayStreamsOnBIGIP(t *testing.T) {
	e := setup(t)
	b := e.startGatewayBed(t, "bigip", "gwbigs", "198.18.115.0/28")
	ctx, l, gw1, ns, className, name := b.ctx, b.l, b.gw1, b.ns, b.class, b.name
	sim := b.backend.(interface{ Sim() *bigipsim.Server }).Sim()
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(className),
		Listeners: []gatewayv1.Listener{
			{Name: "tcp", Port: 5000, Protocol: gatewayv1.TCPProtocolType},
			{Name: "udp", Port: 5300, Protocol: gatewayv1.UDPProtocolType},
		},
	}}
	if _, err := gw1.Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := func(svc string, weight int32) gatewayv1.BackendRef {
		p := gatewayv1.PortNumber(80)
		return gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: &p}, Weight: &weight}
	}
	parents := func(section string) gatewayv1.CommonRouteSpec {
		s := gatewayv1.SectionName(section)
		return gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw", SectionName: &s}}}
	}
	if _, err := gw1.TCPRoutes(ns).Create(ctx, &gatewayv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: gatewayv1.TCPRouteSpec{CommonRouteSpec: parents("tcp"), Rules: []gatewayv1.TCPRouteRule{{
			BackendRefs: []gatewayv1.BackendRef{ref("a", 3), ref("b", 1)}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	p := "/npl-" + name + "/"
	tcpV := p + lbmodel.ListenerName(lbName, lbmodel.TCP, 5000)
	udpV := p + lbmodel.ListenerName(lbName, lbmodel.UDP, 5300)
	ip0, ip1 := e.NodeIP(0), e.NodeIP(1)
	lbsyncbed.WaitFor(t, 60*time.Second, "the Gateway's virtuals on the BIG-IP", func() (bool, error) {
		st := sim.Dump()
		seen := fmt.Errorf("virtuals %+v, pools %+v", st.Virtuals, st.Pools)
		i := slices.IndexFunc(st.Virtuals, func(v bigipsim.Virtual) bool { return v.FullPath == tcpV })
		j := slices.IndexFunc(st.Virtuals, func(v bigipsim.Virtual) bool { return v.FullPath == udpV })
		k := slices.IndexFunc(st.Pools, func(pl bigipsim.Pool) bool { return pl.FullPath == tcpV })
		if i < 0 || j < 0 || k < 0 || st.Virtuals[i].IPProtocol != "tcp" || st.Virtuals[j].IPProtocol != "udp" ||
			st.Virtuals[i].Pool != tcpV || st.Virtuals[j].Pool != udpV {
			return false, seen
		}
		want := []bigipsim.Member{
			{FullPath: p + ip0 + ":61000", Address: ip0, Session: "user-enabled", State: "unchecked", Ratio: 256},
			{FullPath: p + ip1 + ":61001", Address: ip1, Session: "user-enabled", State: "unchecked", Ratio: 85},
		}
		return st.Pools[k].LoadBalancingMode == "ratio-member" && slices.Equal(st.Pools[k].Members, want), seen
	})
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway Programmed", func() (bool, error) {
		g, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
		return err == nil && hasCond(g.Status.Conditions, "Programmed", metav1.ConditionTrue, "Programmed"), fmt.Errorf("%+v", g.Status.Conditions)
	})
	e.SyncedAfter(t, "services", ns, "a", l)
	writes := sim.Writes()
	e.SyncedAfter(t, "services", ns, "b", l)
	if w := sim.Writes(); w != writes {
		t.Errorf("a sync of nothing new wrote %d times", w-writes)
	}
	if err := gw1.Gateways(ns).Delete(ctx, "gw", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway's objects deleted", func() (bool, error) {
		st := sim.Dump()
		return len(st.Virtuals)+len(st.Pools)+len(st.Policies) == 0, fmt.Errorf("%+v", st)
	})
}
