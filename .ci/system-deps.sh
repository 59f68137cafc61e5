#!/usr/bin/env bash
# Debian's EGL/Mesa libraries for offscreen MuJoCo rendering (MUJOCO_GL=egl), and libGL + GLib, which
# opencv-python (robosuite's, for LIBERO) links against; installed if missing.
set -euo pipefail
pkgs=(libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libglib2.0-0)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "warning: ${missing[*]} missing and no apt-get; rgb observations may not render" >&2; exit 0
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing ${missing[*]} (offscreen rendering)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
