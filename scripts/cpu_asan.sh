#!/usr/bin/env bash
# CPU-only build of the library and its CPU tests under AddressSanitizer + UndefinedBehaviorSanitizer,
# then the CPU suite, FuzzOps at DSATTN_FUZZ_SCALE times its trials (default 20). No GPU or CUDA needed.
#   scripts/cpu_asan.sh [build-dir (default build-asan)] [fuzz scale]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan}
scale=${2:-20}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -O1"
cmake -S . -B "$dir" -DDSATTN_CUDA=OFF -DDSATTN_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build "$dir" -j"$(nproc)" --target dsattn_tests
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
"$dir/dsattn_tests" --gtest_brief=1
DSATTN_FUZZ_SCALE=$scale "$dir/dsattn_tests" --gtest_brief=1 --gtest_filter='FuzzOps.*'
