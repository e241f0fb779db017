#!/usr/bin/env bash
# The GPU check as one command on a lent GPU machine whose image has torch but not every
# dependency, from the repository root:
#
#   bash benchmarks/gpu_run.sh [OUT_DIR]
#
# 1. Dependencies the image lacks (msgspec, nvtx, zlib-ng) come as wheels in .whl/ (ignored by
#    git), fetched beforehand on a machine with pip, for the image's Python (3.12 here):
#      python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#        --platform manylinux2014_x86_64 -d .whl msgspec nvtx zlib-ng
#    Without .whl/ the packages must already be importable.
# 2. asynctrace runs from this checkout (PYTHONPATH), without the loader's C accelerator: the
#    pure-Python loader gives the same results on the small traces the check records.
# 3. benchmarks/gpu_check.py writes everything under traces/gpu/<device-name>/, then the folder
#    is packed into OUT_DIR/gpu_check.tar.gz (default: $OUT, else /tmp) as one file, since a
#    device machine hands back a few files only. Unpack it here with
#      tar -xzf gpu_check.tar.gz -C traces/gpu/
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD"
if [ -d .whl ]; then
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/asynctrace-site .whl/*.whl; then
        export PYTHONPATH="/tmp/asynctrace-site:$PWD"
    else
        echo "the wheels in .whl/ do not fit this Python: using the packages installed"
    fi
fi
dest="${1:-${OUT:-/tmp}}"
mkdir -p "$dest"
name="$(python3 -c 'import re, torch
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
print(re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-"))')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$dest/nvidia-smi.csv" || true
status=0
python3 benchmarks/gpu_check.py --out "traces/gpu/$name" 2>&1 | tee "$dest/gpu_check.log" || status=$?
tar -czf "$dest/gpu_check.tar.gz" -C traces/gpu "$name"
echo "packed traces/gpu/$name into $dest/gpu_check.tar.gz (gpu_check status $status)"
exit "$status"
