// Package chart tests the Helm chart charts/npl, the Dockerfile and the
// iptables wrapper of the agent image. The chart is rendered with the Helm Go
// SDK (helm.sh/helm/v3: loader, chartutil, engine; values.schema.json is
// validated as `helm install` does); the rendered objects are checked as
// structures, the npl-lbsync configuration they carry is parsed by
// lbsync/config, and on the local cluster (test/harness/cluster) every object
// passes a server-side dry-run and the RBAC is checked with
// SubjectAccessReviews.
package chart

import (
	"testing"

	"github.com/nodeportlocal/npl/test/harness/cluster"
)

// TestMain runs the tests inside private namespaces, where the local cluster
// of the RBAC and dry-run tests can start; it needs root, like every test
// that uses the cluster.
func TestMain(m *testing.M) { cluster.RunMain(m) }
