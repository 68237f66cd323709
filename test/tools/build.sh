#!/usr/bin/env bash
# Builds the binaries of the local test cluster into BIN_DIR from the Go
# modules pinned in test/tools/go.mod: the control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler), the real-node components (kubelet,
# kube-proxy), the CNI plugins bridge, host-local, loopback and portmap
# (into BIN_DIR/cni) and echo-basic, the backend of the Gateway API
# conformance suite, at the version the repository's go.mod pins (the stand-in
# kubelet runs it for Pods of its image). Idempotent: a binary that already reports the pinned
# version is not rebuilt. With the argument "kubectl" it builds kubectl (for
# `make demo-shell`) instead.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN_DIR:-$here/../../bin}
mkdir -p "$bin"
bin=$(cd "$bin" && pwd)

k8s_version=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")
cni_version=$(awk '$1=="github.com/containernetworking/plugins" {print $2; exit}' "$here/go.mod")
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3" {print $2; exit}' "$here/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"

cd "$here"
if [ "${1:-}" = kubectl ]; then
  if [ -x "$bin/kubectl" ] && "$bin/kubectl" version --client 2>/dev/null | grep -q "Client Version: $k8s_version\$"; then
    echo "tools: kubectl $k8s_version is up to date"
  else
    echo "tools: building kubectl $k8s_version"
    go build -trimpath -ldflags "$ldflags" -o "$bin/kubectl" k8s.io/kubernetes/cmd/kubectl
  fi
  exit 0
fi
todo=()
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  if [ -x "$bin/$c" ] && [ "$("$bin/$c" --version 2>/dev/null)" = "Kubernetes $k8s_version" ]; then
    echo "tools: $c $k8s_version is up to date"
  else
    todo+=("k8s.io/kubernetes/cmd/$c")
  fi
done
if [ ${#todo[@]} -gt 0 ]; then
  echo "tools: building ${todo[*]##*/} $k8s_version (a few minutes the first time)"
  go build -trimpath -ldflags "$ldflags" -o "$bin/" "${todo[@]}"
fi
if [ -x "$bin/etcd" ] && "$bin/etcd" --version 2>/dev/null | grep -q "etcd Version: ${etcd_version#v}\$"; then
  echo "tools: etcd $etcd_version is up to date"
else
  echo "tools: building etcd $etcd_version"
  go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
fi

# A CNI plugin run without CNI_COMMAND prints "CNI <name> plugin <version>".
cni_todo=()
for p in main/bridge ipam/host-local main/loopback meta/portmap; do
  name=${p#*/}
  about=$( [ -x "$bin/cni/$name" ] && CNI_COMMAND= "$bin/cni/$name" 2>&1 </dev/null | head -1 || true)
  if [ "$about" = "CNI $name plugin $cni_version" ]; then
    echo "tools: cni/$name $cni_version is up to date"
  else
    cni_todo+=("github.com/containernetworking/plugins/plugins/$p")
  fi
done
if [ ${#cni_todo[@]} -gt 0 ]; then
  echo "tools: building cni/${cni_todo[*]##*/} $cni_version"
  mkdir -p "$bin/cni"
  go build -trimpath -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_version" \
    -o "$bin/cni/" "${cni_todo[@]}"
fi

# echo-basic comes from the conformance module the main module pins, so the
# backends answer exactly as the suite that test/conformance runs expects.
conformance=sigs.k8s.io/gateway-api/conformance
conf_version=$(cd "$here/../.." && go list -m -f '{{.Version}}' "$conformance")
if [ -x "$bin/echo-basic" ] && go version -m "$bin/echo-basic" 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+$conformance[[:space:]]+$conf_version[[:space:]]"; then
  echo "tools: echo-basic $conf_version is up to date"
else
  echo "tools: building echo-basic $conf_version"
  (cd "$here/../.." && go build -trimpath -ldflags "-s -w" -o "$bin/echo-basic" "$conformance/echo-basic")
fi
