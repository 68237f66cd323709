// Package chartpkg packages the npl Helm chart for users: the chart as it is
// in the repository, plus the Gateway API CRDs npl-lbsync is built against
// (internal/gatewaycrds), which the chart installs only when the value
// gatewayAPI.installCRDs is true. The CRDs are added at packaging time from
// the pinned Go module, so the repository holds no copy of them.
package chartpkg

import (
	"context"
	"fmt"
	"path"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/nodeportlocal/npl/internal/gatewaycrds"
)

// CRDDir is the directory of the packaged chart that holds the Gateway API
// CRDs; the template gateway-api-crds.yaml renders every file in it.
const CRDDir = "gateway-api-crds"

// Load loads the chart in dir and adds the Gateway API CRDs to its files.
func Load(ctx context.Context, dir string) (*chart.Chart, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	crds, err := gatewaycrds.Standard(ctx)
	if err != nil {
		return nil, err
	}
	for _, f := range crds {
		ch.Files = append(ch.Files, &chart.File{Name: path.Join(CRDDir, f.Name), Data: f.Data})
	}
	return ch, nil
}

// Package writes the chart in dir, with the Gateway API CRDs, as
// <name>-<version>.tgz into outDir and returns the archive's path.
func Package(ctx context.Context, dir, outDir string) (string, error) {
	ch, err := Load(ctx, dir)
	if err != nil {
		return "", err
	}
	out, err := chartutil.Save(ch, outDir)
	if err != nil {
		return "", fmt.Errorf("package chart %s: %w", dir, err)
	}
	return out, nil
}
