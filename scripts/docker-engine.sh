#!/usr/bin/env bash
# docker-engine.sh - make sure a Docker engine answers and `docker compose` (v2) works.
#
# Usage: scripts/docker-engine.sh        (run it as a command; it exports nothing)
#
#   * If `docker info` already answers, only the compose v2 plugin is checked/installed.
#   * Otherwise Debian's docker.io (engine 20.10) is installed with apt and
#     `dockerd --ip=127.0.0.1` is started in the background (published ports bind to
#     loopback by default), logging to /var/log/dockerd-mcp-lab.log. Only one dockerd is
#     ever started: a second daemon would delete the shared docker0 bridge.
#   * If `docker compose version` does not report v2, the cli-plugin is taken from Debian
#     trixie's `docker-compose` package (v2.x), fetched with apt from the same mirror the
#     system uses but through a PRIVATE sources list and apt state (the system's sources
#     are not touched), and copied to /usr/local/lib/docker/cli-plugins/docker-compose.
#
# NOTE for callers: the docker client on these machines (28.x, /usr/local/bin/docker) has
# no buildx plugin, so BuildKit builds fail ("buildx component is missing"). Callers must
# use the legacy builder:  export DOCKER_BUILDKIT=0  (this script does not export it).
#
# Environment (optional):
#   DOCKERD_LOG         daemon log file          (default /var/log/dockerd-mcp-lab.log)
#   DOCKERD_WAIT        seconds to wait for it   (default 60)
#   DEBIAN_MIRROR       Debian mirror URI        (default: read from the apt sources)
#   COMPOSE_SUITE       suite to take compose from (default trixie)
#   COMPOSE_PLUGIN_DIR  plugin target dir        (default /usr/local/lib/docker/cli-plugins)
#
# All progress lines ("docker-setup: ...") go to stderr.
set -euo pipefail

DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd-mcp-lab.log}
DOCKERD_WAIT=${DOCKERD_WAIT:-60}
COMPOSE_SUITE=${COMPOSE_SUITE:-trixie}
COMPOSE_PLUGIN_DIR=${COMPOSE_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}
export DEBIAN_FRONTEND=noninteractive

# shellcheck source=scripts/lib/apt-sources.sh
. "$(dirname "$0")/lib/apt-sources.sh"

[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get, dockerd)"
command -v docker >/dev/null 2>&1 || die "no docker client on PATH"

# The Debian mirror apt already uses (deb822 *.sources first, then sources.list).
debian_mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then printf '%s\n' "$DEBIAN_MIRROR"; return; fi
    local uri
    uri=$(apt_uri_for_suite bookworm)
    [ -n "$uri" ] || uri=$(apt_uri_for_suite stable)
    printf '%s\n' "${uri:-http://deb.debian.org/debian}"
}

APT_UPDATED=0
apt_update_once() {
    [ "$APT_UPDATED" -eq 1 ] && return 0
    log "apt-get update"
    apt-get update -qq >&2
    APT_UPDATED=1
}

docker_answers() { timeout 10 docker info >/dev/null 2>&1; }

compose_v2_ok() {
    local out
    out=$(timeout 10 docker compose version 2>/dev/null) || return 1
    printf '%s\n' "$out" | grep -Eq '[Vv]ersion v?2\.'
}

