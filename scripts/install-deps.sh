#!/usr/bin/env bash
# Installs the real parts mallocbench drives (MariaDB + MyRocks, PostgreSQL 15, sysbench
# with its pgsql driver, the allocators) from Debian packages when any is missing. Idempotent; never starts or reconfigures the
# system MariaDB service: a temporary policy-rc.d forbids service starts during install.
set -euo pipefail

packages=(
  mariadb-server mariadb-client mariadb-plugin-rocksdb mariadb-backup sysbench
  postgresql-15 postgresql-client-15
  libjemalloc2 libtcmalloc-minimal4 libgoogle-perftools4 libmimalloc2.0
  build-essential python3-venv libzstd-dev
)
# Extra packages can be asked for (e.g. chromium for the HTML report tests).
packages+=("$@")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "mallocbench: installing Debian packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "mallocbench: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi

policy=/usr/sbin/policy-rc.d
placed_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  placed_policy=1
fi
cleanup() { if [ "$placed_policy" = 1 ]; then $sudo rm -f "$policy"; fi; }
trap cleanup EXIT

# postgresql-common creates and starts a "main" cluster on the default port when a
# server package is installed; the tests start private servers of their own instead.
if printf '%s\n' "${missing[@]}" | grep -q '^postgresql'; then
  $sudo mkdir -p /etc/postgresql-common/createcluster.d
  echo 'create_main_cluster = false' |
    $sudo tee /etc/postgresql-common/createcluster.d/mallocbench.conf >/dev/null
fi

export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
