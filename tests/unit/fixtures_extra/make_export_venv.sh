#!/usr/bin/env bash
# The venv the export/eval tests use as a verl runtime: torch (CPU wheel), transformers,
# and verl 0.9.1 --no-deps with what its model merger imports (verl/__init__ pulls ray,
# tensordict, accelerate, omegaconf). Idempotent; prints the venv path.
#   tests/unit/fixtures_extra/make_export_venv.sh [DIR]   (default /var/lib/sfdev/export-test-venv)
set -euo pipefail
DIR="${1:-/var/lib/sfdev/export-test-venv}"
ok() { "$DIR/bin/python" -c 'import torch, transformers, tensordict, accelerate, ray, pandas, importlib.metadata as m; assert m.version("verl") == "0.9.1"' 2>/dev/null; }
if [[ -x "$DIR/bin/python" ]] && ok; then echo "$DIR"; exit 0; fi
mkdir -p "$(dirname "$DIR")"
# 3.11, as the container's Debian base has; the distribution's build first (scripts/lib/python.sh says why)
[[ -x "$DIR/bin/python" ]] || /usr/bin/python3.11 -m venv "$DIR" 2>/dev/null || python3.11 -m venv "$DIR" 2>/dev/null \
  || python3 -m venv "$DIR"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/scripts/lib/pip.sh"  # py_install: uv, else pip
# torch through pip: the machine's pip configuration may hold a CPU wheel of it that uv does
# not see (uv would fetch PyPI's CUDA build); the rest through py_install, torch pinned there
pip_install "$DIR/bin/python" torch==2.13.0
py_install "$DIR/bin/python" torch==2.13.0 'transformers>=5.5.3,<5.11,!=5.6.0' accelerate \
  'tensordict>=0.8.0,<=0.10.0,!=0.9.0' numpy tqdm packaging omegaconf ray pandas pyarrow
py_install "$DIR/bin/python" --no-deps verl==0.9.1
ok || { echo "export test venv $DIR is incomplete" >&2; exit 1; }
echo "$DIR"
