#!/usr/bin/env bash
# Makes the base image the Dockerfile starts from, debian:bookworm-slim, where no image registry
# can be reached: a minimal Debian 12 root file system from Debian's own package mirror
# (debootstrap --variant=minbase), imported under the same name. Where the image is already
# there, or a registry answers a pull, nothing is built.
#   deploy/debian-base.sh            # as root; needs debootstrap and a running dockerd
#   TC_BASE_IMAGE=debian:bookworm-slim TC_DEBIAN_MIRROR=http://deb.debian.org/debian
set -euo pipefail
image="${TC_BASE_IMAGE:-debian:bookworm-slim}"
mirror="${TC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${TC_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "debian-base: $image is already here"
  exit 0
fi
if [[ "${TC_BASE_PULL:-1}" == 1 ]] && timeout 20 docker pull -q "$image" >/dev/null 2>&1; then
  echo "debian-base: pulled $image"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debian-base: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }

root="$(mktemp -d /tmp/tc-debian-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "debian-base: no $image to pull; debootstrap --variant=minbase bookworm from $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
# The same package sources and apt settings as Debian's published slim image: updates and
# security fixes, no recommended packages, no downloaded archives left in layers.
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SOURCES
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
APT
echo 'APT::Install-Recommends "false";' >"$root/etc/apt/apt.conf.d/docker-no-recommends"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/usr/share/doc/* \
       "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar -C "$root" --numeric-owner -c . |
  docker import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$image" >/dev/null
echo "debian-base: imported $image ($(docker image inspect -f '{{.Size}}' "$image") bytes)"
