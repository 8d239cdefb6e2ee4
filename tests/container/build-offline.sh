#!/usr/bin/env bash
# Builds the repository's Dockerfile and runs the image, on a machine with no Docker daemon
# and no access to a container registry (Docker Hub is not reachable here).
#
# What it does, end to end, and why:
#   1. Installs the tools from Debian (buildah, podman, runc, debootstrap) if missing, and
#      writes a containers.conf of its own (under $WORK, used through CONTAINERS_CONF, so the
#      machine's configuration is left alone) that picks runc (crun 1.8 refuses this kernel's
#      hybrid cgroup v1/v2 layout: "cgroups in hybrid mode not supported") and ulimits within
#      the hard limits this sandbox allows (podman's defaults are above them: "setrlimit
#      RLIMIT_NOFILE: Operation not permitted").
#   2. Reconstructs the base images the Dockerfile names, because they cannot be pulled, from
#      the same sources and recipes the official images are made from:
#        docker.io/library/debian:bookworm and :bookworm-slim  - debootstrap --variant=minbase
#          from deb.debian.org (as debuerreotype does), the docker apt/dpkg settings, security
#          updates applied; -slim also drops docs, man pages and locales like debuerreotype's
#          slimify. Imported with `podman import`.
#        docker.io/library/buildpack-deps:bookworm(-curl,-scm) - docker-library/buildpack-deps'
#          three Dockerfiles, package lists verbatim.
#        docker.io/library/rust:X.Y-bookworm (the version the Dockerfile names) -
#          rust-lang/docker-rust's Dockerfile: rustup-init 1.28.2 from static.rust-lang.org
#          (sha256-checked), --profile minimal, toolchain X.Y.0,
#          RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:...
#      They are kept in storage and reused by later runs (--rebuild-base remakes them).
#   3. Builds the Dockerfile with `buildah bud --pull-never --format docker` (docker format, as
#      the OCI format would drop HEALTHCHECK) into localhost/mcp-ws:latest. Context: by default
#      a snapshot of the committed HEAD (`git archive`, in $WORK/context), so that edits in
#      progress in the work tree do not decide the result; CONTEXT=DIR builds DIR instead (the
#      work tree, say: its .dockerignore keeps target/, .git/ and node_modules/ out).
#   4. Runs the image with the container port 8765 published on 127.0.0.1:$PORT and checks:
#      /healthz answers 200 from the host; the server runs as uid 10001; an MCP initialize
#      over POST /mcp is answered; a WebSocket upgrade on /mcp (subprotocol mcp) gets 101; the
#      image's own HEALTHCHECK command passes (`podman healthcheck run`, and the curl command
#      exec'd); `podman stop` ends it on SIGTERM (exit 0, no SIGKILL). The container is removed
#      at the end whatever happens.
# TLS: this sandbox reaches crates.io and static.rust-lang.org through an intercepting proxy
# whose CA only the host's bundle trusts, so the RUN steps that fetch over https (rustup in the
# rust base, cargo in the Dockerfile's build stage) get the host's bundle bind-mounted read-only
# over /etc/ssl/certs/ca-certificates.crt (buildah bud -v: nothing of it lands in an image).
# CA_BUNDLE= (empty) turns that off, where the images' own CA list is enough.
# Exits non-zero if any step or check fails. Heavy steps run under `nice -n 19` (the machine
# may be shared with benchmarks). Temporary data lives under $WORK (not /tmp).
#
# Usage: tests/container/build-offline.sh [--clean] [--rebuild-base] [--no-cache]
#   --clean         remove $WORK and every image this script made, then do everything
#   --rebuild-base  remake the base images even if they are in storage
#   --no-cache      build the mcp-ws image without buildah's layer cache
# Environment: WORK (default /var/tmp/mcpws-container), PORT (host port, default 18745),
#   CONTEXT (build context, default a snapshot of HEAD), MIRROR (Debian mirror),
#   BUILD_NETWORK (network of the build's RUN steps, default host), ISOLATION (buildah
#   isolation, default oci; chroot is the fallback where no OCI runtime works), CA_BUNDLE
#   (host CA bundle mounted into the https-fetching RUN steps, default the system's).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="${WORK:-/var/tmp/mcpws-container}"
PORT="${PORT:-18745}"
CONTEXT="${CONTEXT:-}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
BUILD_NETWORK="${BUILD_NETWORK:-host}"
ISOLATION="${ISOLATION:-oci}"
CA_BUNDLE="${CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"
SUITE=bookworm
RUSTUP_VERSION=1.28.2
RUSTUP_SHA256=20a06e644b0d9bd2fbdbfd52d42540bdde820ea7df86e92e533c073da0cdd43c # x86_64, from rust-lang/docker-rust
IMG_DEBIAN=docker.io/library/debian:bookworm
IMG_SLIM=docker.io/library/debian:bookworm-slim
IMG_BPD=docker.io/library/buildpack-deps:bookworm
IMG_OUT=localhost/mcp-ws:latest
CTR=mcpws-check
NICE=(nice -n 19)

