#!/bin/bash
# Build the ignored carry folders that run.sh needs, on a machine with network (not the GPU
# machine): .whl/ (Python 3.12 x86_64 wheels the image lacks, ray repacked) and .debs/
# (Debian 12's slurm 22.05 and its libraries). Run from the repository root; add
# `/.whl/` and `/.debs/` to .git/info/exclude (never commit them). About 56 MB in all.
set -euo pipefail
REPO=$(pwd)
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
grep -qx '/.debs/' .git/info/exclude 2>/dev/null || echo '/.debs/' >>.git/info/exclude
mkdir -p .whl/alt .debs
DL=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# What verl 0.9.1's SFT trainer and model merger import and the image (device KINDS.md) lacks;
# versions chosen so that their own requirements hold against the image's packages.
"${DL[@]}" -d .whl verl==0.9.1 hydra-core==1.3.8 omegaconf==2.3.1 tensordict==0.10.0 orjson==3.13.0 \
  pyvers==0.1.0 importlib_metadata==8.9.0 torchdata==0.11.0 codetiming==1.4.0 datasets==4.8.5 dill==0.4.1 \
  multiprocess==0.70.19 pylatexenc==2.11 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
  referencing==0.37.0 rpds-py==2026.9.1 submitit==1.5.4 pydantic==2.11.10 pydantic-core==2.33.2 \
  annotated-types==0.8.0 typing-inspection==0.4.1 fastapi==0.115.14 starlette==0.46.2 uvicorn==0.54.0
# antlr4-python3-runtime 4.9.3 (hydra-core pins 4.9.*) exists only as an sdist: build its wheel.
python3 -m pip download -q --no-deps --no-binary=:all: -d /tmp/antlr-src antlr4-python3-runtime==4.9.3
python3 -m pip wheel -q --no-deps -w .whl /tmp/antlr-src/antlr4-python3-runtime-4.9.3.tar.gz
# Optional: transformers inside verl's pin (<5.11), used only with USE_ALT_TRANSFORMERS=1.
"${DL[@]}" -d .whl/alt transformers==5.10.4 tokenizers==0.22.2
# ray 2.60.0: its wheel is 79 MB, over the 64 MiB a call carries. Repack its contents with xz,
# leaving out ray/jars/ray_dist.jar (the Java worker jar, 34.5 MB, never loaded by Python): 28 MB.
T=$(mktemp -d)
"${DL[@]}" -d "$T" ray==2.60.0
(cd "$T" && mkdir x && cd x && unzip -q ../ray-2.60.0-*.whl && tar cf - --exclude=./ray/jars/ray_dist.jar . | xz -9 -T2 >"$REPO/.whl/ray-2.60.0-cp312-nojar.tar.xz")
rm -rf "$T"
# Slurm: Debian 12 (bookworm) packages, fetched with apt-get on a Debian 12 machine.
(cd .debs && apt-get download slurmd slurmctld slurm-client slurm-wlm-basic-plugins libslurm38 munge \
  libmunge2 libjson-c5 libyaml-0-2 libjwt0 libhttp-parser2.9 libpmix2 libnuma1 libhwloc15 libdbus-1-3 \
  liblz4-1 libevent-core-2.1-7 libevent-pthreads-2.1-7 liblua5.1-0 libreadline8 libgcrypt20)
du -sh .whl .debs
