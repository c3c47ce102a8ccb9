#!/usr/bin/env bash
# Prepares .device/, the third-party pieces the offline GPU check (scripts/gpu-check.sh) needs and
# the GPU test machine lacks: Highway, GoogleTest, CLI11, nlohmann-json, and pkg-config (pkgconf)
# to find Highway. They are Debian's x86-64 packages unpacked with dpkg -x (headers, libhwy.so.1,
# GoogleTest's static libraries, CMake and pkg-config files made relocatable); nothing in them
# depends on a Python version. Runs here, with the network; prints the size of the bundle and of
# the tree that travels with it (under 60 MiB together, or it fails).
#
#   bash scripts/device-bundle.sh            # reuses a complete .device/
#   FORCE=1 bash scripts/device-bundle.sh    # makes it again
#
# The bundle is git-ignored: name it where the tree is sent (the device tool's carry: [".device"]).
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE="${XLLM_KERNEL_BUNDLE:-.device}"
LIMIT_MIB=60
PACKAGES=(libhwy-dev libhwy1 libgtest-dev libcli11-dev nlohmann-json3-dev pkgconf-bin libpkgconf3)

log() { echo "[device-bundle] $*" >&2; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

if [ -n "${FORCE:-}" ] || [ ! -f "$BUNDLE/MANIFEST" ]; then
  arch="$(dpkg --print-architecture)"
  if [ "$arch" != amd64 ]; then
    log "this machine's packages are $arch; the GPU machine is x86-64 (amd64): make the bundle on an amd64 machine"
    exit 1
  fi
  downloads="$(mktemp -d)"
  new="$BUNDLE.new"
  trap 'rm -rf "$downloads" "$new"' EXIT
  chmod 777 "$downloads"  # apt's sandbox user (_apt) writes the files
  log "downloading ${PACKAGES[*]}"
  if ! (cd "$downloads" && apt-get download -qq "${PACKAGES[@]}" >&2); then
    log "apt-get download failed; updating the package lists once"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq >&2
    (cd "$downloads" && apt-get download -qq "${PACKAGES[@]}" >&2)
  fi
  rm -rf "$new"
  mkdir -p "$new/root" "$new/bin"
  {
    echo "# .device/: made by scripts/device-bundle.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(. /etc/os-release && echo "$PRETTY_NAME")"
    for deb in "$downloads"/*.deb; do
      dpkg-deb -x "$deb" "$new/root"
      echo "$(dpkg-deb -f "$deb" Package)=$(dpkg-deb -f "$deb" Version)"
    done
  } >"$new/MANIFEST.tmp"
  rm -rf "$new/root/usr/share/doc" "$new/root/usr/share/man" "$new/root/usr/share/lintian" "$new/root/usr/src"
  # pkg-config files name prefix=/usr: make them relative to where they lie (${pcfiledir}).
  while IFS= read -r pc; do
    dir="$(dirname "${pc#"$new/root/usr/"}")"
    up="$(echo "$dir" | sed 's|[^/][^/]*|..|g')"
    sed -i "s|^prefix=/usr\$|prefix=\${pcfiledir}/$up|" "$pc"
  done < <(find "$new/root/usr" -name '*.pc')
  # pkg-config from the bundle (the GPU machine may have none); gpu-check.sh points it at the
  # bundle's .pc files only (PKG_CONFIG_LIBDIR).
  cat >"$new/bin/pkg-config" <<'EOF'
#!/bin/sh
# pkgconf from the bundle, with its library beside it.
root="$(cd "$(dirname "$0")/../root" && pwd)"
LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$root/usr/bin/pkgconf" "$@"
EOF
  chmod 755 "$new/bin/pkg-config"
  mv "$new/MANIFEST.tmp" "$new/MANIFEST"
  rm -rf "$BUNDLE"
  mv "$new" "$BUNDLE"
  log "unpacked into $BUNDLE/root"
else
  log "reusing $BUNDLE (FORCE=1 makes it again)"
fi
sed 's/^/  /' "$BUNDLE/MANIFEST" >&2
# The last passing dry run's phase times, for the check's estimates (scripts/gpu-check-dry-run.sh).
TIMES="$HOME/.cache/xllm-kernel/gpu-check-times.tsv"
if [ -f "$TIMES" ]; then
  cp "$TIMES" "$BUNDLE/phase-times.tsv"
  log "phase times for the estimates: $(head -n 1 "$TIMES")"
else
  rm -f "$BUNDLE/phase-times.tsv"
  log "no phase times yet (a passing dry run records them): the check will run without estimates"
fi

# What travels: tracked and untracked, not ignored files (as the device tool sends the tree),
# plus the bundle.
tree_bytes="$(git ls-files -z -c -o --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')"
bundle_bytes="$(du -sb "$BUNDLE" | cut -f1)"
total=$((tree_bytes + bundle_bytes))
echo "bundle $BUNDLE: $(mib "$bundle_bytes") MiB; source tree: $(mib "$tree_bytes") MiB; together $(mib "$total") MiB (limit $LIMIT_MIB MiB)"
if [ "$total" -ge $((LIMIT_MIB * 1048576)) ]; then
  echo "the tree and the bundle exceed $LIMIT_MIB MiB" >&2
  exit 1
fi