CLEAN=0 REBUILD_BASE=0 NO_CACHE=0
for arg in "$@"; do
    case "$arg" in
        --clean) CLEAN=1 REBUILD_BASE=1 ;;
        --rebuild-base) REBUILD_BASE=1 ;;
        --no-cache) NO_CACHE=1 ;;
        *) echo "unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
STEP_TIMES=()
STEP_COUNT=0
step_start() { STEP_NAME="$1"; STEP_T0=$SECONDS; STEP_COUNT=$((STEP_COUNT + 1)); log "$1"; }
step_end() { STEP_TIMES+=("$(printf '%-40s %5ds' "$STEP_NAME" $((SECONDS - STEP_T0)))"); }
FAILED=0
check() { # check NAME COMMAND...: runs COMMAND, records PASS/FAIL
    local name="$1"; shift
    if "$@"; then echo "PASS: $name"; else echo "FAIL: $name"; FAILED=$((FAILED + 1)); fi
}
image_exists() { podman image exists "$1"; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, rootful podman)"
[ "$(uname -m)" = x86_64 ] || die "only x86_64 is handled (rustup-init checksum)"

mkdir -p "$WORK"
if [ -z "$CONTEXT" ]; then # a snapshot of the committed tree
    CONTEXT="$WORK/context"
    rm -rf --one-file-system "$CONTEXT"; mkdir -p "$CONTEXT"
    git -C "$REPO" archive --format=tar HEAD | tar -x -C "$CONTEXT"
    echo "build context: $CONTEXT = $(git -C "$REPO" rev-parse --short HEAD) (HEAD of $REPO)"
fi
# The Dockerfile must still name the bases reconstructed here.
froms="$(awk 'toupper($1)=="FROM"{print $2}' "$CONTEXT/Dockerfile" | tr '\n' ' ')"
[[ "$froms" =~ ^rust:([0-9]+\.[0-9]+)-bookworm\ debian:bookworm-slim\ $ ]] \
    || die "Dockerfile's FROM lines changed ($froms): update this script's base images"
RUST_TAG="rust:${BASH_REMATCH[1]}-bookworm"
RUST_VERSION="${BASH_REMATCH[1]}.0" # the toolchain docker-rust's X.Y image installs
IMG_RUST="docker.io/library/$RUST_TAG"
# ---------------------------------------------------------------------------------------
step_start "1. tools and container configuration"
need=()
for t in buildah:buildah podman:podman runc:runc debootstrap:debootstrap curl:curl \
         fuse-overlayfs:fuse-overlayfs slirp4netns:slirp4netns; do
    command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" \
        netavark aardvark-dns containernetworking-plugins uidmap
fi
hard_nofile="$(ulimit -Hn)"; [ "$hard_nofile" = unlimited ] && hard_nofile=1048576
hard_nproc="$(ulimit -Hu)"; [ "$hard_nproc" = unlimited ] && hard_nproc=1048576
pid_max="$(cat /proc/sys/kernel/pid_max)"
nofile=$(( hard_nofile < 65536 ? hard_nofile : 65536 ))
nproc=$(( hard_nproc < pid_max ? hard_nproc : pid_max ))
cat > "$WORK/containers.conf" <<EOF
# Written by tests/container/build-offline.sh; used through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"
export BUILDAH_RUNTIME=runc
buildah --version; podman --version; runc --version | head -1
podman info --format 'storage driver: {{.Store.GraphDriverName}}, root {{.Store.GraphRoot}}'

# Whatever happens from here, leave no container behind, and tell how long each step took.
cleanup() {
    podman rm -f -t 0 "$CTR" >/dev/null 2>&1 || true
    buildah rm --all >/dev/null 2>&1 || true
}
on_exit() {
    local rc=$?
    cleanup
    [ -n "${STEP_NAME:-}" ] && [ "${#STEP_TIMES[@]}" -lt "${STEP_COUNT:-0}" ] \
        && STEP_TIMES+=("$(printf '%-40s %5ds  (failed)' "$STEP_NAME" $((SECONDS - STEP_T0)))")
    log "step times"
    printf '%s\n' "${STEP_TIMES[@]}"
    echo "exit status $rc"
}
trap on_exit EXIT
cleanup

