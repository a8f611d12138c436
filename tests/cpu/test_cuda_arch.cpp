// Which devices a build's DSATTN_CUDA_ARCHS run on (src/common/cuda_arch.h): the rules of CUDA's
// binary compatibility for plain, arch-specific ('a') and family ('f') targets.
#include <gtest/gtest.h>

#include "common/cuda_arch.h"

namespace dsattn {
namespace detail {
namespace {

TEST(CudaArch, PlainCodeRunsOnLaterMinorsOfItsMajor) {
  EXPECT_TRUE(arch_list_runs_on("80", 8, 0));
  EXPECT_TRUE(arch_list_runs_on("80", 8, 6));   // A10 / RTX 30xx
  EXPECT_TRUE(arch_list_runs_on("80", 8, 9));
  EXPECT_FALSE(arch_list_runs_on("89", 8, 6));  // not an earlier minor
  EXPECT_FALSE(arch_list_runs_on("80", 9, 0));  // nor another major
}

TEST(CudaArch, ArchSpecificCodeRunsOnlyOnItsOwnCapability) {
  EXPECT_TRUE(arch_list_runs_on("90a", 9, 0));
  EXPECT_FALSE(arch_list_runs_on("100a", 10, 3));  // B300 needs 100f (or 103a)
  EXPECT_FALSE(arch_list_runs_on("120a", 12, 1));  // DGX Spark needs 120f (or 121a)
  EXPECT_TRUE(arch_list_runs_on("121a", 12, 1));
}

TEST(CudaArch, FamilyCodeRunsOnTheFamily) {
  EXPECT_TRUE(arch_list_runs_on("100f", 10, 0));
  EXPECT_TRUE(arch_list_runs_on("100f", 10, 3));
  EXPECT_TRUE(arch_list_runs_on("120f", 12, 0));
  EXPECT_TRUE(arch_list_runs_on("120f", 12, 1));
  EXPECT_FALSE(arch_list_runs_on("120f", 11, 0));
}

TEST(CudaArch, TheDefaultListCoversTheGpusTheProjectTargets) {
  const std::string def = "80;89;90a;100f;120f";  // CMakeLists.txt's default DSATTN_CUDA_ARCHS
  for (auto cc : {std::pair<int, int>{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {10, 3}, {12, 0}, {12, 1}}) {
    EXPECT_TRUE(arch_list_runs_on(def, cc.first, cc.second)) << cc.first << "." << cc.second;
  }
  EXPECT_FALSE(arch_list_runs_on(def, 7, 5));
  EXPECT_FALSE(arch_list_runs_on(def, 11, 0));
}

TEST(CudaArch, ListsParseWithEitherSeparatorAndRejectJunk) {
  EXPECT_TRUE(arch_list_runs_on(" 80 , 90a ", 9, 0));
  EXPECT_FALSE(arch_list_runs_on("", 9, 0));
  EXPECT_FALSE(arch_list_runs_on("90x,9,compute_90,90af", 9, 0));
  EXPECT_EQ(arch_list_text("80;89;90a"), "80, 89, 90a");
}

TEST(CudaArch, SuggestedEntryRunsOnTheDevice) {
  for (auto cc : {std::pair<int, int>{8, 6}, {8, 9}, {9, 0}, {10, 3}, {11, 0}, {12, 1}}) {
    const std::string e = arch_for_device(cc.first, cc.second);
    EXPECT_TRUE(arch_list_runs_on(e, cc.first, cc.second)) << e;
  }
  EXPECT_EQ(arch_for_device(9, 0), "90a");
  EXPECT_EQ(arch_for_device(12, 1), "120f");
}

}  // namespace
}  // namespace detail
}  // namespace dsattn
