#!/usr/bin/env bash
# Build the podmortem container image with podman, on a machine that can't pull from docker.io.
#
# The Dockerfile's base (python:3.11.x-slim-bookworm) lives on docker.io. Instead, build an
# equivalent base locally with mmdebstrap (Debian bookworm minbase + python3-venv, a venv at
# /opt/venv first on PATH), import it into podman, and hand it to the unchanged Dockerfile
# through its PYTHON_IMAGE build argument. The base is built once and reused.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"

TAG="${PODMORTEM_IMAGE:-localhost/podmortem:dev}"
BASE="${PODMORTEM_BASE_IMAGE:-localhost/podmortem-base:bookworm}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-}"
REBUILD_BASE=0
BASE_ONLY=0
NO_CACHE=()
work=""

usage() {
    cat <<EOF
Usage: hack/build-image.sh [options]

Build the podmortem image from ./Dockerfile with podman, on top of a Debian $SUITE base
built locally with mmdebstrap (no registry needed: Debian and PyPI only).

Options:
  --tag TAG          image to build (default: \$PODMORTEM_IMAGE or localhost/podmortem:dev)
  --base TAG         local base image (default: \$PODMORTEM_BASE_IMAGE or
                     localhost/podmortem-base:bookworm); built only if it doesn't exist yet
  --rebuild-base     rebuild the base image even if it exists
  --base-only        build (or reuse) the base image, then stop
  --no-cache         build every Dockerfile step afresh (podman build --no-cache)
  --mirror URL       Debian mirror for the base (default: \$DEBIAN_MIRROR, else the URIs in
                     this machine's /etc/apt/sources.list.d/debian.sources, else
                     http://deb.debian.org/debian)
  -h, --help         show this help

Podman is pointed at hack/containers.conf (runc, bounded ulimits) through CONTAINERS_CONF;
set PODMORTEM_CONTAINERS_CONF to use another file. Needs root (mmdebstrap --mode=root and
rootful podman). Debian packages: see hack/ci-install.sh.

The base trusts the certificates in /usr/local/share/ca-certificates and gets an
/etc/pip.conf mirroring this machine's pip index settings (http(s) URLs only), so pip in the
build reaches the package index the way pip on this machine does.
EOF
}

die() { echo "build-image: error: $*" >&2; exit 1; }
log() { echo "build-image: $*" >&2; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --tag) [[ $# -ge 2 ]] || die "--tag needs a value"; TAG="$2"; shift 2 ;;
        --tag=*) TAG="${1#*=}"; shift ;;
        --base) [[ $# -ge 2 ]] || die "--base needs a value"; BASE="$2"; shift 2 ;;
        --base=*) BASE="${1#*=}"; shift ;;
        --mirror) [[ $# -ge 2 ]] || die "--mirror needs a value"; MIRROR="$2"; shift 2 ;;
        --mirror=*) MIRROR="${1#*=}"; shift ;;
        --rebuild-base) REBUILD_BASE=1; shift ;;
        --base-only) BASE_ONLY=1; shift ;;
        --no-cache) NO_CACHE=(--no-cache); shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done

missing=()
for tool in podman mmdebstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    die "${missing[*]} not found; install with (as root): hack/ci-install.sh (Debian packages podman buildah mmdebstrap runc)"
fi
command -v runc >/dev/null 2>&1 || [[ -x /usr/sbin/runc ]] || die "runc not found (hack/containers.conf selects it); install with (as root): hack/ci-install.sh"
[[ "$(id -u)" -eq 0 ]] || die "must run as root (mmdebstrap --mode=root, rootful podman)"

export CONTAINERS_CONF="${PODMORTEM_CONTAINERS_CONF:-$HERE/containers.conf}"
[[ -r "$CONTAINERS_CONF" ]] || die "containers.conf not readable: $CONTAINERS_CONF"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- Debian sources for the base -------------------------------------------------------------

# One-line "deb URI SUITE COMPONENTS" entries for $SUITE, $SUITE-updates and $SUITE-security,
# read from this machine's apt sources (deb822 or one-line format).
host_sources() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -r "$f" ]] || continue
        awk -v suite="$SUITE" '
            function flush(   i, j, nu, ns, u, s) {
                if (types ~ /(^| )deb( |$)/ && uris != "" && suites != "") {
                    nu = split(uris, u, " "); ns = split(suites, s, " ")
                    for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
                        if (s[j] == suite || s[j] == suite "-updates" || s[j] == suite "-security")
                            print "deb " u[i] " " s[j] " " (comps == "" ? "main" : comps)
                }
                types = uris = suites = comps = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            { key = tolower($1); sub(/^[^:]*:[ \t]*/, ""); val = $0 }
            key == "types:" { types = val } key == "uris:" { uris = val }
            key == "suites:" { suites = val } key == "components:" { comps = val }
            END { flush() }
        ' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r "$f" ]] || continue
        awk -v suite="$SUITE" '
            $1 == "deb" {
                i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                s = $(i + 1)
                if (s == suite || s == suite "-updates" || s == suite "-security") {
                    line = "deb " $i " " s
                    for (k = i + 2; k <= NF; k++) line = line " " $k
                    print line
                }
            }' "$f"
    done
}

debian_sources() {
    if [[ -n "$MIRROR" ]]; then
        echo "deb $MIRROR $SUITE main"
        echo "deb $MIRROR $SUITE-updates main"
        if [[ "$MIRROR" == */debian || "$MIRROR" == */debian/ ]]; then
            echo "deb ${MIRROR%/}-security $SUITE-security main"
        fi
        return
    fi
    local found
    found="$(host_sources | awk '!seen[$0]++')"
    if [[ -n "$found" ]]; then
        echo "$found"
    else
        echo "deb http://deb.debian.org/debian $SUITE main"
        echo "deb http://deb.debian.org/debian $SUITE-updates main"
        echo "deb http://deb.debian.org/debian-security $SUITE-security main"
    fi
}

