// Package charts holds npl's Helm chart (charts/npl) and gives Go code the
// files of it that Go needs, embedded, so that each has one copy: the
// LoadBalancerPolicy CRD, which the chart installs and the tests install
// from here.
package charts

import _ "embed" // the CRD below

// LoadBalancerPolicyCRD is the CustomResourceDefinition of
// LoadBalancerPolicy (npl.io/v1alpha1) as the chart installs it.
//
//go:embed npl/files/npl.io_loadbalancerpolicies.yaml
var LoadBalancerPolicyCRD []byte
