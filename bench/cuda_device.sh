#!/bin/bash
# The GPU machine's side of bench/cuda_compare.py, one call: install the carried tvm_ffi wheel, run every
# kernel of .gpu_bundle on the GPU and leave the results in $OUT.  From the repository root there:
#   bash bench/cuda_device.sh        (carry .gpu_bundle and .whl; see bench/README.md)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
nvidia-smi -L
python3 -c "import torch, numpy; print(torch.__version__, numpy.__version__, torch.cuda.get_device_name())"
PYTHONUNBUFFERED=1 timeout "${CUDA_RUN_SECONDS:-420}" python3 bench/cuda_device_run.py .gpu_bundle "${OUT:-/tmp/cuda_out}" \
    --workers "${CUDA_WORKERS:-12}" --parts /tmp/cuda_parts
