package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// GatewayAPIModule is the module whose standard-channel CRDs
// InstallGatewayAPI installs: the version go.mod pins.
const GatewayAPIModule = "sigs.k8s.io/gateway-api"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// GatewayAPICRDs returns the standard-channel CRD manifests of the Gateway
// API module pinned in go.mod, read from the module cache (go mod download
// fetches it when missing), so the CRDs the tests install are always those
// of the Go types npl-lbsync is built with.
func GatewayAPICRDs(ctx context.Context) ([][]byte, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", GatewayAPIModule).Output()
	if err != nil {
		return nil, fmt.Errorf("locate %s in the module cache (go mod download): %w", GatewayAPIModule, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return nil, fmt.Errorf("locate %s in the module cache: %s", GatewayAPIModule, cmpOr(mod.Error, "no directory"))
	}
	files, err := filepath.Glob(filepath.Join(mod.Dir, "config", "crd", "standard", "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no standard CRDs under %s", mod.Dir)
	}
	slices.Sort(files)
	var crds [][]byte
	for _, f := range files {
		if strings.Contains(filepath.Base(f), "_vap_") { // an admission policy, not a CRD
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crds = append(crds, b)
	}
	return crds, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// InstallGatewayAPI creates (or updates) the Gateway API standard-channel
// CRDs in the cluster and waits until the apiserver serves them.
func (c *Cluster) InstallGatewayAPI(ctx context.Context) error {
	manifests, err := GatewayAPICRDs(ctx)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	crds := dyn.Resource(crdResource)
	var names []string
	for _, m := range manifests {
		obj := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(m), 4096).Decode(&obj.Object); err != nil {
			return fmt.Errorf("decode a Gateway API CRD: %w", err)
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
