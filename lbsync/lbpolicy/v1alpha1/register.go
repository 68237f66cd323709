package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of npl's own resources.
const GroupName = "npl.io"

// SchemeGroupVersion is the group and version of these types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource is the resource of LoadBalancerPolicies.
var Resource = SchemeGroupVersion.WithResource("loadbalancerpolicies")

// Kind is the kind of a LoadBalancerPolicy.
const Kind = "LoadBalancerPolicy"

// CRDName is the name of the CustomResourceDefinition.
const CRDName = "loadbalancerpolicies." + GroupName

// The kinds a policy targets, with their groups.
const (
	KindService  = "Service"
	KindGateway  = "Gateway"
	GroupCore    = ""
	GroupGateway = "gateway.networking.k8s.io"
)

// ControllerName is npl-lbsync's name in the status entries it writes,
// the prefix of each installation's (ControllerNameOf).
const ControllerName = "npl.io/lbsync"

// ControllerNameOf is the controllerName of the status entries the
// installation of clusterName writes: ControllerName/<clusterName>. Two
// installations on one cluster each keep their own entry of a target, as
// two Gateway API controllers do; with one name, one wrote Accepted where
// the other wrote TargetNotFound, for ever.
func ControllerNameOf(clusterName string) string { return ControllerName + "/" + clusterName }

// ConditionAccepted is the condition of a status entry, and its reasons
// (those of GEP-713).
const (
	ConditionAccepted    = "Accepted"
	ReasonAccepted       = "Accepted"
	ReasonConflicted     = "Conflicted"
	ReasonInvalid        = "Invalid"
	ReasonTargetNotFound = "TargetNotFound"
)

var (
	// SchemeBuilder registers the types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &LoadBalancerPolicy{}, &LoadBalancerPolicyList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
