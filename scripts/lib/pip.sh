# Every Python package install of the set-up scripts and the tests' builds goes through here
# (tests/unit/test_pip_installs.py checks that none bypasses it); sourced, not run. uv installs when the login venv has it (scripts/install puts it there
# first): cold (no cache, bytecode compiled as pip does) on the 2-core dev host, a runtime's
# packages took 17.5 s with uv against 69.5 s with pip, the login venv 12.1 s against 37.6 s
# (2026-12-03). pip installs when uv is missing or fails (a site whose index only pip's
# configuration knows: uv reads no pip.conf), so nothing depends on uv.
export PIP_DISABLE_PIP_VERSION_CHECK=1
UV_BIN="${UV_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv/bin/uv}"

# pip's "Location ... is ignored" warnings (a site index setting) are noise: drop them.
pipq() { "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2; }

# py_install PYTHON ARGS...: `pip install ARGS` into the environment of PYTHON (a venv's python).
py_install() {
  local py=$1; shift
  if [[ -x "$UV_BIN" ]]; then
    pipq "$UV_BIN" pip install -q --compile-bytecode --python "$py" "$@" && return 0
    echo "[pip.sh] uv could not install $* into $py: pip tries" >&2
  fi
  pipq "$py" -m pip install -q "$@"
}

# pip_install PYTHON ARGS...: pip alone, for what must follow this machine's pip configuration
# (a CPU wheel of torch on its find-links, a site's own index: uv reads no pip.conf).
pip_install() {
  local py=$1; shift
  pipq "$py" -m pip install -q "$@"
}

# pip_install_target PYTHON DIR ARGS...: packages into folder DIR (pip's --target) for PYTHON's
# version. DIR is not PYTHON's environment, so that environment's own unmet requirements are no
# concern of this install (the dev venv's verl is installed --no-deps): without
# --no-warn-conflicts pip printed them as a "dependency resolver" ERROR block into the test log.
pip_install_target() {
  local py=$1 dir=$2; shift 2
  pipq "$py" -m pip install -q --no-warn-conflicts --target "$dir" "$@"
}
