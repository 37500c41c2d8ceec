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
[[ -x "$DIR/bin/python" ]] || python3.11 -m venv "$DIR" 2>/dev/null || python3 -m venv "$DIR"
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$DIR/bin/pip" install -q torch==2.13.0 >&2
"$DIR/bin/pip" install -q 'transformers>=5.5.3,<5.11,!=5.6.0' accelerate 'tensordict>=0.8.0,<=0.10.0,!=0.9.0' \
  numpy tqdm packaging omegaconf ray pandas pyarrow >&2
"$DIR/bin/pip" install -q --no-deps verl==0.9.1 >&2
ok || { echo "export test venv $DIR is incomplete" >&2; exit 1; }
echo "$DIR"
