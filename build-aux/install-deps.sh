#!/bin/sh
# Install, from Debian's archive, what gpushare needs that is not installed
# yet.  Fast when everything is there already.
#   install-deps.sh --run   what building and running it needs (quickstart.sh)
#   install-deps.sh         that, and what its tests need (check.sh, CI)
# The CUDA headers are checked first: Debian 12 has none recent enough, so
# they are the one thing to install by hand, and better said before any
# package is installed than after.
set -eu

run_only=0
case "${1:-}" in
--run) run_only=1 ;;
"") ;;
*) echo "usage: install-deps.sh [--run]" >&2; exit 2 ;;
esac

cuda="${CUDA_DIR:-/usr/local/cuda}"
if [ ! -f "$cuda/include/cuda.h" ]; then
    cat >&2 <<EOF
install-deps: gpushare is built against the CUDA 12 or 13 headers (cuda.h), and
  $cuda/include/cuda.h is missing.  Debian 12 has none recent enough (non-free's
  nvidia-cuda-dev is CUDA 11.8), so install NVIDIA's CUDA toolkit for Debian 12
  (from NVIDIA's apt repository: cuda-toolkit-12-8 or any 12.x/13.x; or its
  runfile with --toolkit), which puts them in /usr/local/cuda.  Headers that are
  elsewhere: run again with CUDA_DIR=/path (the directory that holds
  include/cuda.h).  No GPU or NVIDIA driver is needed to build: without one,
  gpushare runs on its simulated GPU.
EOF
    exit 1
fi

# Building and running: the compiler and autotools, the libraries, and the
# Jupyter Notebook server the quick start runs.  libcmocka-dev: the
# simulated GPU's test helpers are built with it.  jupyter-core is the
# `jupyter` command; its subcommands come with jupyter-client (jupyter
# kernelspec, run), jupyter-nbconvert and jupyter-notebook (Debian keeps
# each package's scripts apart from its python3- module).
RUN_PACKAGES="build-essential autoconf automake libtool pkg-config
libzmq3-dev libczmq-dev libjansson-dev libsodium-dev libmicrohttpd-dev libcmocka-dev
python3 python3-zmq python3-jupyter-client python3-ipykernel python3-notebook
jupyter-core jupyter-client jupyter-nbconvert jupyter-notebook"
# Testing: clang-format (check-format.sh); pytest, nbclient, nbformat (the
# integration tests); debhelper, dh-python: test_debian_package.py builds
# the .debs; systemd: systemd-analyze checks the unit; python3-yaml,
# kubernetes-client (kubectl): test_kubernetes_manifests.py; jupyterhub ...
# python3-selenium: test_jupyterhub.py (a hub, offline) and test_browser.py
# (headless Chromium); python3-matplotlib: bench/eval's report
# (test_eval_smoke.py); tmux: test_cli_top.py and test_broker_terminal.py
# drive programs in a terminal; clang, libclang-rt-14-dev (libFuzzer):
# tests/fuzz/run.sh.
TEST_PACKAGES="clang-format python3-pytest python3-nbclient python3-nbformat
debhelper dh-python systemd
python3-yaml kubernetes-client
clang libclang-rt-14-dev
jupyterhub node-configurable-http-proxy python3-requests
chromium chromium-driver python3-selenium python3-matplotlib tmux"

PACKAGES=$RUN_PACKAGES
[ "$run_only" = 1 ] || PACKAGES="$PACKAGES $TEST_PACKAGES"

missing=""
for p in $PACKAGES; do
    # Any kubectl will do; Debian's would replace one installed by hand.
    [ "$p" = kubernetes-client ] && command -v kubectl >/dev/null && continue
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
what="build and test"
[ "$run_only" = 1 ] && what="build and run"
if [ -z "$missing" ]; then
    echo "install-deps: all $what dependencies are installed"
else
    echo "install-deps: installing:$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -q --no-install-recommends $missing
fi
