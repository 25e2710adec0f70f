#!/usr/bin/env bash
# Install the Debian packages that hack/build-image.sh and tests/image/test_image_build.py need:
# podman and buildah (build and run the image), runc (the runtime hack/containers.conf selects),
# mmdebstrap (builds the bookworm base locally, so no registry is needed),
# debian-archive-keyring (lets mmdebstrap verify the Debian archive on non-Debian hosts too) and
# ca-certificates; chromium (headless, for the report page's browser test,
# tests/podmortem_operator/test_report_page_e2e.py); prometheus (promtool checks and unit-tests the
# chart's alerts and dashboard queries and lints /metrics, tests/chart/test_chart_monitoring.py). Recommended packages are installed as well (netavark, aardvark-dns,
# catatonit, fuse-overlayfs, uidmap, ...), as on the machines this was tested on.
#
# Idempotent: does nothing when every package is already installed (--force runs apt anyway;
# it never upgrades what is installed).
# Needs root, or sudo. Debian bookworm (or a derivative with these packages).
set -euo pipefail

PACKAGES=(podman buildah mmdebstrap runc debian-archive-keyring ca-certificates chromium prometheus)
FORCE=0

case "${1:-}" in
    -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; echo "Packages: ${PACKAGES[*]}"; exit 0 ;;
    --force) FORCE=1 ;;
    "") ;;
    *) echo "ci-install: unknown argument: $1 (see --help)" >&2; exit 2 ;;
esac

missing=()
for pkg in "${PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == "installed" ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 && "$FORCE" -eq 0 ]]; then
    echo "ci-install: already installed: ${PACKAGES[*]}"
    exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { echo "ci-install: must run as root (or with sudo available)" >&2; exit 1; }
    SUDO=(sudo)
fi

echo "ci-install: installing ${missing[*]:-${PACKAGES[*]}}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-upgrade "${PACKAGES[@]}"
