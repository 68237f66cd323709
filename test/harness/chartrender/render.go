// Package chartrender renders the npl Helm chart with the Helm SDK, as `helm
// install --dry-run` does, into its manifests. The chart tests check them;
// the end-to-end stack applies the chart's ServiceAccounts and RBAC from
// them, so that npl's binaries run with exactly the chart's grants.
package chartrender

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// Doc is one manifest of a rendered chart.
type Doc struct {
	// Template is the chart file it came from.
	Template string
	// YAML is the manifest.
	YAML string
}

type loaded struct {
	once  sync.Once
	chart *chart.Chart
	err   error
}

var charts sync.Map // directory -> *loaded

// Load loads the chart in dir, once per process.
func Load(dir string) (*chart.Chart, error) {
	v, _ := charts.LoadOrStore(dir, &loaded{})
	l := v.(*loaded)
	l.once.Do(func() {
		l.chart, l.err = loader.Load(dir)
		if l.err != nil {
			l.err = fmt.Errorf("load chart %s: %w", dir, l.err)
		}
	})
	return l.chart, l.err
}

// Render renders ch with vals (validated against the chart's schema) as
// release name in namespace, a first install, with eng: engine.New gives one
// whose lookup reads a cluster, as `helm install` does; the zero Engine's
// lookup finds nothing, as with `helm template`. It returns the values the
// templates saw and the non-empty YAML manifests, sorted by template.
func Render(eng engine.Engine, ch *chart.Chart, vals map[string]any, name, namespace string) (chartutil.Values, []Doc, error) {
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: name, Namespace: namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, nil, err
	}
	files, err := eng.Render(ch, top)
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var docs []Doc
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range docSeparator.Split(files[name], -1) {
			if !isEmptyDoc(doc) {
				docs = append(docs, Doc{Template: name, YAML: doc})
			}
		}
	}
	return top["Values"].(chartutil.Values), docs, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

func isEmptyDoc(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}
