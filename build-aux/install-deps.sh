#!/bin/sh
# Install, from Debian's archive, whatever gpushare needs to build, test and
# run that is not installed yet.  Fast when everything is there already.
set -eu

PACKAGES="build-essential autoconf automake libtool pkg-config clang-format
libzmq3-dev libczmq-dev libjansson-dev libsodium-dev libmicrohttpd-dev libcmocka-dev
python3 python3-pytest python3-zmq python3-jupyter-client python3-ipykernel
python3-nbclient python3-nbformat python3-notebook
debhelper dh-python systemd
python3-yaml kubernetes-client
jupyterhub node-configurable-http-proxy python3-requests
chromium chromium-driver python3-selenium python3-matplotlib tmux"
# debhelper, dh-python: test_debian_package.py builds the .debs; systemd:
# systemd-analyze checks the unit; python3-yaml, kubernetes-client (kubectl):
# test_kubernetes_manifests.py; jupyterhub ... python3-selenium:
# test_jupyterhub.py (a hub, offline) and test_browser.py (headless Chromium);
# tmux: test_cli_top.py drives `gpushare top` in a terminal.

missing=""
for p in $PACKAGES; do
    # Any kubectl will do; Debian's would replace one installed by hand.
    [ "$p" = kubernetes-client ] && command -v kubectl >/dev/null && continue
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "install-deps: all build and test dependencies are installed"
else
    echo "install-deps: installing:$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -q --no-install-recommends $missing
fi

cuda="${CUDA_DIR:-/usr/local/cuda}"
if [ ! -f "$cuda/include/cuda.h" ]; then
    echo "install-deps: $cuda/include/cuda.h is missing: install the CUDA toolkit headers" >&2
    echo "  (NVIDIA's cuda-toolkit, or Debian non-free's nvidia-cuda-dev) or set CUDA_DIR" >&2
    exit 1
fi
