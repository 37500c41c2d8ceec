#!/bin/bash
# Build what rl.sh carries to the GPU machine, on a machine with PyPI and Debian 12's apt
# (never on the GPU machine, which has no network). From the repository root:
#
#   bash benchmarks/gpu/rl_prepare.sh        # ~8 min on 2 cores; ~300 MB in ignored folders
#
# .rlb0-.rlb3: the RL bundle (vLLM 0.24.0 + verl 0.9.1 + Ray 2.60 + their import closure for
#   Python 3.12 / torch 2.11.0+cu130, rl-bundle-requirements.txt), installed with --target,
#   trimmed of what the H200 never loads, one xz tarball split in 4 parts (each part plus the
#   repository stays under the 64 MiB a device call carries; one part per call).
# .rlk: sha256 of the tarball, the TransferQueue 0.1.11 wheel (verl's default v1 trainer
#   imports transfer_queue), Debian 12's slurm 22.05 debs and libraries (for slurm2_up.sh).
set -euo pipefail
REPO=$(pwd)
PY312=${PY312:-$(command -v python3.12 || echo /root/.pyenv/versions/3.12.1/bin/python3.12)}
WORK=${WORK:-/tmp/sf-rl-bundle}
for d in .rlk .rlb0 .rlb1 .rlb2 .rlb3 .rlb4 .rlb5 .rlb6 .rlb7 .rlb8 .rlc0 .rlc1; do
  grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >>.git/info/exclude
done
mkdir -p "$WORK/wh" .rlk/debs
PLAT=(); for n in $(seq 5 39); do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
DL=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
    "${PLAT[@]}" --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
# 1. wheels; antlr4-python3-runtime 4.9.3 (hydra-core's pin) exists only as an sdist: build it
grep -v '^antlr4' benchmarks/gpu/rl-bundle-requirements.txt >"$WORK/req.txt"
"${DL[@]}" -d "$WORK/wh" -r "$WORK/req.txt"
if [[ ! -f "$WORK"/wh/antlr4_python3_runtime-4.9.3-py3-none-any.whl ]]; then
  python3 -m pip download -q --no-deps --no-binary=:all: -d "$WORK/antlr" antlr4-python3-runtime==4.9.3
  python3 -m pip wheel -q --no-deps -w "$WORK/wh" "$WORK"/antlr/antlr4-python3-runtime-4.9.3.tar.gz
fi
# 2. install into one folder (used through PYTHONPATH there), no deps, no bytecode
rm -rf "$WORK/site" && "$PY312" -m pip install -q --no-deps --no-compile --no-index --target "$WORK/site" "$WORK"/wh/*.whl
# 3. trim what the H200 run never loads: vLLM's FA2 library (Hopper uses FA3), its Rust
#    frontend, Ray's Java jar, a static library, deep_gemm builds for other Pythons
(cd "$WORK/site" && rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs ray/jars/ray_dist.jar \
  xgrammar/lib/libxgrammar.a vllm/third_party/deep_gemm/_C.cpython-31{0,1,3,4}-x86_64-linux-gnu.so &&
  rm -rf ray/rllib ray/llm)  # Ray's RL library and its LLM serving: neither verl nor Ray's core imports them
du -sh "$WORK/site"
# 4. one tarball in parts, each part plus the repository under the 64 MiB a device call
#    carries. xz -3 by default (about 3 minutes on 2 cores, 220 MB: 4 calls, the first one
#    also carrying .rlk and .sfsnap, so its part is smaller: FIRST_PART bytes); BUNDLE_XZ=0 for
#    gzip -1 (about 30 s on one core, 290 MB: 6 calls of 52 MB). rl.sh's untar reads either.
if [[ "${BUNDLE_XZ:-1}" == 1 ]]; then
  (cd "$WORK/site" && tar cf - . | xz -3 -T2 >"$WORK/bundle.tar.xz")
else
  (cd "$WORK/site" && tar cf - . | gzip -1 >"$WORK/bundle.tar.xz")  # name kept: rl.sh looks for it
fi
rm -rf .rlb[0-9]* "$WORK"/bundle.part.*
if [[ "${BUNDLE_XZ:-1}" == 1 ]]; then
  # the first part leaves room for .rlk (~12.5 MB) and .sfsnap (~1 MB); the rest in three
  size=$(stat -c %s "$WORK/bundle.tar.xz"); first=${FIRST_PART:-45500000}; each=$(( (size - first + 2) / 3 ))
  head -c "$first" "$WORK/bundle.tar.xz" >"$WORK/bundle.part.00"
  tail -c +$((first + 1)) "$WORK/bundle.tar.xz" | split -b "$each" -a 2 --numeric-suffixes=1 - "$WORK/bundle.part."
else
  split -b 52M -d -a 2 "$WORK/bundle.tar.xz" "$WORK/bundle.part."
fi
i=0; for part in "$WORK"/bundle.part.*; do mkdir -p ".rlb$i" && mv "$part" ".rlb$i/"; i=$((i + 1)); done
sha256sum "$WORK/bundle.tar.xz" | sed 's#  .*#  /tmp/bundle.tar.xz#' >.rlk/bundle.sha256
# 5. TransferQueue, py-spy, cupy and Slurm. cupy: verl 0.9.1's nccl checkpoint engine (the
#    disaggregated modes' weight sync) imports it; its wheel (69 MB) travels in two parts
"${DL[@]}" -d .rlk transferqueue==0.1.11 py-spy==0.4.3 'cuda-pathfinder>=1.3.4,<2'
"${DL[@]}" -d "$WORK/cupy" cupy-cuda13x==14.2.0
whl=$(ls "$WORK"/cupy/cupy_cuda13x-*.whl); basename "$whl" >.rlk/cupy.name
sha256sum "$whl" | cut -d' ' -f1 >.rlk/cupy.sha256
rm -rf .rlc0 .rlc1 && split -b 35M -d -a 2 "$whl" "$WORK/cupy/cupy.part."
mkdir -p .rlc0 .rlc1 && mv "$WORK/cupy/cupy.part.00" .rlc0/ && mv "$WORK/cupy/cupy.part.01" .rlc1/
# runc and libseccomp2: Slurm's OCI containers (rl.sh stage container, issue 32)
(cd .rlk/debs && apt-get download runc libseccomp2 slurmd slurmctld slurm-client slurm-wlm-basic-plugins libslurm38 munge \
  libmunge2 libjson-c5 libyaml-0-2 libjwt0 libhttp-parser2.9 libpmix2 libnuma1 libhwloc15 libdbus-1-3 \
  liblz4-1 libevent-core-2.1-7 libevent-pthreads-2.1-7 liblua5.1-0 libreadline8 libgcrypt20)
du -sh .rlk .rlb* .rlc*
