// Smoke test of the GPU test harness: skips on machines without a CUDA device.
#include <gtest/gtest.h>

#include "dsattn/ops.h"

TEST(GpuEnv, DeviceVisible) {
  if (!dsattn::cuda_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_GT(dsattn::cuda_num_sms(), 0);
}
