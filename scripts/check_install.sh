#!/usr/bin/env bash
# Install the library into a scratch prefix and build a small consumer two
# ways: CMake's find_package(flashattn) and pkg-config.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null

mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/main.c" <<'C'
#include <flashattn.h>
#include <stdio.h>
int main(void) {
    printf("flashattn %s\n", fa_version());
    return fa_backend_available(FA_BACKEND_CPU) ? 0 : 1;
}
C
cat >"$tmp/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(flashattn REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE flashattn::flashattn)
CM
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib64" "$tmp/consumer/build/consumer"

libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -1)
PKG_CONFIG_PATH="$libdir" cc "$tmp/consumer/main.c" -o "$tmp/consumer/pc" $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs flashattn)
LD_LIBRARY_PATH="$(dirname "$libdir")" "$tmp/consumer/pc"
echo "install check: find_package and pkg-config consumers built and ran"
