// Package gatewaycrds finds the Gateway API CRDs that npl is built against:
// the standard channel of the sigs.k8s.io/gateway-api module go.mod pins,
// read from the Go module cache. The tests install them from here, and
// `make chart` packages them into the chart from here, so the CRDs a user
// gets are always those of the Go types npl-lbsync is compiled with, and no
// copy of them lives in this repository.
package gatewaycrds

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Module is the Go module whose CRDs these are.
const Module = "sigs.k8s.io/gateway-api"

// File is one CRD manifest.
type File struct {
	// Name is the file's base name in the module, such as
	// gateway.networking.k8s.io_gateways.yaml.
	Name string
	Data []byte
}

// Standard returns the standard-channel CRD manifests of the pinned module,
// sorted by name, without the module's admission policy (a
// ValidatingAdmissionPolicy, not a CRD). It runs `go mod download` from the
// current directory, which must be inside npl's module; the download fetches
// the module when the cache lacks it.
func Standard(ctx context.Context) ([]File, error) {
	dir, err := moduleDir(ctx)
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, "config", "crd", "standard", "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no standard CRDs under %s", dir)
	}
	slices.Sort(paths)
	var files []File
	for _, p := range paths {
		if strings.Contains(filepath.Base(p), "_vap_") {
			continue
		}
		f, err := read(p)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// Experimental returns the experimental-channel CRD manifests of the
// pinned module named (base names, such as
// gateway.networking.x-k8s.io_xbackendtrafficpolicies.yaml), as Standard
// finds the module: the tests install those of the experimental kinds
// npl-lbsync serves.
func Experimental(ctx context.Context, names ...string) ([]File, error) {
	dir, err := moduleDir(ctx)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, n := range names {
		f, err := read(filepath.Join(dir, "config", "crd", "experimental", n))
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// moduleDir returns the directory of the pinned module in the module
// cache (go mod download).
func moduleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", Module).Output()
	if err != nil {
		return "", fmt.Errorf("locate %s in the module cache (go mod download): %w", Module, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		why := mod.Error
		if why == "" {
			why = "no directory"
		}
		return "", fmt.Errorf("locate %s in the module cache: %s", Module, why)
	}
	return mod.Dir, nil
}

func read(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", path, err)
	}
	return File{Name: filepath.Base(path), Data: b}, nil
}
