#!/usr/bin/env bash
# Set up .venv with hogwild and its test tools; safe to run again (does nothing when up to date).
#   ./bootstrap-env.sh          package + test extras, gRPC stubs, warm kernel cache
#   ./bootstrap-env.sh bench    the same plus the benchmark peers (scikit-learn, Vowpal Wabbit,
#                               PyTorch)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

extras="test"
case "${1:-}" in
  "") ;;
  bench) extras="test,bench" ;;
  *) echo "usage: $0 [bench]" >&2; exit 2 ;;
esac

python="${PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in python3.12 python3.11 python3.10 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      python="$candidate"; break
    fi
  done
fi
[ -n "$python" ] || { echo "bootstrap-env: need Python >= 3.10 (set PYTHON=...)" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap-env: creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi

# Reinstall only when the dependency list or the extras changed since the last run.
stamp=".venv/.hogwild-installed"
want="$(cat pyproject.toml setup.py 2>/dev/null | sha256sum | cut -d' ' -f1) $extras"
have="$(cat "$stamp" 2>/dev/null || true)"
if [ "$want" != "$have" ] && ! { [ "$extras" = "test" ] && [[ "$have" == "${want% *} test,bench" ]]; }; then
  echo "bootstrap-env: installing hogwild[$extras] into .venv"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[$extras]"
  echo "$want" > "$stamp"
fi

# gRPC stubs come from protos/ (generated only when missing or older than the .proto;
# `python -m hogwild.cluster.wire.build --force` regenerates them in any case).
.venv/bin/python -m hogwild.cluster.wire.build
# Bytecode for the sources and the stubs: an editable install writes none, and where
# PYTHONDONTWRITEBYTECODE is set (many CI and container environments) Python then compiles
# every module a command imports, in every process: 0.08 s of a 1 s `hogwild train` here.
# Up-to-date files are skipped.
.venv/bin/python -m compileall -q src >/dev/null
# Compile the numba kernels once so the first run does not pay for it.
.venv/bin/python -m hogwild.runtime.warmup
echo "bootstrap-env: ready (.venv/bin/hogwild)"
