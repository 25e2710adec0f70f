#!/usr/bin/env bash
# Build the real control plane the tests run against, from each project's own Go module, with this
# machine's Go: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (k8s.io/kubernetes,
# its staging modules pinned to the matching v0.x releases), etcd and etcdctl (go.etcd.io/etcd),
# kwok (sigs.k8s.io/kwok: nodes and pods without a kubelet, container logs served from files) and
# helm (helm.sh/helm/v3). Versions: versions.env; every dependency: the go.mod/go.sum beside it.
#
# The binaries go into a cache outside the work tree, one folder per tool and version:
#   ${PODMORTEM_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podmortem/control-plane}/NAME-VERSION/
# Idempotent: a tool whose folder is complete is not built again (--force rebuilds). Prints the
# folder of each tool, and last the bin folder holding links to all of them.
#
# Usage: hack/control-plane/build.sh [--force] [--print-bin]
#   --print-bin   print only the bin folder (build first if needed; progress goes to stderr)
# Time on a fresh 2-core machine: about 20 minutes (module downloads included); seconds after that.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE="${PODMORTEM_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podmortem/control-plane}"
FORCE=0
PRINT_BIN=0
for arg in "$@"; do
    case "$arg" in
        -h|--help) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
        --force) FORCE=1 ;;
        --print-bin) PRINT_BIN=1 ;;
        *) echo "build.sh: unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done

command -v go >/dev/null || { echo "build.sh: needs Go (https://go.dev/dl), none on PATH" >&2; exit 1; }
export GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
export CGO_ENABLED=0

log() { echo "build.sh: $*" >&2; }

# Refuse a go.mod that names another version than versions.env: the two must move together.
check_pin() {  # folder module version
    grep -qE "^(require)?[[:space:]]*$2 $3\$" "$HERE/$1/go.mod" \
        || { log "$1/go.mod does not require $2 $3 (versions.env): run 'go mod tidy' there after editing both"; exit 1; }
}
check_pin kubernetes k8s.io/kubernetes "$KUBERNETES_VERSION"
check_pin etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
check_pin kwok sigs.k8s.io/kwok "$KWOK_VERSION"
check_pin helm helm.sh/helm/v3 "$HELM_VERSION"

# build FOLDER NAME VERSION LDFLAGS PACKAGE=BINARY...
build() {
    local folder="$1" name="$2" version="$3" ldflags="$4"; shift 4
    local out="$CACHE/$name-$version"
    if [[ -f "$out/.complete" && "$FORCE" -eq 0 ]]; then
        log "$name $version: cached in $out"
        return
    fi
    rm -rf "$out.partial"
    mkdir -p "$out.partial"
    local started=$SECONDS
    for pair in "$@"; do
        local pkg="${pair%%=*}" bin="${pair##*=}"
        log "$name $version: building $bin ($pkg)"
        (cd "$HERE/$folder" && go build -ldflags "-s -w $ldflags" -o "$out.partial/$bin" "$pkg")
    done
    touch "$out.partial/.complete"
    rm -rf "$out"
    mv "$out.partial" "$out"
    log "$name $version: built in $((SECONDS - started)) s into $out"
}

KMAJOR="${KUBERNETES_VERSION#v}"; KMAJOR="${KMAJOR%%.*}"
KMINOR="${KUBERNETES_VERSION#v*.}"; KMINOR="${KMINOR%%.*}"
BUILD_DATE="1970-01-01T00:00:00Z"
kver=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kver+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=$KMAJOR -X $p.gitMinor=$KMINOR"
    kver+=" -X $p.gitTreeState=clean -X $p.buildDate=$BUILD_DATE"
done

build etcd etcd "$ETCD_VERSION" "" \
    go.etcd.io/etcd/server/v3=etcd go.etcd.io/etcd/etcdctl/v3=etcdctl
build kwok kwok "$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    sigs.k8s.io/kwok/cmd/kwok=kwok
# kwok's own stages (what its nodes and pods go through) and CRDs (the Logs kind names the files
# a pod's logs are served from), copied from its module beside the binary.
kwok_data="$CACHE/kwok-$KWOK_VERSION"
if [[ ! -d "$kwok_data/stages" || ! -d "$kwok_data/crds" || "$FORCE" -eq 1 ]]; then
    kwok_src="$(cd "$HERE/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
    rm -rf "$kwok_data/stages" "$kwok_data/crds"
    cp -r "$kwok_src/kustomize/stage" "$kwok_data/stages"
    cp -r "$kwok_src/kustomize/crd/bases" "$kwok_data/crds"
    chmod -R u+w "$kwok_data/stages" "$kwok_data/crds"
    log "kwok $KWOK_VERSION: stages and CRDs copied into $kwok_data"
fi
build helm helm "$HELM_VERSION" "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    helm.sh/helm/v3/cmd/helm=helm
build kubernetes kubernetes "$KUBERNETES_VERSION" "$kver" \
    k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager=kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler=kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl=kubectl

# One folder of links, named for the whole set of versions, so a changed pin never mixes with an old one.
SET="$CACHE/bin-k8s$KUBERNETES_VERSION-etcd$ETCD_VERSION-kwok$KWOK_VERSION-helm$HELM_VERSION"
mkdir -p "$SET"
for tool in "etcd-$ETCD_VERSION" "kwok-$KWOK_VERSION" "helm-$HELM_VERSION" "kubernetes-$KUBERNETES_VERSION"; do
    for bin in "$CACHE/$tool"/*; do
        [[ -f "$bin" && -x "$bin" ]] || continue
        ln -sfn "$bin" "$SET/$(basename "$bin")"
    done
done
if [[ "$PRINT_BIN" -eq 1 ]]; then
    echo "$SET"
else
    log "every binary is linked in:"
    echo "$SET"
fi
