#!/usr/bin/env bash
# Installs what the build and tests need (Debian packages), only when missing. Idempotent.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
[ -f /usr/include/gmock/gmock.h ] || need+=(libgmock-dev)
# The CPU backend's tile products (src/cpu/matmul.cpp); the build falls back to its own loops without.
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -f /usr/include/libxsmm.h ] || need+=(libxsmm-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
