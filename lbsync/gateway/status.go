package gateway

import (
	"cmp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Programmed is what the controller learnt applying a Gateway's model.
type Programmed struct {
	// OK is true when the provider applied the model.
	OK bool
	// Reason and Message say why not (Invalid, Pending, ...).
	Reason  string
	Message string
	// VIPs are the addresses the load balancer serves on.
	VIPs []string
}

// GatewayStatus is the status of gw after its build res and its apply p.
// Conditions have no lastTransitionTime; MergeConditions sets it.
func GatewayStatus(gw *gatewayv1.Gateway, res Result, p Programmed) gatewayv1.GatewayStatus {
	gen := gw.Generation
	st := gatewayv1.GatewayStatus{Listeners: []gatewayv1.ListenerStatus{}}
	prog := metav1.Condition{Type: string(gatewayv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue,
		Reason: string(gatewayv1.GatewayReasonProgrammed), Message: "Programmed", ObservedGeneration: gen}
	switch {
	case res.LB == nil:
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, string(gatewayv1.GatewayReasonInvalid), "nothing to serve: no listener can be programmed"
		if res.Accepted.Status != metav1.ConditionTrue {
			prog.Message = "the Gateway is not accepted"
		}
	case !p.OK:
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, p.Reason, p.Message
	case len(p.VIPs) == 0:
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, string(gatewayv1.GatewayReasonAddressNotAssigned), "the load balancer has no address yet"
	}
	st.Conditions = []metav1.Condition{res.Accepted, prog}
	if res.InsecureFrontend != "" {
		st.Conditions = append(st.Conditions, metav1.Condition{
			Type: string(gatewayv1.GatewayConditionInsecureFrontendValidationMode), Status: metav1.ConditionTrue,
			Reason:             string(gatewayv1.GatewayReasonConfigurationChanged),
			Message:            "spec.tls.frontend lets clients without a valid certificate in (AllowInsecureFallback): " + res.InsecureFrontend,
			ObservedGeneration: gen})
	}
	if prog.Status == metav1.ConditionTrue {
		ip := gatewayv1.IPAddressType
		for _, v := range p.VIPs {
			st.Addresses = append(st.Addresses, gatewayv1.GatewayStatusAddress{Type: &ip, Value: v})
		}
	}
	for _, l := range res.Listeners {
		ls := *l.Status.DeepCopy()
		c := metav1.Condition{Type: string(gatewayv1.ListenerConditionProgrammed), Status: metav1.ConditionTrue,
			Reason: string(gatewayv1.ListenerReasonProgrammed), Message: "Programmed", ObservedGeneration: gen}
		switch {
		case !l.Served:
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gatewayv1.ListenerReasonInvalid), l.Why
		case prog.Status != metav1.ConditionTrue:
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gatewayv1.ListenerReasonPending), prog.Message
		}
		ls.Conditions = append(ls.Conditions, c)
		st.Listeners = append(st.Listeners, ls)
	}
	return st
}

// MergeGatewayStatus returns desired with the lastTransitionTimes of
// current kept where a condition did not change.
func MergeGatewayStatus(current, desired gatewayv1.GatewayStatus, now metav1.Time) gatewayv1.GatewayStatus {
	out := *desired.DeepCopy()
	out.Conditions = MergeConditions(current.Conditions, desired.Conditions, now, true)
	for i := range out.Listeners {
		var have []metav1.Condition
		if j := slices.IndexFunc(current.Listeners, func(l gatewayv1.ListenerStatus) bool { return l.Name == out.Listeners[i].Name }); j >= 0 {
			have = current.Listeners[j].Conditions
		}
		out.Listeners[i].Conditions = MergeConditions(have, desired.Listeners[i].Conditions, now, true)
	}
	return out
}

// RouteParents returns the route's status.parents with the entries of
// npl-lbsync for the Gateway namespace/name replaced by desired (none to
// remove them); the entries of other controllers and of other Gateways
// stay as they are. Conditions keep their lastTransitionTime when
// unchanged.
func RouteParents(current []gatewayv1.RouteParentStatus, namespace, name, routeNamespace string, desired []gatewayv1.RouteParentStatus, now metav1.Time) []gatewayv1.RouteParentStatus {
	out := make([]gatewayv1.RouteParentStatus, 0, len(current)+len(desired))
	for _, p := range current {
		if p.ControllerName == ControllerName && refNames(p.ParentRef, routeNamespace, namespace, name) {
			continue
		}
		out = append(out, p)
	}
	for _, d := range desired {
		d = *d.DeepCopy()
		var have []metav1.Condition
		if i := slices.IndexFunc(current, func(p gatewayv1.RouteParentStatus) bool {
			return p.ControllerName == ControllerName && sameRef(p.ParentRef, d.ParentRef)
		}); i >= 0 {
			have = current[i].Conditions
		}
		d.Conditions = MergeConditions(have, d.Conditions, now, true)
		out = append(out, d)
	}
	return out
}

func refNames(ref gatewayv1.ParentReference, routeNamespace, namespace, name string) bool {
	ns := routeNamespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return (ref.Kind == nil || *ref.Kind == KindGateway) && ns == namespace && string(ref.Name) == name
}

func sameRef(a, b gatewayv1.ParentReference) bool {
	a, b = parentRefWithDefaults(a), parentRefWithDefaults(b)
	return *a.Group == *b.Group && *a.Kind == *b.Kind && string(a.Name) == string(b.Name) &&
		ptrEq(a.Namespace, b.Namespace) && ptrEq(a.SectionName, b.SectionName) && ptrEq(a.Port, b.Port)
}

func ptrEq[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Backends returns the Services a route (of any kind npl-lbsync reads)
// names in its backendRefs (of kind Service), without duplicates, sorted;
// whether the reference is allowed is Build's to decide.
func Backends(obj any) []ServiceRef {
	rt := routeOf(obj)
	if rt == nil {
		return nil
	}
	seen := map[ServiceRef]bool{}
	for _, refs := range rt.backendRefs {
		for _, br := range refs {
			if r := refOf(br.Group, br.Kind, br.Namespace, br.Name, KindService, rt.meta.Namespace); r.is(KindService) {
				seen[ServiceRef{Namespace: r.namespace, Name: r.name}] = true
			}
		}
	}
	out := make([]ServiceRef, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	slices.SortFunc(out, compareRefs)
	return out
}

// Gateways returns the Gateways ("namespace/name") a route's parentRefs
// name (a route of any kind npl-lbsync reads), without duplicates.
func Gateways(obj any) []string {
	rt := routeOf(obj)
	if rt == nil {
		return nil
	}
	var out []string
	for _, ref := range rt.parents {
		ns, name, ok := gatewayOf(rt.meta.Namespace, ref)
		if k := ns + "/" + name; ok && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func compareRefs(a, b ServiceRef) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
