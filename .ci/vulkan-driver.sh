#!/usr/bin/env bash
# A private CPU Vulkan driver (Mesa's lavapipe) for ManiSkill's SAPIEN renderer, unpacked under .vulkan/ and found
# by envs/adapters/maniskill/vulkan.py; the system's Mesa (the GL/EGL stack MuJoCo renders with) is not touched.
# Debian 12's own lavapipe (Mesa 22.3) lacks descriptorBindingPartiallyBound, which SAPIEN requires, so on bookworm
# the package comes from bookworm-backports, through an apt configuration of its own (the system's sources stay as
# they are); on a later Debian the release's own package is new enough. Its libraries (libLLVM, libdrm, xcb) are
# the system's: those missing are installed from the system's own sources, which upgrades nothing.
# A machine with a GPU Vulkan driver does not need this (the adapter prefers that driver); the folder does no harm.
# Without apt-get, or when the download fails, it warns and exits 0: ManiSkill envs then refuse to build, naming
# what is missing, and their tests skip with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=.vulkan
lib="$dest/root/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
if [ -f "$dest/lvp_icd.json" ] && [ -f "$lib" ]; then exit 0; fi
warn() { echo "warning: no private Vulkan driver in $dest: $*; ManiSkill envs will not build (docs/maniskill.md)" >&2; exit 0; }
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || warn "apt-get and dpkg-deb are needed"
[ "$(dpkg --print-architecture)" = amd64 ] || warn "only amd64 is prepared"
. /etc/os-release
codename="${VERSION_CODENAME:-}"
rm -rf "$dest" && mkdir -p "$dest/apt/lists/partial" "$dest/apt/cache/archives/partial" "$dest/apt/parts" "$dest/deb"
# The release's own archive, as the system's apt sources name it (deb822 or one-line format).
uri=$( (grep -h -A3 '^Types: *deb' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/{print $2}';
        grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}') |
      grep -v -- '-security' | head -n1)
[ -n "$uri" ] || warn "no Debian archive in the system's apt sources"
suite="$codename"; [ "$codename" = bookworm ] && suite=bookworm-backports
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb [signed-by=$keyring] $uri $suite main" > "$dest/apt/sources.list"
apt_opts=(-o Dir::Etc::SourceList="$PWD/$dest/apt/sources.list" -o Dir::Etc::SourceParts="$PWD/$dest/apt/parts"
          -o Dir::State::Lists="$PWD/$dest/apt/lists" -o Dir::Cache="$PWD/$dest/apt/cache"
          -o Dir::State::status=/dev/null -o APT::Sandbox::User=root -o Debug::NoLocking=1)
echo "fetching Mesa's lavapipe (mesa-vulkan-drivers from $suite) into $dest/ for ManiSkill"
apt-get "${apt_opts[@]}" -qq update >/dev/null || warn "apt-get update of $suite failed"
(cd "$dest/deb" && apt-get "${apt_opts[@]}" -qq download mesa-vulkan-drivers >/dev/null) ||
  warn "apt-get download mesa-vulkan-drivers from $suite failed"
deb=$(ls "$dest"/deb/mesa-vulkan-drivers_*.deb)
dpkg-deb -x "$deb" "$dest/root" || warn "could not unpack $deb"
# lavapipe alone is used: the package's GPU drivers and layers go (64 MB -> 20 MB).
find "$dest/root" -name '*.so' ! -name libvulkan_lvp.so -delete; rm -rf "$dest/root/usr/share" "$dest/root/usr/bin"
# The driver's own libraries, from the system's sources where missing (names only: no version is upgraded).
need=()
for p in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -E 's/\(.*\)//; s/\|.*//; s/ //g'); do
  [ "$p" = libvulkan1 ] && continue  # SAPIEN ships its own Vulkan loader
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing ${need[*]} (libraries of the private Vulkan driver)"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-upgrade "${need[@]}" >/dev/null ||
    warn "could not install ${need[*]}"
fi
# The manifest names the library relative to itself (the Vulkan loader reads it so), so the folder can move.
version=$(dpkg-deb -f "$deb" Version)
cat > "$dest/lvp_icd.json" <<JSON
{"file_format_version": "1.0.0",
 "ICD": {"library_path": "./root/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so", "api_version": "1.3.0"},
 "embodied": {"package": "mesa-vulkan-drivers", "version": "$version", "suite": "$suite"}}
JSON
rm -rf "$dest/apt" "$dest/deb"
echo "private Vulkan driver ready: $dest/lvp_icd.json (mesa-vulkan-drivers $version)"
