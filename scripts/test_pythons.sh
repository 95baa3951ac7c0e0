#!/usr/bin/env bash
# Run the test suite on other Python versions (the suite must pass on every supported Python: 3.11, 3.12, 3.13).
#
# Builds a throwaway virtual environment per interpreter (outside the repository), installs perfwarden
# with every dependency that has a wheel for that Python except torch and the packages that only make
# sense with it (torch 2.13.0 CPU exists only for 3.11 here), and runs the suite. Tests that need torch,
# transformers or mlcommons-loadgen skip themselves (pytest.importorskip); the real-model end-to-end
# test is left out as in the normal fast run.
#
#   scripts/test_pythons.sh                 # every python3.12/python3.13 found (pyenv versions included)
#   scripts/test_pythons.sh 3.12.1 3.13.0   # these pyenv versions (or paths to interpreters)
#   KEEP_VENVS=1 scripts/test_pythons.sh    # keep the environments (in $TMPDIR/perfwarden-py*)
#   PYTEST_ARGS="tests/test_hostile_input.py" scripts/test_pythons.sh   # a subset
#
# Exit status: 0 when every interpreter passed, 1 otherwise (each one's summary is printed).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
TMP=${TMPDIR:-/tmp}
PYENV_ROOT=${PYENV_ROOT:-$HOME/.pyenv}

find_python() {  # a version like 3.12.1, a minor like 3.12, or a path
  local want=$1
  if [ -x "$want" ]; then echo "$want"; return; fi
  if [ -x "$PYENV_ROOT/versions/$want/bin/python" ]; then echo "$PYENV_ROOT/versions/$want/bin/python"; return; fi
  local hit
  hit=$(ls -d "$PYENV_ROOT"/versions/"$want".* 2>/dev/null | sort -V | tail -1)
  if [ -n "$hit" ] && [ -x "$hit/bin/python" ]; then echo "$hit/bin/python"; return; fi
  command -v "python$want" 2>/dev/null
}

if [ $# -eq 0 ]; then set -- 3.12 3.13; fi

# Everything from pyproject.toml that is not torch-bound. Version floors as in pyproject.toml.
DEPS=(
  "pydantic>=2.7" "msgspec>=0.18" "orjson>=3.9" "numpy>=1.26" "scipy>=1.11" "typer>=0.12" "rich>=13"
  "httpx>=0.27" "openai>=3.50" "langgraph>=1.2" "langgraph-checkpoint-sqlite>=2.0" "pytest>=8" "pytest-timeout>=2.3"
  "hypothesis>=6.100" "starlette>=0.37" "uvicorn>=0.30"
)
OPTIONAL=("mlcommons-loadgen>=5.0" "playwright>=1.40")  # installed when a wheel exists, else skipped

status=0
for want in "$@"; do
  py=$(find_python "$want")
  if [ -z "$py" ]; then echo "== python $want: not found, skipped"; status=1; continue; fi
  ver=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
  venv="$TMP/perfwarden-py$ver"
  echo "== python $ver ($py) -> $venv"
  rm -rf "$venv"
  "$py" -m venv "$venv" || { echo "   cannot create a venv"; status=1; continue; }
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1
  if ! "$venv/bin/python" -m pip install -q "${DEPS[@]}" >"$venv/deps.log" 2>&1; then
    echo "   dependencies did not install:"; grep -v "^WARNING: Location" "$venv/deps.log" | tail -20; status=1; continue
  fi
  for opt in "${OPTIONAL[@]}"; do
    "$venv/bin/python" -m pip install -q "$opt" >/dev/null 2>&1 || echo "   ($opt has no wheel here: its tests skip)"
  done
  # A plain (non-editable) install from a copy of the sources: the repository's own .venv, build/ and
  # egg-info are left untouched.
  src="$venv/src"
  mkdir -p "$src"
  git -C "$REPO" ls-files -z --cached --others --exclude-standard | (cd "$REPO" && xargs -0 cp --parents -t "$src")
  if ! "$venv/bin/python" -m pip install -q --no-deps "$src" >"$venv/install.log" 2>&1; then
    echo "   perfwarden did not install:"; tail -20 "$venv/install.log"; status=1; continue
  fi
  log="$venv/pytest.log"
  # shellcheck disable=SC2086
  (cd "$REPO" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --ignore=tests/test_embedded_run_e2e.py \
     ${PYTEST_ARGS:-tests}) > "$log" 2>&1
  rc=$?
  tail -15 "$log"
  [ "$rc" -eq 0 ] || status=1
  echo "== python $ver: pytest exit $rc"
  [ -n "${KEEP_VENVS:-}" ] || rm -rf "$venv"
done
exit $status
