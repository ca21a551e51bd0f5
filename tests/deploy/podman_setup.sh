#!/usr/bin/env bash
# Build and run the project's Dockerfile and compose file with podman (no Docker engine needed).
#
#   tests/deploy/podman_setup.sh            install what is missing, write the settings, build
#   tests/deploy/podman_setup.sh --check    only say whether everything is in place (exit 1 if not)
#
# Safe to run again: every step looks first and does only what is missing. Installing packages
# and writing /etc/containers needs root; once everything is in place only the image build runs
# (podman's layer cache makes it quick when nothing changed).
#
# Steps:
#   1. apt packages: podman, runc, catatonit (compose's `init: true`), debootstrap; and
#      podman-compose from PyPI in .cache/podman-compose (Debian's 1.0.3 cannot run a service
#      with network_mode: host, nor merge an override file's `!override`)
#   2. /etc/containers/containers.conf and storage.conf (why each setting: docs/operations/docker.md, "With podman instead of Docker")
#   3. the Dockerfile's base image, made locally with debootstrap from the Debian mirror apt
#      uses (no container registry is needed), under the name the Dockerfile's FROM line uses
#   4. the project image, hogwild:latest (HOGWILD_IMAGE to change), with --pull=never
#
# Environment: HOGWILD_DEBIAN_MIRROR (default: the first Debian URI in apt's sources),
# HOGWILD_IMAGE (default hogwild:latest), PYTHON (for podman-compose's venv, default python3).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
image="${HOGWILD_IMAGE:-hogwild:latest}"
marker="# written by tests/deploy/podman_setup.sh"
packages=(podman runc catatonit debootstrap)
compose_venv="$repo/.cache/podman-compose"
compose_version="1.6.0"

say() { echo "podman-setup: $*"; }
die() { echo "podman-setup: error: $*" >&2; exit 1; }

check_only=false
case "${1:-}" in
  "") ;;
  --check) check_only=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# --- what the Dockerfile builds from -----------------------------------------------------------
# FROM python:${PYTHON_VERSION}-slim-bookworm with ARG PYTHON_VERSION=3.11: the base image's name,
# the Debian release and the Python version it must carry.
dockerfile="$repo/Dockerfile"
py_version="$(sed -n 's/^ARG PYTHON_VERSION=\([0-9.]*\).*/\1/p' "$dockerfile" | head -n1)"
from_ref="$(sed -n 's/^FROM \([^ ]*\).*/\1/p' "$dockerfile" | head -n1)"
[ -n "$py_version" ] && [ -n "$from_ref" ] || die "$dockerfile: no 'ARG PYTHON_VERSION=' or FROM line"
base_image="${from_ref//\$\{PYTHON_VERSION\}/$py_version}"
suite="${base_image##*-}"
case "$base_image" in
  python:*-slim-*) ;;
  *) die "$dockerfile: FROM $from_ref: expected python:VERSION-slim-DEBIANRELEASE" ;;
esac

# --- 1. packages ------------------------------------------------------------------------------
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

# --- 2. settings ------------------------------------------------------------------------------
# nofile/nproc: podman's defaults raise the limits above this machine's hard limits, which the
# kernel refuses. runc: crun rejects a hybrid cgroup v1/v2 hierarchy. cgroupfs: no systemd.
# vfs: plain copies, which need no overlay mounts (not every container sandbox allows them);
# it costs disk space and build time. events_logger file: there is no journald.
containers_conf="$marker
[containers]
default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
"
storage_conf="$marker
[storage]
driver = \"vfs\"
runroot = \"/run/containers/storage\"
graphroot = \"/var/lib/containers/storage\"
"
settings_ok() {
  [ "$(cat /etc/containers/containers.conf 2>/dev/null)" = "${containers_conf%$'\n'}" ] &&
    [ "$(cat /etc/containers/storage.conf 2>/dev/null)" = "${storage_conf%$'\n'}" ]
}

