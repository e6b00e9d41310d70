#!/usr/bin/env bash
# build-base-images.sh - base images for air-gapped builds of the lab.
#
# The project's Dockerfiles take the build arg PYTHON_IMAGE (public default
# python:3.12-slim) and compose takes REDIS_IMAGE (public default redis:7-alpine).
# When those cannot be pulled, this script makes local equivalents from the Debian
# mirror that apt already uses:
#
#   mcp-lab/debian:bookworm        mmdebstrap --variant=minbase rootfs, `docker import`ed;
#                                  trusts the host's extra CA certificates; "slim" like
#                                  debian:bookworm-slim (no man/info/locale/docs kept by dpkg)
#   mcp-lab/python:3.11-bookworm   python3, python3-venv, python3-pip, ca-certificates;
#                                  `python` -> python3 (Debian bookworm has Python 3.11)
#   mcp-lab/redis:7-bookworm       Debian's redis-server (7.0) + redis-cli, listening on all
#                                  interfaces with protected mode off (like the official image)
#
# Usage:
#   scripts/build-base-images.sh [--rebuild] [--no-pull]
#   eval "$(scripts/build-base-images.sh)"          # or: ... >> .env
#
# stdout gets exactly two lines, PYTHON_IMAGE=<image> and REDIS_IMAGE=<image>; all
# progress ("docker-setup: ...") and tool output goes to stderr.
#   --rebuild   rebuild the mcp-lab/* images even if they exist
#   --no-pull   do not try `docker pull` of the public images (only use them if local)
#
# Environment (optional):
#   EXTRA_CA_CERTS_DIR    directory with extra CA certificates (*.crt / *.pem) to trust in
#                         the images (default /usr/local/share/ca-certificates); corporate
#                         TLS proxies need the same thing
#   DEBIAN_MIRROR         Debian mirror URI (default: read from the system's apt sources)
#   DEBIAN_SECURITY_MIRROR  (default: read from apt sources, else http://deb.debian.org/debian-security)
#   PUBLIC_PYTHON_IMAGE   (default python:3.12-slim)
#   PUBLIC_REDIS_IMAGE    (default redis:7-alpine)
#   PULL_TIMEOUT          seconds per `docker pull` attempt (default 20)
#
# Needs a running engine (scripts/docker-engine.sh). Builds use the legacy builder
# (DOCKER_BUILDKIT=0): the 28.x client here has no buildx.
set -euo pipefail

export DOCKER_BUILDKIT=0
export DEBIAN_FRONTEND=noninteractive

PUBLIC_PYTHON_IMAGE=${PUBLIC_PYTHON_IMAGE:-python:3.12-slim}
PUBLIC_REDIS_IMAGE=${PUBLIC_REDIS_IMAGE:-redis:7-alpine}
PULL_TIMEOUT=${PULL_TIMEOUT:-20}
CA_DIR=${EXTRA_CA_CERTS_DIR:-/usr/local/share/ca-certificates}

DEBIAN_TAG=mcp-lab/debian:bookworm
PYTHON_TAG=mcp-lab/python:3.11-bookworm
REDIS_TAG=mcp-lab/redis:7-bookworm

REBUILD=0
NO_PULL=0
for arg in "$@"; do
    case "$arg" in
        --rebuild) REBUILD=1 ;;
        --no-pull) NO_PULL=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
        *) printf 'docker-setup: unknown argument: %s\n' "$arg" >&2; exit 2 ;;
    esac
done

# shellcheck source=scripts/lib/apt-sources.sh
. "$(dirname "$0")/lib/apt-sources.sh"

