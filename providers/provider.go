// Package providers holds the Provider interface that makes a load balancer
// match an lbmodel.LoadBalancer, the Validated wrapper that runs the model's
// one check before every provider call, and what a provider's configuration
// section decodes into. The providers themselves are its subpackages
// (avi, bigip, haproxy, mock), opened by providers/registry. It imports
// nothing from lbsync or agent: data flows one way, objects -> model ->
// provider.
package providers

import (
	"context"
	"net/netip"

	"github.com/nodeportlocal/npl/lbmodel"
)

// Status is what Ensure reports about a load balancer it applied.
type Status struct {
	// VIPs are the addresses to write into the Service's status.
	VIPs []string
	// Warnings say what of the model the load balancer does not serve
	// while it serves the rest (HAProxy has no UDP listeners, say). The
	// controller reports them in a Warning Event and in the condition.
	Warnings []string
}

// Provider makes a load balancer match the model. A provider owns only the
// objects tagged with its cluster name, computes its own minimal diff (no
// write when nothing changed) and is safe to call again after any failure.
// It never deletes members because of an error.
type Provider interface {
	// Ensure creates or updates everything for lb so that it matches exactly.
	// lb has passed lbmodel.Normalize (the registry opens every provider behind
	// Validated): a provider checks only what its own API requires, never
	// the rules of the model again.
	Ensure(ctx context.Context, lb *lbmodel.LoadBalancer) (Status, error)
	// Delete removes everything created for the load balancer name of the
	// given kind (L4 or empty, or L7). The kind is given, not guessed from
	// the name, because the objects of an L7 load balancer differ from an
	// L4 one's and names cannot tell them apart for every owner (an
	// Ingress today, Gateways later); a parameter rather than a field of a
	// struct makes every caller say it. The caller knows it: from the
	// object it releases, or from List. Deleting something that does not
	// exist is not an error.
	Delete(ctx context.Context, name string, kind lbmodel.Kind) error
	// List returns every load balancer of this cluster with its actual pools,
	// each once. A provider that serves each through several load balancers
	// (the haproxy provider's edges) that disagree lists every member they
	// do not serve alike twice, enabled and disabled: no model equals such a
	// pool, so a reader that compares (nplctl pools) sees drift. Readers must
	// not deduplicate the actual members.
	List(ctx context.Context) ([]lbmodel.LoadBalancer, error)
}

// Common is the part of npl-lbsync's configuration every provider sees.
type Common struct {
	// ClusterName prefixes every object name and marks ownership.
	ClusterName string
	// VIPPool holds the ranges to take VIPs from, for providers that do not
	// allocate them themselves.
	VIPPool []netip.Prefix
}

// Config is a provider's decoded and validated configuration section.
type Config interface {
	// Open builds the provider, connecting to the load balancer if needed.
	Open(ctx context.Context) (Provider, error)
}

// ParseFunc decodes a provider's configuration section strictly (unknown keys
// are errors), checks it (named files exist), and returns it.
type ParseFunc func(common Common, section []byte) (Config, error)