# ---------------------------------------------------------------------------- engine
ensure_engine() {
    if docker_answers; then
        log "engine already answers ($(docker info --format '{{.ServerVersion}}' 2>/dev/null)); nothing to start"
        return 0
    fi

    local t0=$EPOCHREALTIME
    if ! command -v dockerd >/dev/null 2>&1; then
        apt_update_once
        log "installing docker.io (engine) with apt"
        apt-get install -y -qq --no-install-recommends docker.io >&2
        log "docker.io installed in $(since "$t0")s"
    fi
    # docker.io depends on iptables/containerd/runc/tini; check what dockerd needs at run time.
    local missing=""
    for b in iptables containerd runc; do command -v "$b" >/dev/null 2>&1 || missing="$missing $b"; done
    if [ -n "$missing" ]; then
        apt_update_once
        log "installing missing runtime tools:$missing"
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $missing >&2
    fi

    local t1=$EPOCHREALTIME pid
    if pid=$(pgrep -x dockerd | head -n1); then
        log "dockerd already running (pid $pid); not starting another one, waiting for it"
    else
        log "starting dockerd --ip=127.0.0.1 (log: $DOCKERD_LOG)"
        mkdir -p "$(dirname "$DOCKERD_LOG")"
        # setsid: own session, so a caller killing its process group does not take the daemon down
        nohup setsid dockerd --ip=127.0.0.1 >>"$DOCKERD_LOG" 2>&1 </dev/null &
        disown || true
    fi

    local deadline=$((SECONDS + DOCKERD_WAIT))
    until timeout 5 docker info >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "engine did not answer within ${DOCKERD_WAIT}s; last 30 lines of $DOCKERD_LOG:"
            tail -n 30 "$DOCKERD_LOG" >&2 2>/dev/null || true
            exit 1
        fi
        if ! pgrep -x dockerd >/dev/null 2>&1; then
            log "dockerd exited; last 30 lines of $DOCKERD_LOG:"
            tail -n 30 "$DOCKERD_LOG" >&2 2>/dev/null || true
            exit 1
        fi
        sleep 0.5
    done
    log "engine answers ($(docker info --format '{{.ServerVersion}}' 2>/dev/null)) after $(since "$t1")s (total $(since "$t0")s)"
}

# --------------------------------------------------------------------------- compose
ensure_compose() {
    if compose_v2_ok; then
        log "compose v2 present: $(docker compose version 2>/dev/null)"
        return 0
    fi

    local t0=$EPOCHREALTIME mirror tmp
    mirror=$(debian_mirror)
    log "no compose v2; fetching docker-compose from Debian $COMPOSE_SUITE ($mirror) via a private apt state"
    tmp=$(mktemp -d /tmp/docker-compose-fetch.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/deb" "$tmp/root"
    # let apt's unprivileged download user (_apt) write there, so apt keeps its sandbox
    chmod 0755 "$tmp"
    if id _apt >/dev/null 2>&1; then chown _apt "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/deb"; fi
    local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    local signed=""
    [ -r "$keyring" ] && signed="[signed-by=$keyring] "
    printf 'deb %s%s %s main\n' "$signed" "$mirror" "$COMPOSE_SUITE" >"$tmp/sources.list"
    local -a aptopts=(
        -o "Dir::Etc::sourcelist=$tmp/sources.list"
        -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$tmp/lists"
        -o "Dir::Cache=$tmp/cache"
        -o "Dir::Cache::pkgcache="
        -o "Dir::Cache::srcpkgcache="
        -o "Acquire::Languages=none"
        -o "APT::Get::List-Cleanup=0"
    )
    apt-get "${aptopts[@]}" update -qq >&2
    (cd "$tmp/deb" && apt-get "${aptopts[@]}" download docker-compose >&2)
    local deb
    deb=$(find "$tmp/deb" -maxdepth 1 -name 'docker-compose_*.deb' | head -n1)
    [ -n "$deb" ] || die "apt-get download docker-compose produced no .deb"
    log "downloaded $(basename "$deb")"
    dpkg-deb -x "$deb" "$tmp/root"
    local bin
    bin=$(find "$tmp/root" -path '*/cli-plugins/docker-compose' \( -type f -o -type l \) | head -n1)
    [ -n "$bin" ] || bin=$(find "$tmp/root" -type f -name docker-compose | head -n1)
    [ -n "$bin" ] || die "no docker-compose binary inside $(basename "$deb")"
    mkdir -p "$COMPOSE_PLUGIN_DIR"
    install -m 0755 "$(readlink -f "$bin")" "$COMPOSE_PLUGIN_DIR/docker-compose.tmp"
    mv -f "$COMPOSE_PLUGIN_DIR/docker-compose.tmp" "$COMPOSE_PLUGIN_DIR/docker-compose"
    rm -rf "$tmp"
    trap - EXIT

    compose_v2_ok || die "docker compose still not v2 after installing $COMPOSE_PLUGIN_DIR/docker-compose" \
        "($(docker compose version 2>&1 | head -n1))"
    local seen
    seen=$(docker info --format '{{range .ClientInfo.Plugins}}{{.Name}}={{.Path}} {{end}}' 2>/dev/null || true)
    log "compose plugin installed in $(since "$t0")s: $(docker compose version) [client sees: ${seen:-?}]"
}

ensure_engine
ensure_compose
log "done"