TMP=$(mktemp -d /tmp/mcp-lab-base.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

timeout 10 docker info >/dev/null 2>&1 || die "docker engine does not answer; run scripts/docker-engine.sh first"

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# ------------------------------------------------------------------ public images
REGISTRY_DOWN=0
# use_public IMAGE: true if IMAGE is local or can be pulled now.
use_public() {
    local img=$1 rc=0 out
    if image_exists "$img"; then
        log "$img is present locally; using it"
        return 0
    fi
    if [ "$NO_PULL" -eq 1 ]; then
        log "$img not local (--no-pull given)"
        return 1
    fi
    if [ "$REGISTRY_DOWN" -eq 1 ]; then
        log "$img not local; registry already found unreachable, not pulling"
        return 1
    fi
    log "$img not local; trying docker pull (timeout ${PULL_TIMEOUT}s)"
    local t0=$EPOCHREALTIME
    out=$(timeout "$PULL_TIMEOUT" docker pull "$img" 2>&1) || rc=$?
    if [ "$rc" -eq 0 ]; then
        log "pulled $img in $(since "$t0")s"
        return 0
    fi
    log "pull of $img failed after $(since "$t0")s (rc $rc): $(printf '%s' "$out" | tail -n1)"
    # both defaults live on Docker Hub: after a network-level failure do not retry there
    if [ "$rc" -eq 124 ] || printf '%s' "$out" | grep -Eqi \
        'no such host|dial tcp|i/o timeout|connection refused|network is unreachable|TLS handshake|x509|deadline exceeded|EOF'; then
        REGISTRY_DOWN=1
    fi
    return 1
}

# ------------------------------------------------------------------ local images
need_build() {  # need_build TAG
    if [ "$REBUILD" -eq 0 ] && image_exists "$1"; then
        log "$1 already exists; skipping (use --rebuild to rebuild)"
        return 1
    fi
    return 0
}

build_debian() {
    need_build "$DEBIAN_TAG" || return 0
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        local ti=$EPOCHREALTIME
        log "installing mmdebstrap with apt"
        apt-get update -qq >&2
        apt-get install -y -qq --no-install-recommends mmdebstrap >&2
        log "mmdebstrap installed in $(since "$ti")s"
    fi

    local mirror sec
    mirror=${DEBIAN_MIRROR:-$(apt_uri_for_suite bookworm)}
    mirror=${mirror:-http://deb.debian.org/debian}
    sec=${DEBIAN_SECURITY_MIRROR:-$(apt_uri_for_suite bookworm-security)}
    sec=${sec:-http://deb.debian.org/debian-security}

    local -a hooks=()
    # merged-/usr the debootstrap way (symlinks + usr-is-merged): without it apt picks
    # usrmerge for init-system-helpers, which drags in perl (~60 MB)
    if [ -d /usr/share/mmdebstrap/hooks/merged-usr ]; then
        hooks+=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
    fi
    # like the official Debian images: apt keeps no caches/debs inside image layers
    cat >"$TMP/docker-clean" <<'APTCONF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APTCONF
    hooks+=(--customize-hook="upload $TMP/docker-clean /etc/apt/apt.conf.d/docker-clean")
    # mmdebstrap's own cleanup leaves apt's binary caches (~72 MB) behind
    # shellcheck disable=SC2016  # "$1" is expanded by mmdebstrap's hook shell (chroot dir)
    hooks+=(--customize-hook='rm -f "$1"/var/cache/apt/*.bin')
    local certs="$TMP/certs" n=0 f
    mkdir -p "$certs"
    if [ -d "$CA_DIR" ]; then
        # update-ca-certificates only picks up *.crt files; accept *.pem too (renamed)
        while IFS= read -r -d '' f; do
            local b
            b=$(basename "$f"); b=${b%.pem}; b=${b%.crt}
            cp "$f" "$certs/${b//[^A-Za-z0-9._-]/_}.crt"
            n=$((n + 1))
        done < <(find -L "$CA_DIR" -maxdepth 2 -type f \( -name '*.crt' -o -name '*.pem' \) -print0)
    fi
    if [ "$n" -gt 0 ]; then
        log "trusting $n extra CA certificate(s) from $CA_DIR in the image"
        # shellcheck disable=SC2016  # "$1" is expanded by mmdebstrap's hook shell
        hooks+=(
            --customize-hook='mkdir -p "$1/usr/local/share/ca-certificates/mcp-lab"'
            --customize-hook="sync-in $certs /usr/local/share/ca-certificates/mcp-lab"
            --customize-hook='chroot "$1" update-ca-certificates'
        )
    else
        log "no extra CA certificates in $CA_DIR"
    fi

    log "building $DEBIAN_TAG: mmdebstrap minbase bookworm from $mirror (+ updates, security $sec) | docker import"
    local t0=$EPOCHREALTIME id rc=0
    # import untagged first; tag only if mmdebstrap succeeded (a truncated tar imports "fine")
    id=$(mmdebstrap --variant=minbase --include=ca-certificates \
            --aptopt='Acquire::Languages "none"' \
            --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/info/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' \
            --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --dpkgopt='path-exclude=/usr/share/groff/*' \
            --dpkgopt='path-exclude=/usr/share/lintian/*' \
            "${hooks[@]}" \
            bookworm - \
            "deb $mirror bookworm main" \
            "deb $mirror bookworm-updates main" \
            "deb $sec bookworm-security main" |
         docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' - ) || rc=$?
    if [ "$rc" -ne 0 ]; then
        if [ -n "${id:-}" ]; then docker rmi "$id" >/dev/null 2>&1 || true; fi
        die "mmdebstrap | docker import failed (rc $rc)"
    fi
    docker tag "$id" "$DEBIAN_TAG"
    log "built $DEBIAN_TAG in $(since "$t0")s"
}

docker_build() {  # docker_build TAG  (Dockerfile on stdin)
    local tag=$1 t0=$EPOCHREALTIME
    log "building $tag (legacy builder)"
    docker build --pull=false --force-rm -t "$tag" - >&2
    log "built $tag in $(since "$t0")s"
}

build_python() {
    need_build "$PYTHON_TAG" || return 0
    docker_build "$PYTHON_TAG" <<EOF
FROM $DEBIAN_TAG
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \\
 && apt-get install -y --no-install-recommends python3 python3-venv python3-pip ca-certificates \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \\
 && ln -sf /usr/bin/python3 /usr/local/bin/python
ENV LANG=C.UTF-8
CMD ["python3"]
EOF
}

build_redis() {
    need_build "$REDIS_TAG" || return 0
    docker_build "$REDIS_TAG" <<EOF
FROM $DEBIAN_TAG
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \\
 && apt-get install -y --no-install-recommends redis-server \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \\
 && mkdir -p /data && chown redis:redis /data
WORKDIR /data
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"]
EOF
}

# ------------------------------------------------------------------ main
T_START=$EPOCHREALTIME
python_image=$PUBLIC_PYTHON_IMAGE
redis_image=$PUBLIC_REDIS_IMAGE
use_public "$PUBLIC_PYTHON_IMAGE" || python_image=$PYTHON_TAG
use_public "$PUBLIC_REDIS_IMAGE" || redis_image=$REDIS_TAG

if [ "$python_image" = "$PYTHON_TAG" ] || [ "$redis_image" = "$REDIS_TAG" ]; then
    build_debian
    if [ "$python_image" = "$PYTHON_TAG" ]; then build_python; fi
    if [ "$redis_image" = "$REDIS_TAG" ]; then build_redis; fi
fi

log "done in $(since "$T_START")s"
printf 'PYTHON_IMAGE=%s\n' "$python_image"
printf 'REDIS_IMAGE=%s\n' "$redis_image"