# --- pip settings for the build -------------------------------------------------------------

HOST_PIP=""
for candidate in pip3 pip; do
    if command -v "$candidate" >/dev/null 2>&1; then HOST_PIP="$candidate"; break; fi
done

# A pip setting as this machine's pip sees it: PIP_* environment first, then pip's config files.
pip_setting() {
    local key="$1" var value=""
    var="PIP_$(echo "$key" | tr 'a-z-' 'A-Z_')"
    value="${!var:-}"
    if [[ -z "$value" && -n "$HOST_PIP" ]]; then
        value="$("$HOST_PIP" config get "global.$key" 2>/dev/null || true)"
    fi
    echo "$value"
}

# Keep only what means the same inside the build: http(s) URLs, host names, numbers.
# file:// indexes and find-links directories live on this machine's disk, not in the build.
network_only() {
    local item kept=()
    for item in $1; do
        case "$item" in
            http://*|https://*) kept+=("$item") ;;
            *) log "pip setting not mirrored into the build (not on the network): $item" ;;
        esac
    done
    echo "${kept[*]:-}"
}

write_pip_conf() {
    local out="$1" index extra trusted timeout retries proxy
    index="$(network_only "$(pip_setting index-url)")"
    extra="$(network_only "$(pip_setting extra-index-url)")"
    trusted="$(pip_setting trusted-host)"
    timeout="$(pip_setting default-timeout)"; [[ -n "$timeout" ]] || timeout="$(pip_setting timeout)"
    retries="$(pip_setting retries)"
    proxy="$(pip_setting proxy)"
    {
        echo "# Written by hack/build-image.sh from this build machine's pip settings."
        echo "[global]"
        echo "cert = /etc/ssl/certs/ca-certificates.crt"
        echo "disable-pip-version-check = true"
        [[ -z "$index" ]] || echo "index-url = $index"
        [[ -z "$extra" ]] || echo "extra-index-url = $extra"
        [[ -z "$trusted" ]] || echo "trusted-host = $trusted"
        [[ -z "$timeout" ]] || echo "timeout = $timeout"
        [[ -z "$retries" ]] || echo "retries = $retries"
        [[ -z "$proxy" ]] || echo "proxy = $proxy"
    } >"$out"
}

# --- base image ----------------------------------------------------------------------------

build_base() {
    local sources=() line
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    while IFS= read -r line; do [[ -n "$line" ]] && sources+=("$line"); done < <(debian_sources)
    write_pip_conf "$work/pip.conf"
    mkdir -p "$work/ca"
    if [[ -d /usr/local/share/ca-certificates ]]; then
        cp -a /usr/local/share/ca-certificates/. "$work/ca/"
    fi
    log "building base $BASE with mmdebstrap from:"
    printf '    %s\n' "${sources[@]}" >&2
    log "pip.conf for the build:"
    sed 's/^/    /' "$work/pip.conf" >&2

    local started
    started="$(now)"
    # minbase + python3-venv; merged-/usr via hook (no usrmerge, so no perl); no docs,
    # man pages or translations. passwd brings useradd, which the Dockerfile runs.
    mmdebstrap \
        --mode=root \
        --variant=minbase \
        --format=tar \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        --include=python3-venv,ca-certificates,passwd \
        --customize-hook="cp -a '$work/ca/.' \"\$1/usr/local/share/ca-certificates/\"" \
        --customize-hook='chroot "$1" update-ca-certificates --fresh >/dev/null' \
        --customize-hook="cp '$work/pip.conf' \"\$1/etc/pip.conf\"" \
        --customize-hook='chroot "$1" python3 -m venv /opt/venv' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*.log' \
        "$SUITE" "$work/base.tar" "${sources[@]}"
    local debootstrapped
    debootstrapped="$(elapsed "$started")"

    podman import \
        --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV VIRTUAL_ENV=/opt/venv' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        --message "podmortem build base: Debian $SUITE minbase + python3-venv (hack/build-image.sh)" \
        "$work/base.tar" "$BASE" >/dev/null
    rm -rf "$work"
    trap - EXIT
    log "base $BASE built in $(elapsed "$started") s (mmdebstrap ${debootstrapped} s)"
}

if [[ "$REBUILD_BASE" -eq 0 ]] && podman image exists "$BASE"; then
    log "reusing base $BASE (--rebuild-base to rebuild it)"
else
    build_base
fi
[[ "$BASE_ONLY" -eq 0 ]] || exit 0

# --- the image -----------------------------------------------------------------------------

log "building $TAG from $ROOT/Dockerfile on $BASE"
started="$(now)"
# --network host: RUN steps use the host's network (pip must reach the index; no bridge
# or firewall set-up is needed). --pull=never: the base is local, never ask a registry.
podman build \
    --pull=never \
    --network host \
    "${NO_CACHE[@]}" \
    --build-arg "PYTHON_IMAGE=$BASE" \
    --tag "$TAG" \
    --file "$ROOT/Dockerfile" \
    "$ROOT"
build_s="$(elapsed "$started")"

size_bytes="$(podman image inspect --format '{{.Size}}' "$TAG")"
size_mb="$(awk -v b="$size_bytes" 'BEGIN { printf "%.1f", b / 1000 / 1000 }')"
log "built $TAG in ${build_s} s; image size ${size_mb} MB (${size_bytes} bytes)"