if [ "$CLEAN" = 1 ]; then
    log "--clean: removing $WORK data and the images this script makes"
    for img in "$IMG_OUT" "$IMG_RUST" "$IMG_BPD" "$IMG_BPD-scm" "$IMG_BPD-curl" "$IMG_SLIM" "$IMG_DEBIAN"; do
        podman rmi -f "$img" >/dev/null 2>&1 || true
    done
    podman image prune -f >/dev/null
    buildah rm --all >/dev/null 2>&1 || true
    keep=context # the build context, if it lies in $WORK, stays
    [ "$(dirname "$CONTEXT")" = "$WORK" ] && keep="$(basename "$CONTEXT")"
    find "$WORK" -mindepth 1 -maxdepth 1 ! -name containers.conf ! -name "$keep" \
        -exec rm -rf --one-file-system {} +
fi
step_end

# ---------------------------------------------------------------------------------------
# Runs a command in ROOTFS with its own /proc (a private mount namespace, gone when it ends).
in_root() {
    local root="$1"; shift
    "${NICE[@]}" unshare --mount --pid --fork --mount-proc="$root/proc" \
        chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"
}
# Packs ROOTFS into an image named NAME (with the config the official debian images have).
import_rootfs() {
    local root="$1" name="$2"
    tar --numeric-owner --xattrs --acls -C "$root" --exclude='./dev/*' --exclude='./proc/*' \
        --exclude='./sys/*' -c . \
        | podman import --change 'CMD ["bash"]' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            - "$name"
}

step_start "2a. base images debian:bookworm(-slim)"
if [ "$REBUILD_BASE" = 0 ] && image_exists "$IMG_DEBIAN" && image_exists "$IMG_SLIM"; then
    echo "in storage already: $IMG_DEBIAN, $IMG_SLIM (--rebuild-base remakes them)"
