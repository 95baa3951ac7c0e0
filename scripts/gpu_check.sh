#!/usr/bin/env bash
# One command that verifies perfwarden's GPU path on a CUDA host and prints one table.
#
#   bash scripts/gpu_check.sh [OUT_DIR]
#
# Runs every GPU-only test and benchmark: the op bench on the device against triton.testing.do_bench
# (benchmarks/opbench_gpu.py), the op bench's and the embedded target's CUDA tests (device=cuda, both
# dtypes, pretrained weights where the weights wheel is installed and the seeded random weights always),
# the sandbox's GPU pass-through, and vLLM on the GPU where its CUDA build is installed. Each step has its
# own time limit (about 8 minutes in all); a step that cannot run says why in its row, never silently.
#
# Interpreter: $PERFWARDEN_GPU_PYTHON, else .venv/bin/python when it sees a GPU, else python3.
# A host with no package registry (the project's lent GPU machines) can bring what is missing in
# .gpu/whl/*.whl (installed with --no-index into that interpreter) and bubblewrap in .gpu/bin/bwrap.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT_DIR="${1:-${OUT:-$(mktemp -d)}}"
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
ROWS="$OUT_DIR/gpu_check.tsv"
: >"$LOG"
printf 'check\tresult\tseconds\tdetail\n' >"$ROWS"

row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4//$'\t'/ }" >>"$ROWS"; }

pick_python() {
    if [[ -n "${PERFWARDEN_GPU_PYTHON:-}" ]]; then echo "$PERFWARDEN_GPU_PYTHON"; return; fi
    if [[ -x .venv/bin/python ]] && .venv/bin/python -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        echo "$REPO/.venv/bin/python"; return
    fi
    command -v python3
}
PY=$(pick_python)

# ---------------------------------------------------------------- bring what a bare GPU host lacks
# Only with PERFWARDEN_GPU_CHECK_SETUP=1 (it installs into $PY's environment: meant for a throwaway host).
if [[ "${PERFWARDEN_GPU_CHECK_SETUP:-0}" == 1 ]]; then
    if [[ -x .gpu/bin/bwrap ]] && ! command -v bwrap >/dev/null; then export PATH="$REPO/.gpu/bin:$PATH"; fi
    if ! "$PY" -c 'import pydantic, msgspec, orjson, mlperf_loadgen' 2>/dev/null && compgen -G ".gpu/whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile .gpu/whl/*.whl >>"$LOG" 2>&1 || echo "wheels: pip failed" >>"$LOG"
    fi
    if ! "$PY" -c 'import perfwarden.harness' 2>/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$LOG" 2>&1 || echo "editable install failed" >>"$LOG"
    fi
    if ! "$PY" -c 'import perfwarden.harness' 2>/dev/null; then  # fall back to a folder named perfwarden on PYTHONPATH
        shim=$(mktemp -d) && mkdir -p "$shim/perfwarden"
        for d in agents auditor cli formats harness orchestrator proof redteam skills verify; do [[ -d $d ]] && ln -s "$REPO/$d" "$shim/perfwarden/$d"; done
        export PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi
"$PY" -c 'import perfwarden.harness' >>"$LOG" 2>&1 || row setup FAIL 0 "perfwarden does not import with $PY (PERFWARDEN_GPU_CHECK_SETUP=1 installs it)"

# ------------------------------------------------------------------------------------- the host
start=$SECONDS
host=$("$PY" - <<'EOF' 2>>"$LOG"
import torch
try:
    import triton
    tri = triton.__version__
except Exception as exc:  # noqa: BLE001 -- reported in the row
    tri = f"absent ({type(exc).__name__})"
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
print(f"gpu={gpu}; torch={torch.__version__}; cuda={torch.version.cuda}; triton={tri}")
EOF
)
driver=$(nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
row host "$([[ -n $host ]] && echo ok || echo FAIL)" $((SECONDS - start)) "${host:-torch did not import; see gpu_check.log}; driver=${driver:-nvidia-smi absent}"
if ! "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>>"$LOG"; then
    row cuda FAIL 0 "torch.cuda.is_available() is False with $PY: nothing GPU-only can run"
fi

start=$SECONDS
why=$(timeout 60 "$PY" -c 'from perfwarden.harness import sandbox; print(sandbox.available() or "")' 2>>"$LOG")
rc=$?
if [[ $rc -ne 0 ]]; then row sandbox FAIL $((SECONDS - start)) "the probe did not finish (rc=$rc; see gpu_check.log)"
elif [[ -n "$why" ]]; then row sandbox FAIL $((SECONDS - start)) "$why"
else row sandbox ok $((SECONDS - start)) "bwrap namespaces work: op bench workers and servers are confined"; fi

# ------------------------------------------------------------------------- the GPU-only tests
start=$SECONDS
PYTHONUNBUFFERED=1 timeout 300 "$PY" -m pytest -p no:cacheprovider -q -rA --timeout 240 \
    tests/test_opbench_device.py tests/test_embedded_device.py tests/test_sandbox.py \
    -k "cuda or gpu" >"$OUT_DIR/gpu_pytest.log" 2>&1
rc=$?
cat "$OUT_DIR/gpu_pytest.log" >>"$LOG"
"$PY" - "$OUT_DIR/gpu_pytest.log" "$rc" "$((SECONDS - start))" >>"$ROWS" <<'EOF'
import re, sys
text, rc, secs = open(sys.argv[1], errors="replace").read(), int(sys.argv[2]), sys.argv[3]
counts: dict[str, int] = {}
for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\S+)(?: - (.*))?$", text, re.M):
    status, name, why = m.group(1), m.group(2).split("::")[-1], (m.group(3) or "")[:160]
    counts[status] = counts.get(status, 0) + 1
    print(f"pytest {name}\t{'ok' if status == 'PASSED' else status}\t-\t{why}")
