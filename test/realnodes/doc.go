// Package realnodes holds the tests that run npl as users install it, on real
// nodes of the local cluster (cluster.Options.RealNodes): the chart installed
// with Helm's Go SDK, the images of `make images` in containerd, a real
// kubelet, kube-proxy and CNI on every node. `make test-real-nodes` runs them
// alone.
package realnodes
