# find_python: the first python >= 3.10 here that can make a venv with pip in it (imports venv
# and ensurepip: Debian's python3 without python3-venv cannot); prints its path, or nothing.
# Sourced by the install and build scripts, not run.
# The distribution's own /usr/bin/python3 comes first: Debian builds it with profile-guided and
# link-time optimisation, while a pyenv Python built by default (no --enable-optimizations,
# libpython shared) spends more CPU on the same work: a Ray start-up with 8 tasks took 4.0
# against 3.5 CPU-s (medians of 3, 2026-12-03), and the dev cluster's tests are CPU-bound.
find_python() {
  local c
  for c in /usr/bin/python3 python3.12 python3.11 python3.10 python3; do
    if command -v "$c" >/dev/null && "$c" -c "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))" 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
}
