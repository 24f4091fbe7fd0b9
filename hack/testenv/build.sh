#!/usr/bin/env bash
# Build the local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), kwok and helm from the Go module proxy into a version-keyed cache,
# with the Prometheus Operator CRDs the chart tests validate against.
# Idempotent: a complete cache directory is reused as is (warm run: well under a second).
#
#   hack/testenv/build.sh            # prints the bin directory on its last line
#   SCIDMZ_CACHE=/path hack/testenv/build.sh
set -euo pipefail

K8S_VERSION=v1.37.1
ETCD_VERSION=v3.7.0
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
# Only its CRDs (ServiceMonitor, PodMonitor, PrometheusRule), so that the chart's monitoring
# objects are validated by the API server against the real schemas.
PROMETHEUS_OPERATOR_VERSION=v0.85.0
# The oldest release the chart allows (Chart.yaml's kubeVersion): its kube-apiserver, which
# the CRDs' validation rules, the admission policy and every manifest shown are tested
# against (tests/k8s/test_oldest_kubernetes.py); its own module in ./oldest.
OLDEST_K8S_VERSION=v1.34.4
# Argo CD's Application and AppProject, Flux's GitRepository, OCIRepository and Kustomization
# CRDs, so that the GitOps examples are validated against their real schemas (their
# controllers do not run here). Their modules need a newer Go than this machine's to build,
# but `go mod download` still fetches the source archive, which is all this needs.
ARGOCD_VERSION=v3.6.1
FLUX_SOURCE_VERSION=v1.10.1
FLUX_KUSTOMIZE_VERSION=v1.10.1
# The real node (scidmz.testenv.node): kubelet and kube-proxy from the same module as the
# control plane, CoreDNS for cluster DNS, and the pod sandbox's pause program.
COREDNS_VERSION=v1.12.4
# Debian's Prometheus is built without Kubernetes service discovery; the in-cluster tests
# discover pods through the API server as a user's Prometheus would (module v0.307.3 is
# Prometheus 3.7.3; `go install` refuses it for its exclude directives, so a tool module).
PROMETHEUS_MODULE_VERSION=v0.307.3

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${SCIDMZ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/scidmz}
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
out="$cache_root/testenv/$key"
bin="$out/bin"

go=${GO:-}
if [[ -z "$go" ]]; then
  if [[ -x /usr/local/go/bin/go ]]; then go=/usr/local/go/bin/go; else go=$(command -v go); fi
fi

