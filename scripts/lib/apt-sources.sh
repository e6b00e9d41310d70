# shellcheck shell=bash
# Shared by scripts/docker-engine.sh and scripts/build-base-images.sh (sourced, not run).

log() { printf 'docker-setup: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# elapsed seconds since $1 (an $EPOCHREALTIME value), one decimal
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# URI of the first enabled "deb" source for a suite (deb822 *.sources, then sources.list).
apt_uri_for_suite() {
    local suite=$1 uri="" f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        uri=$(awk -v want="$suite" 'BEGIN { RS = ""; FS = "\n" }
            {
                types = ""; uris = ""; suites = ""; enabled = "yes"
                for (i = 1; i <= NF; i++) {
                    line = $i
                    if (line ~ /^[Tt]ypes:/)   { sub(/^[^:]*:[ \t]*/, "", line); types = line }
                    if (line ~ /^URIs:/)       { sub(/^[^:]*:[ \t]*/, "", line); uris = line }
                    if (line ~ /^[Ss]uites:/)  { sub(/^[^:]*:[ \t]*/, "", line); suites = line }
                    if (line ~ /^[Ee]nabled:/) { sub(/^[^:]*:[ \t]*/, "", line); enabled = tolower(line) }
                }
                if (enabled != "no" && index(" " types " ", " deb ") &&
                    index(" " suites " ", " " want " ")) { split(uris, u, /[ \t]+/); print u[1]; exit }
            }' "$f")
        [ -n "$uri" ] && break
    done
    if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
        uri=$(sed -E 's/\[[^]]*\]//' /etc/apt/sources.list |
              awk -v want="$suite" '$1 == "deb" && $3 == want { print $2; exit }')
    fi
    printf '%s\n' "$uri"
}
