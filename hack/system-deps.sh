#!/usr/bin/env bash
# The system tools `make test` and `make demo` use beyond Python and Go: installs the missing
# ones from Debian when run as root, else names them (the tests that need them then skip
# with that reason).
set -euo pipefail

# tool -> Debian package
declare -A PACKAGES=(
  [prometheus]=prometheus [promtool]=prometheus  # the scrape tests, make demo
  [ip]=iproute2 [tc]=iproute2 [ss]=iproute2      # the tc actuator, the lab
  [/usr/lib/cni/bridge]=containernetworking-plugins  # the real node's pod network
  [iperf3]=iperf3 [ethtool]=ethtool [ping]=iputils-ping [pgrep]=procps [gcc]=gcc  # the lab
  [tcpdump]=tcpdump                               # bench/lab_packets.py
  [npm]=npm                                       # the dashboards against @grafana/schema
  [buildah]=buildah [debootstrap]=debootstrap     # the image build and its structure test
  [chromium-headless-shell]=chromium-headless-shell  # the docs site rendered (tests/docs)
  [containerd]=containerd [ctr]=containerd [runc]=runc  # the real node (testenv, make demo)
  [iptables]=iptables [conntrack]=conntrack          # kube-proxy on the real node
)
missing=()
for tool in "${!PACKAGES[@]}"; do
  if [[ $tool == /* ]]; then [[ -x $tool ]] && continue; else command -v "$tool" >/dev/null 2>&1 && continue; fi
  missing+=("${PACKAGES[$tool]}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)
if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${packages[*]} (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
else
  echo "warning: missing packages ${packages[*]}: install them (as root: apt-get install" \
       "${packages[*]}); the tests that need them will skip" >&2
fi
