#!/usr/bin/env bash
# System packages plygrad needs that pip cannot install: a C compiler for the CPU backend (plygrad-cpu compiles
# every kernel with it, and the codegen tests compile the C they render). Does nothing when one is already there.
# Runs as root on the project's machines (apt-get); elsewhere it says what to install instead.
set -euo pipefail

if command -v "${CC:-cc}" >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || command -v clang >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup-system: no C compiler found, installing gcc with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
else
    echo "setup-system: no C compiler found; install gcc or clang (the CPU backend needs one)" >&2
    exit 1
fi
