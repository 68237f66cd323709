package cluster

import (
	"bytes"
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/nodeportlocal/npl/charts"
	"github.com/nodeportlocal/npl/internal/gatewaycrds"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallGatewayAPI creates (or updates) the Gateway API standard-channel
// CRDs in the cluster and waits until the apiserver serves them.
func (c *Cluster) InstallGatewayAPI(ctx context.Context) error {
	manifests, err := gatewaycrds.Standard(ctx)
	if err != nil {
		return err
	}
	return c.installFiles(ctx, manifests)
}

// installFiles installs the CRDs of manifests (InstallCRDs).
func (c *Cluster) installFiles(ctx context.Context, manifests []gatewaycrds.File) error {
	docs := make([][]byte, 0, len(manifests))
	for _, m := range manifests {
		docs = append(docs, m.Data)
	}
	return c.InstallCRDs(ctx, docs...)
}

// InstallExperimentalGatewayCRDs creates (or updates) the named CRDs of the
// Gateway API experimental channel (gatewaycrds.Experimental) and waits
// until the apiserver serves them.
func (c *Cluster) InstallExperimentalGatewayCRDs(ctx context.Context, names ...string) error {
	manifests, err := gatewaycrds.Experimental(ctx, names...)
	if err != nil {
		return err
	}
	return c.installFiles(ctx, manifests)
}

// InstallLoadBalancerPolicyCRD creates (or updates) the LoadBalancerPolicy
// CRD the chart installs and waits until the apiserver serves it.
func (c *Cluster) InstallLoadBalancerPolicyCRD(ctx context.Context) error {
	return c.InstallCRDs(ctx, charts.LoadBalancerPolicyCRD)
}

// InstallCRDs creates (or updates) the CRDs of manifests (one each) and
// waits until the apiserver serves them.
func (c *Cluster) InstallCRDs(ctx context.Context, manifests ...[]byte) error {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	crds := dyn.Resource(crdResource)
	var names []string
	for _, m := range manifests {
		obj := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(m), 4096).Decode(&obj.Object); err != nil {
			return fmt.Errorf("decode a CRD: %w", err)
		}
		names = append(names, obj.GetName())
		cur, err := crds.Get(ctx, obj.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = crds.Create(ctx, obj, metav1.CreateOptions{})
		case err == nil:
			obj.SetResourceVersion(cur.GetResourceVersion())
			_, err = crds.Update(ctx, obj, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", obj.GetName(), err)
		}
	}
	return c.WaitCRDsEstablished(ctx, names...)
}

// DeleteCRDs deletes the named CRDs, and with them their objects, and
// waits until they are gone.
func (c *Cluster) DeleteCRDs(ctx context.Context, names ...string) error {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	crds := dyn.Resource(crdResource)
	for _, n := range names {
		if err := crds.Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete CRD %s: %w", n, err)
		}
	}
	return pollUntil(ctx, 200*time.Millisecond, func() (bool, error) {
		for _, n := range names {
			if _, err := crds.Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// WaitCRDsEstablished waits until the apiserver serves each named CRD: its
// Established condition is True.
func (c *Cluster) WaitCRDsEstablished(ctx context.Context, names ...string) error {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	crds := dyn.Resource(crdResource)
	return pollUntil(ctx, 200*time.Millisecond, func() (bool, error) {
		for _, n := range names {
			u, err := crds.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if !established(u) {
				return false, nil
			}
		}
		return true, nil
	})
}

// established reports whether the apiserver serves a CRD: its Established
// condition is True.
func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
