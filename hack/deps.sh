#!/usr/bin/env bash
# Installs the system packages that the tests and the demo need (network
# namespaces, iptables, nftables, conntrack, haproxy, and containerd and runc
# for the real-node cluster) when any is missing. Needs root; does
# nothing when everything is present.
set -euo pipefail

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables-restore >/dev/null 2>&1 || missing+=(iptables)
command -v conntrack >/dev/null 2>&1 || missing+=(conntrack)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
# HAProxy is the data plane of the haproxy provider's tests (npl-edge).
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${missing[*]}; install them as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
