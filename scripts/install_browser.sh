#!/usr/bin/env bash
# Installs what the browser tests of the HTML reports need (tests/test_review_browser.py):
# Debian's Chromium at /usr/bin/chromium (apt-get, only when it is missing) and the Playwright
# Python driver into ./.venv. Playwright is told never to download browsers of its own: the tests
# launch /usr/bin/chromium. Idempotent: a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
if [ ! -x /usr/bin/chromium ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver
fi
[ -x .venv/bin/python ] || { echo "run scripts/install.sh first (no .venv)" >&2; exit 1; }
.venv/bin/python -m pip install -q "playwright>=1.40"
