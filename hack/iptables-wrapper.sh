#!/bin/sh
# iptables-wrapper: the entrypoint of the npl-agent image. It makes the
# `iptables` and `ip6tables` commands on PATH use the backend (nft or legacy)
# the host already uses, then runs its arguments. npl-agent reads the backend
# from `iptables --version`; rules written with the other backend would sit in
# tables that kube-proxy and the CNI never look at.
#
# Usage: iptables-wrapper COMMAND [ARG...]
#
# Environment:
#   NPL_IPTABLES_MODE     auto (default), nft or legacy.
#   NPL_IPTABLES_BIN_DIR  when set, a writable directory: the chosen commands
#                         are linked there and it is put first on PATH, so a
#                         read-only root filesystem works. Otherwise the
#                         image's alternatives are switched with
#                         update-alternatives.
#   NPL_IPTABLES_SBIN     where the iptables binaries live (default /usr/sbin).
set -eu

log() { echo "iptables-wrapper: $*" >&2; }

sbin="${NPL_IPTABLES_SBIN:-/usr/sbin}"
mode="${NPL_IPTABLES_MODE:-auto}"

# save_all MODE: the rules of both families in MODE, nothing when the backend
# is unusable here (no kernel support, no permission).
save_all() {
	"iptables-$1-save" 2>/dev/null || true
	"ip6tables-$1-save" 2>/dev/null || true
}

# detect prints the backend the host uses. kubelet (1.24+) creates the chain
# KUBE-IPTABLES-HINT (older ones KUBE-KUBELET-CANARY) in the mangle table of
# the backend it uses: that settles it. Otherwise the backend holding more
# rules wins, and nft on a tie (an empty host), as current distributions do.
detect() {
	for m in nft legacy; do
		if save_all "$m" | grep -Eq '^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY) '; then
			reason="kubelet's hint chain is in $m"
			detected=$m
			return
		fi
	done
	legacy=$(save_all legacy | grep -c '^-' || true)
	nft=$(save_all nft | grep -c '^-' || true)
	reason="rules: legacy $legacy, nft $nft"
	if [ "$legacy" -gt "$nft" ]; then
		detected=legacy
	else
		detected=nft
	fi
}

if [ "$#" -eq 0 ]; then
	log "usage: iptables-wrapper COMMAND [ARG...]"
	exit 2
fi

case "$mode" in
auto)
	detect
	mode=$detected
	;;
nft | legacy)
	reason="NPL_IPTABLES_MODE=$mode"
	;;
*)
	log "NPL_IPTABLES_MODE is \"$mode\"; want auto, nft or legacy"
	exit 2
	;;
esac

if [ -n "${NPL_IPTABLES_BIN_DIR:-}" ]; then
	mkdir -p "$NPL_IPTABLES_BIN_DIR"
	for cmd in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		# xtables-<mode>-multi runs the command its link is named after.
		ln -sf "$sbin/xtables-$mode-multi" "$NPL_IPTABLES_BIN_DIR/$cmd"
	done
	PATH="$NPL_IPTABLES_BIN_DIR:$PATH"
	export PATH
else
	update-alternatives --set iptables "$sbin/iptables-$mode" >/dev/null
	update-alternatives --set ip6tables "$sbin/ip6tables-$mode" >/dev/null
fi
log "using the $mode backend ($reason)"
exec "$@"
