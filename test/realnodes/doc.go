// Package realnodes holds the tests that run npl as users install it, on real
// nodes of the local cluster (cluster.Options.RealNodes): the chart installed
// with Helm's Go SDK, the images of `make images` in containerd, a real
// kubelet, kube-proxy and CNI on every node. One cluster per kube-proxy mode
// lives through the chart's whole life, from `helm install` through day two
// (rolling update, kube-proxy restart, port range change, a node drained and
// deleted) to `helm uninstall`, each step a subtest. TestMain fails the run
// if a real node left anything on the machine. `make test-real-nodes` runs
// them alone.
package realnodes