if $check_only; then
  ok=true
  [ ${#missing[@]} -eq 0 ] || { say "missing packages: ${missing[*]}"; ok=false; }
  "$compose_venv/bin/podman-compose" version >/dev/null 2>&1 ||
    { say "no podman-compose in $compose_venv"; ok=false; }
  settings_ok || { say "/etc/containers/{containers,storage}.conf not written yet"; ok=false; }
  # podman is asked only once it is set up: its first call makes its storage, with the driver
  # configured at that moment.
  if [ ${#missing[@]} -eq 0 ] && settings_ok; then
    podman image exists "$base_image" || { say "no base image $base_image"; ok=false; }
    podman image exists "$image" || { say "no image $image"; ok=false; }
  fi
  $ok && say "ready: podman $(podman --version | awk '{print $3}'), images $base_image, $image"
  $ok
  exit
fi

need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root: run this script as root (sudo $0)"
}

if [ ${#missing[@]} -gt 0 ]; then
  need_root "installing ${missing[*]}"
  say "installing ${missing[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "packages present: ${packages[*]}"
fi

if [ "$("$compose_venv/bin/podman-compose" --version 2>/dev/null | sed -n 's/^podman-compose version //p')" = "$compose_version" ]; then
  say "podman-compose $compose_version present in $compose_venv"
else
  say "installing podman-compose $compose_version (PyPI) into $compose_venv"
  rm -rf "$compose_venv"
  "${PYTHON:-python3}" -m venv "$compose_venv"
  "$compose_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      "podman-compose==$compose_version" > "$compose_venv.log" 2>&1 ||
    { cat "$compose_venv.log" >&2; die "pip install podman-compose==$compose_version failed"; }
  rm -f "$compose_venv.log"
fi

if settings_ok; then
  say "settings present: /etc/containers/containers.conf, storage.conf"
else
  need_root "writing /etc/containers"
  mkdir -p /etc/containers
  for name in containers.conf storage.conf; do
    file="/etc/containers/$name"
    if [ -e "$file" ] && ! grep -qF "$marker" "$file"; then
      say "keeping your $file as $file.orig"
      mv "$file" "$file.orig"
    fi
  done
  # A storage driver change makes podman refuse storage made with the old one.
  if [ -d /var/lib/containers/storage ] && ! grep -qs 'driver = "vfs"' /etc/containers/storage.conf; then
    [ -d /var/lib/containers/storage/vfs ] ||
      say "warning: /var/lib/containers/storage was made with another driver; if podman refuses" \
          "it, remove it (podman system reset)"
  fi
  printf '%s' "$containers_conf" > /etc/containers/containers.conf
  printf '%s' "$storage_conf" > /etc/containers/storage.conf
  say "wrote /etc/containers/containers.conf (runc, cgroupfs, ulimits 1024) and storage.conf (vfs)"
fi

# --- 3. base image ----------------------------------------------------------------------------
if podman image exists "$base_image"; then
  say "base image present: $base_image"
else
  need_root "debootstrap"
  mirror="${HOGWILD_DEBIAN_MIRROR:-}"
  if [ -z "$mirror" ]; then
    # The first Debian archive apt uses (deb822 "URIs:" or one-line "deb URI"), not -security.
    mirror="$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
                 /etc/apt/sources.list 2>/dev/null |
              sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?//p' |
              awk '{print $1}' | grep -E '/debian/?$' | head -n1 || true)"
  fi
  [ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list*; set HOGWILD_DEBIAN_MIRROR"
  rootfs="$(mktemp -d /var/tmp/hogwild-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  say "making $base_image: debootstrap $suite from $mirror (a minute or two)"
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip \
      "$suite" "$rootfs" "$mirror" > "$rootfs.log" 2>&1 ||
    { tail -n 20 "$rootfs.log" >&2; rm -f "$rootfs.log"; die "debootstrap $suite failed"; }
  rm -f "$rootfs.log"
  have="$(chroot "$rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [ "$have" = "$py_version" ] ||
    die "Debian $suite has Python $have, the Dockerfile wants $py_version: no base image made"
  # What the official image offers that the Dockerfile uses: `python` and `pip` on PATH, and
  # pip allowed to install into the system Python (PEP 668's marker removed).
  # mktemp made the root directory 0700: the image's non-root user could open nothing.
  chmod 0755 "$rootfs"
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
  ln -sf /usr/bin/pip3 "$rootfs/usr/local/bin/pip"
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$base_image" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  say "base image made: $base_image (Debian $suite, Python $have)"
fi

# --- 4. the project image ---------------------------------------------------------------------
# --network host: pip in the builder reaches the package index; the machine's CA bundle is
# mounted for the build only, nothing of it ends up in the image.
# Two builds, for two bugs of podman 4.3's builder (buildah 1.28) with the runtime stage's
# `RUN --mount=type=bind,from=builder,...`: when every step of the builder stage comes from
# the cache, the mount shows the stage's base image (no /wheels: the install fails), and a
# cached install step is reused even when the builder's wheels changed (a stale hogwild).
# So the builder stage is built and tagged by its image id first, and the runtime stage is
# built from a copy of the Dockerfile whose mount names that image: an image mount works, and
# a new builder means a new RUN line, so a new install. The Dockerfile itself is unchanged.
# With vfs every layer is a full copy of the image's files (hundreds of MB each), and every
# rebuild leaves the previous image and builder untagged: without pruning, repeated builds
# filled a 250 GB disk. Dangling images go before the build (so a full disk recovers) and after
# it; the tagged image and the layers the cache still uses stay.
prune() {
  local n
  n="$(podman image prune -f 2>/dev/null | wc -l)" || n=0
  [ "$n" -eq 0 ] || say "removed $n dangling image(s) left by earlier builds"
}
prune
say "building $image from $dockerfile (cached layers are reused)"
start=$SECONDS
log=/var/tmp/hogwild-podman-build.log
build() {
  podman build --pull=never --network host -v /etc/ssl/certs:/etc/ssl/certs:ro "$@" "$repo" \
      >> "$log" 2>&1 || { tail -n 30 "$log" >&2; die "podman build failed (whole log: $log)"; }
}
: > "$log"
build -f "$dockerfile" --target builder --iidfile "$log.builder"
builder_id="$(cat "$log.builder")"
builder_id="${builder_id#sha256:}"
builder="localhost/hogwild-builder:${builder_id:0:12}"
podman tag "$builder_id" "$builder"
runtime_file="$(mktemp /var/tmp/hogwild-Dockerfile.XXXXXX)"
sed "s#--mount=type=bind,from=builder,#--mount=type=bind,from=$builder,#" "$dockerfile" > "$runtime_file"
grep -qF "from=$builder," "$runtime_file" ||
  { rm -f "$runtime_file"; die "$dockerfile: no 'RUN --mount=type=bind,from=builder,' to point at $builder"; }
build -f "$runtime_file" --target runtime -t "$image"
rm -f "$runtime_file" "$log.builder"
# Older builder tags go (their layers stay as long as the cache uses them).
podman images --format '{{.Repository}}:{{.Tag}}' |
  grep '^localhost/hogwild-builder:' | grep -vxF "$builder" | xargs -r podman untag 2>/dev/null || true
prune
say "built $image in $((SECONDS - start)) s (builder stage $builder)"