else
    root="$WORK/rootfs-debian"
    if findmnt -rn -o TARGET | grep -q "^$root"; then die "something is mounted under $root"; fi
    rm -rf --one-file-system "$root"
    mkdir -p "$WORK/cache/debootstrap"
    "${NICE[@]}" debootstrap --variant=minbase --cache-dir="$WORK/cache/debootstrap" \
        --keyring=/usr/share/keyrings/debian-archive-keyring.gpg "$SUITE" "$root" "$MIRROR"
    # The settings debuerreotype gives the official images (apt/dpkg tuned for containers,
    # no service starts during installs, deb822 sources with updates and security).
    echo 'force-unsafe-io' > "$root/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
    cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    echo 'Acquire::Languages "none";' > "$root/etc/apt/apt.conf.d/docker-no-languages"
    echo 'Acquire::GzipIndexes "true";' > "$root/etc/apt/apt.conf.d/docker-gzip-indexes"
    echo 'Apt::AutoRemove::SuggestsImportant "false";' > "$root/etc/apt/apt.conf.d/docker-autoremove-suggests"
    printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"; chmod 755 "$root/usr/sbin/policy-rc.d"
    rm -f "$root/etc/apt/sources.list"
    cat > "$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    in_root "$root" sh -c 'apt-get update -q && apt-get dist-upgrade -y -q && apt-get clean'
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
        "$root"/var/log/apt/* "$root"/var/log/dpkg.log "$root"/var/log/bootstrap.log "$root"/tmp/* \
        "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
    : > "$root/etc/resolv.conf"; : > "$root/etc/hostname"
    [ -e "$root/etc/machine-id" ] && : > "$root/etc/machine-id"
    import_rootfs "$root" "$IMG_DEBIAN"
    # -slim: what debuerreotype-slimify leaves out (and keeps out of later installs).
    cat > "$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
    find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$root"/usr/share/{groff,info,linda,locale,man}/* "$root"/usr/share/lintian/overrides/*
    import_rootfs "$root" "$IMG_SLIM"
    rm -rf --one-file-system "$root"
fi
podman run --rm "$IMG_SLIM" sh -c '. /etc/os-release; echo "slim: $PRETTY_NAME, $(dpkg -l | grep -c ^ii) packages"'
step_end

# ---------------------------------------------------------------------------------------
step_start "2b. base images buildpack-deps, $RUST_TAG"
ca_mount=()
[ -n "$CA_BUNDLE" ] && ca_mount=(-v "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
bud_base() { # bud_base TAG [ARGS]: builds $WORK/base/TAG.Containerfile into docker.io/library/TAG
    local tag="$1"; shift
    "${NICE[@]}" buildah bud --pull-never --format docker --isolation "$ISOLATION" \
        --network host "$@" -f "$WORK/base/$tag.Containerfile" -t "docker.io/library/$tag" "$WORK/base"
}
if [ "$REBUILD_BASE" = 0 ] && image_exists "$IMG_RUST"; then
    echo "in storage already: $IMG_RUST (--rebuild-base remakes it)"
else
    mkdir -p "$WORK/base"
    # docker-library/buildpack-deps debian/bookworm/{curl,scm,}/Dockerfile
    cat > "$WORK/base/buildpack-deps:bookworm-curl.Containerfile" <<'EOF'
FROM debian:bookworm
RUN set -eux; apt-get update; apt-get install -y --no-install-recommends \
        ca-certificates curl gnupg netbase sq wget; \
    rm -rf /var/lib/apt/lists/*
EOF
    cat > "$WORK/base/buildpack-deps:bookworm-scm.Containerfile" <<'EOF'
FROM buildpack-deps:bookworm-curl
RUN apt-get update && apt-get install -y --no-install-recommends \
        git git-lfs mercurial openssh-client subversion procps \
    && rm -rf /var/lib/apt/lists/*
EOF
    cat > "$WORK/base/buildpack-deps:bookworm.Containerfile" <<'EOF'
FROM buildpack-deps:bookworm-scm
RUN set -ex; apt-get update; apt-get install -y --no-install-recommends \
        autoconf automake bzip2 dpkg-dev file g++ gcc imagemagick libbz2-dev libc6-dev \
        libcurl4-openssl-dev libdb-dev libevent-dev libffi-dev libgdbm-dev libglib2.0-dev \
        libgmp-dev libjpeg-dev libkrb5-dev liblzma-dev libmagickcore-dev libmagickwand-dev \
        libmaxminddb-dev libncurses5-dev libncursesw5-dev libpng-dev libpq-dev libreadline-dev \
        libsqlite3-dev libssl-dev libtool libwebp-dev libxml2-dev libxslt-dev libyaml-dev make \
        patch unzip xz-utils zlib1g-dev default-libmysqlclient-dev; \
    rm -rf /var/lib/apt/lists/*
EOF
    # rust-lang/docker-rust <version>/bookworm/Dockerfile, amd64 branch
    cat > "$WORK/base/$RUST_TAG.Containerfile" <<EOF
FROM buildpack-deps:bookworm
LABEL org.opencontainers.image.source=https://github.com/rust-lang/docker-rust
ENV RUSTUP_HOME=/usr/local/rustup \\
    CARGO_HOME=/usr/local/cargo \\
    PATH=/usr/local/cargo/bin:\$PATH \\
    RUST_VERSION=$RUST_VERSION
RUN set -eux; \\
    rustArch='x86_64-unknown-linux-gnu'; \\
    rustupSha256='$RUSTUP_SHA256'; \\
    url="https://static.rust-lang.org/rustup/archive/$RUSTUP_VERSION/\${rustArch}/rustup-init"; \\
    wget "\$url"; \\
    echo "\${rustupSha256} *rustup-init" | sha256sum -c -; \\
    chmod +x rustup-init; \\
    ./rustup-init -y --no-modify-path --profile minimal --default-toolchain \$RUST_VERSION --default-host \${rustArch}; \\
    rm rustup-init; \\
    chmod -R a+w \$RUSTUP_HOME \$CARGO_HOME; \\
    rustup --version; \\
    cargo --version; \\
    rustc --version;
EOF
    bud_base buildpack-deps:bookworm-curl
    bud_base buildpack-deps:bookworm-scm
    bud_base buildpack-deps:bookworm
    bud_base "$RUST_TAG" "${ca_mount[@]}" # https: see TLS above
fi
podman run --rm "$IMG_RUST" sh -c 'rustc --version && cargo --version && gcc --version | head -1'
step_end

# ---------------------------------------------------------------------------------------
step_start "3. build the Dockerfile (mcp-ws)"
for pat in target .git; do
    grep -qxE "/?$pat/?" "$CONTEXT/.dockerignore" 2>/dev/null \
        || echo "WARNING: .dockerignore in $CONTEXT does not exclude $pat/"
done
bud_args=(--pull-never --format docker --layers --isolation "$ISOLATION" --network "$BUILD_NETWORK"
    "${ca_mount[@]}") # cargo fetches from crates.io over https: see TLS above
[ "$NO_CACHE" = 1 ] && bud_args+=(--no-cache)
"${NICE[@]}" buildah bud "${bud_args[@]}" -f "$CONTEXT/Dockerfile" -t "$IMG_OUT" "$CONTEXT" \
    || die "the Dockerfile does not build (buildah bud failed, see above)"
podman image inspect --format 'image {{.Id}}: {{.Size}} bytes, user {{.Config.User}}, entrypoint {{.Config.Entrypoint}}, env {{.Config.Env}}' "$IMG_OUT"
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | sort
step_end

# ---------------------------------------------------------------------------------------
step_start "4. run the image and check it"
if ss -Hltn "sport = :$PORT" | grep -q .; then die "host port $PORT is busy (set PORT)"; fi
# Without systemd podman cannot schedule the periodic health check and logs "unable to get
# systemd connection to add healthchecks": expected here; `podman healthcheck run` below runs
# the check itself.
podman run -d --name "$CTR" -p "127.0.0.1:$PORT:8765" "$IMG_OUT" >/dev/null
[ "$(podman inspect --format '{{.State.Running}}' "$CTR")" = true ] \
    || { podman logs "$CTR" 2>&1 | tail -20; die "the container is not running"; }
base="http://127.0.0.1:$PORT"
code=000
for _ in $(seq 1 60); do
    code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$base/healthz" || true)"
    [ "$code" = 200 ] && break
    sleep 0.5
done
check "GET /healthz from the host answers 200 (got $code)" test "$code" = 200

pid="$(podman inspect --format '{{.State.Pid}}' "$CTR")"
uid_line="$(awk '/^Uid:/{print $2, $3, $4, $5}' "/proc/$pid/status")"
echo "server process: host pid $pid, $(tr '\0' ' ' < "/proc/$pid/cmdline"), Uid: $uid_line"
podman top "$CTR" pid user huser args || true
check "the server runs as uid 10001 (real, effective, saved, fs)" test "$uid_line" = "10001 10001 10001 10001"
check "the server is the container's pid 1 (gets SIGTERM from podman stop)" \
    test "$(awk '/^NSpid:/{print $NF}' "/proc/$pid/status")" = 1

init_body='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}'
init_out="$(curl -sS -i --max-time 5 -X POST "$base/mcp" -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' -d "$init_body" || true)"
printf '%s\n' "$init_out" | sed 's/^/  | /'
check "POST /mcp initialize answers 200 with a result naming serverInfo" \
    sh -c 'printf "%s" "$1" | head -1 | grep -q " 200" && printf "%s" "$1" | grep -q "\"result\".*\"serverInfo\""' _ "$init_out"

ws_out="$(curl -sS -i --http1.1 --max-time 2 "$base/mcp" -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
    -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' \
    -H 'Sec-WebSocket-Protocol: mcp' 2>/dev/null || true)"
printf '%s\n' "$ws_out" | tr -d '\r' | sed -n '1,6s/^/  | /p'
check "WebSocket upgrade on /mcp (subprotocol mcp) answers 101" \
    sh -c 'printf "%s" "$1" | head -1 | grep -q " 101"' _ "$ws_out"

hc="$(podman inspect --format '{{json .Config.Healthcheck}}' "$CTR")"
echo "healthcheck in the container's config: $hc"
check "the image carries the Dockerfile's HEALTHCHECK" sh -c 'printf "%s" "$1" | grep -q "127.0.0.1:8765/healthz"' _ "$hc"
check "podman healthcheck run: healthy" podman healthcheck run "$CTR"
check "the HEALTHCHECK command exec'd in the container exits 0" \
    podman exec "$CTR" sh -c 'curl --fail --silent --max-time 2 http://127.0.0.1:8765/healthz || exit 1'
check "podman exec id -u in the container is 10001" test "$(podman exec "$CTR" id -u)" = 10001

t0=$SECONDS
podman stop -t 10 "$CTR" >/dev/null
stop_s=$((SECONDS - t0))
exit_code="$(podman inspect --format '{{.State.ExitCode}}' "$CTR")"
echo "podman stop took ${stop_s}s, exit code $exit_code; last log lines:"
podman logs "$CTR" 2>&1 | tail -5 | sed 's/^/  | /'
check "podman stop ends the server on SIGTERM (exit 0, ${stop_s}s < 10s)" \
    test "$exit_code" = 0 -a "$stop_s" -lt 10
podman rm -f "$CTR" >/dev/null
step_end

# ---------------------------------------------------------------------------------------
log "images"
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'mcp-ws|rust|debian|buildpack' | sort
if [ "$FAILED" -gt 0 ]; then
    echo "$FAILED check(s) failed"
    exit 1
fi
echo "all checks passed"