for m in re.finditer(r"^SKIPPED \[(\d+)\] (\S+?):? (.*)$", text, re.M):
    counts["SKIPPED"] = counts.get("SKIPPED", 0) + int(m.group(1))
    print(f"pytest {m.group(2)} ({m.group(1)} tests)\tskipped\t-\t{m.group(3)[:160]}")
summary = ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items())) or "no test ran"
print(f"pytest (GPU tests)\t{'ok' if rc == 0 else 'FAIL'}\t{secs}\t{summary}"
      + ("" if rc in (0, 1) else f"; exit {rc} (124 = out of time)"))
EOF

# ------------------------------------------------------------- the op bench against do_bench
start=$SECONDS
PYTHONUNBUFFERED=1 timeout 150 "$PY" benchmarks/opbench_gpu.py --iters 50 --trials 3 >"$OUT_DIR/opbench_gpu.log" 2>&1
rc=$?
cat "$OUT_DIR/opbench_gpu.log" >>"$LOG"
detail=$(grep -Eiv '^\s*$' "$OUT_DIR/opbench_gpu.log" | tail -1 | cut -c1-200)
case $rc in
    0) row "op bench vs do_bench" ok $((SECONDS - start)) "$detail" ;;
    124) row "op bench vs do_bench" FAIL $((SECONDS - start)) "out of time (150 s): $detail" ;;
    *) row "op bench vs do_bench" FAIL $((SECONDS - start)) "exit $rc: $detail" ;;
esac

# ----------------------------------------------------------------------------- vLLM on the GPU
start=$SECONDS
VLLM_PY="${PERFWARDEN_VLLM_PYTHON:-$PY}"
if "$VLLM_PY" -c 'import vllm' 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout 150 "$VLLM_PY" - >"$OUT_DIR/vllm_gpu.log" 2>&1 <<'EOF'
from vllm import LLM, SamplingParams
import os
llm = LLM(model=os.environ.get("PERFWARDEN_VLLM_MODEL", "HuggingFaceTB/SmolLM2-135M-Instruct"), max_model_len=2048)
out = llm.generate(["The capital of France is"], SamplingParams(max_tokens=8, temperature=0))
print("vllm generated:", repr(out[0].outputs[0].text))
EOF
    rc=$?
    cat "$OUT_DIR/vllm_gpu.log" >>"$LOG"
    row "vllm on the GPU" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" $((SECONDS - start)) "$(tail -1 "$OUT_DIR/vllm_gpu.log" | cut -c1-160)"
else
    row "vllm on the GPU" skipped $((SECONDS - start)) "vLLM's CUDA build is not installed for $VLLM_PY (set PERFWARDEN_VLLM_PYTHON)"
fi

# --------------------------------------------------------------------------------- one table
echo
echo "perfwarden GPU check -- ${host:-host unknown}; driver ${driver:-?}"
column -t -s $'\t' "$ROWS" 2>/dev/null || cat "$ROWS"
fails=$(awk -F'\t' 'NR > 1 && ($2 == "FAIL" || $2 == "FAILED" || $2 == "ERROR")' "$ROWS" | wc -l)
echo "rows failed: $fails (log: $LOG)"
echo
echo "op bench vs do_bench (benchmarks/opbench_gpu.py):"
grep -Ev '^\s*$' "$OUT_DIR/opbench_gpu.log" | tail -25
[[ $fails -eq 0 ]]