monitoring="$out/prometheus-operator-${PROMETHEUS_OPERATOR_VERSION}-crds"
if [[ ! -d "$monitoring" ]]; then
  echo ">> fetching the Prometheus Operator ${PROMETHEUS_OPERATOR_VERSION} CRDs" >&2
  mkdir -p "$out"
  module=$(cd "$out" && $go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$monitoring.partial"
  for kind in servicemonitors podmonitors prometheusrules; do
    cp "$module/example/prometheus-operator-crd/monitoring.coreos.com_${kind}.yaml" "$monitoring.partial/"
  done
  mv "$monitoring.partial" "$monitoring"
  ln -sfn "$(basename "$monitoring")" "$out/monitoring-crds"
fi

gitops="$out/gitops-argocd-${ARGOCD_VERSION}_flux-${FLUX_SOURCE_VERSION}-${FLUX_KUSTOMIZE_VERSION}-crds"
if [[ ! -d "$gitops" ]]; then
  echo ">> fetching Argo CD ${ARGOCD_VERSION} and Flux's CRDs" >&2
  mkdir -p "$out"; rm -rf "$gitops.partial"; mkdir -p "$gitops.partial"
  # each line: module@version, then the paths in its archive of the CRDs to take
  while read -r module paths; do
    # it exits non-zero after fetching the archive (the module wants a newer Go to build)
    listing=$(cd "$out" && $go mod download -json "$module" 2>/dev/null) || :
    zip=$(sed -n 's/^\t"Zip": "\(.*\)",$/\1/p' <<<"$listing")
    [[ -n "$zip" ]] || { echo "cannot fetch $module" >&2; exit 1; }
    # shellcheck disable=SC2086 # the paths are words
    python3 -c '
import pathlib, sys, zipfile
archive, module, out, *paths = sys.argv[1:]
with zipfile.ZipFile(archive) as z:
    for path in paths:
        pathlib.Path(out, pathlib.Path(path).name).write_bytes(z.read(f"{module}/{path}"))
' "$zip" "$module" "$gitops.partial" $paths
  done <<CRDS
github.com/argoproj/argo-cd/v3@${ARGOCD_VERSION} manifests/crds/application-crd.yaml manifests/crds/appproject-crd.yaml
github.com/fluxcd/source-controller@${FLUX_SOURCE_VERSION} config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml config/crd/bases/source.toolkit.fluxcd.io_ocirepositories.yaml
github.com/fluxcd/kustomize-controller@${FLUX_KUSTOMIZE_VERSION} config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml
CRDS
  mv "$gitops.partial" "$gitops"
  ln -sfn "$(basename "$gitops")" "$out/gitops-crds"
fi

node="$out/node-coredns-${COREDNS_VERSION}_prometheus-${PROMETHEUS_MODULE_VERSION}"
if [[ ! -x "$node/kubelet" || ! -x "$node/kube-proxy" || ! -x "$node/coredns" || ! -x "$node/pause" ||
      ! -x "$node/prometheus" ]]; then
  echo ">> building the real node's kubelet, kube-proxy, CoreDNS ${COREDNS_VERSION}, pause and" \
       "Prometheus (cold: ~5 min)" >&2
  rm -rf "$node.partial"; mkdir -p "$node.partial"
  node_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
  (
    cd "$here"
    export CGO_ENABLED=0 GOFLAGS=-mod=mod
    $go build -trimpath -ldflags "$node_ldflags" -o "$node.partial/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
    cd "$here/pause" && $go build -trimpath -ldflags "-s -w" -o "$node.partial/pause" .
    cd "$here/prometheus" && $go build -trimpath -ldflags "-s -w" -o "$node.partial/prometheus" \
      github.com/prometheus/prometheus/cmd/prometheus
  )
  CGO_ENABLED=0 GOBIN="$node.partial" $go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@${COREDNS_VERSION}"
  rm -rf "$node"; mv "$node.partial" "$node"
fi
ln -sfn "$(basename "$node")" "$out/node"

oldest="$out/oldest-kube-apiserver-${OLDEST_K8S_VERSION}"
if [[ ! -x "$oldest/kube-apiserver" ]]; then
  echo ">> building kube-apiserver ${OLDEST_K8S_VERSION}, the oldest release the chart allows" \
       "(cold: ~5 min)" >&2
  rm -rf "$oldest.partial"; mkdir -p "$oldest.partial"
  oldest_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${OLDEST_K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34"
  (
    cd "$here/oldest"
    export CGO_ENABLED=0 GOFLAGS=-mod=mod
    $go build -trimpath -ldflags "$oldest_ldflags" -o "$oldest.partial/" \
      k8s.io/kubernetes/cmd/kube-apiserver
  )
  rm -rf "$oldest"; mv "$oldest.partial" "$oldest"
fi
ln -sfn "$(basename "$oldest")" "$out/oldest"

want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm)
complete=1
for b in "${want[@]}"; do [[ -x "$bin/$b" ]] || complete=0; done
[[ -f "$out/kwok-stages.yaml" ]] || complete=0
if ((complete)); then echo "$bin"; exit 0; fi

echo ">> building the control plane ($key) with $($go version); cold: ~10 min" >&2
mkdir -p "$bin.partial"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
(
  cd "$here"
  export CGO_ENABLED=0 GOFLAGS=-mod=mod
  $go build -trimpath -ldflags "$ldflags" -o "$bin.partial/" \
    go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
  mv "$bin.partial/server" "$bin.partial/etcd"
)
echo ">> building kwok ${KWOK_VERSION} and helm ${HELM_VERSION}" >&2
CGO_ENABLED=0 GOBIN="$bin.partial" $go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
CGO_ENABLED=0 GOBIN="$bin.partial" $go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
# kwok's "fast" stage set is a kustomization of three folders; render it to one file of
# Stage objects that `kwok --config` reads.
stages="$($go env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
: > "$out/kwok-stages.yaml.partial"
for f in "$stages"/node/fast/*.yaml "$stages"/node/heartbeat-with-lease/*.yaml "$stages"/pod/fast/*.yaml; do
  [[ $(basename "$f") == kustomization.yaml ]] && continue
  { echo "---"; cat "$f"; } >> "$out/kwok-stages.yaml.partial"
done
mv "$out/kwok-stages.yaml.partial" "$out/kwok-stages.yaml"
rm -rf "$bin"
mv "$bin.partial" "$bin"
echo "$bin"
