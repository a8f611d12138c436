// mqa_logits_chunked on the CPU backend: chunks of rows through a small buffer give exactly the rows
// of one mqa_logits call; argument errors name the op and the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "dsattn/codecs.h"
#include "dsattn/ops.h"

namespace dsattn {
namespace {

struct Prefill {
  int M = 21, Nk = 40, H = 8, D = 32;
  std::vector<uint8_t> q, k;
  std::vector<float> w, ksc;
  std::vector<int32_t> ks, ke;
  MqaLogitsParams p;
  explicit Prefill(bool compressed) {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> nd(0.f, 1.f);
    q.resize(size_t(M) * H * D);
    k.resize(size_t(Nk) * D);
    for (auto& x : q) x = codec::f32_to_e4m3(nd(rng));
    for (auto& x : k) x = codec::f32_to_e4m3(nd(rng));
    w.resize(size_t(M) * H);
    for (auto& x : w) x = nd(rng);
    ksc.assign(Nk, 0.125f);
    ks.resize(M);
    ke.resize(M);
    for (int m = 0; m < M; ++m) {
      ks[m] = m % 5;
      ke[m] = std::min(Nk, ks[m] + 3 + m);
    }
    p.q = make_tensor(q.data(), DType::kF8E4M3, {M, H, D});
    p.weights = make_tensor(w.data(), DType::kF32, {M, H});
    p.k = make_tensor(k.data(), DType::kF8E4M3, {Nk, D});
    p.k_scales = make_tensor(ksc.data(), DType::kF32, {Nk});
    p.ks = make_tensor(ks.data(), DType::kI32, {M});
    p.ke = make_tensor(ke.data(), DType::kI32, {M});
    p.compressed = compressed;
    p.clean = true;
  }
};

void expect_same_as_one_call(bool compressed, size_t buffer_rows) {
  Prefill f(compressed);
  const int64_t W = compressed ? 30 : f.Nk;
  std::vector<float> whole(size_t(f.M) * W, 7.f);
  MqaLogitsParams one = f.p;
  one.logits = make_tensor(whole.data(), DType::kF32, {f.M, W});
  Exec ex;
  ASSERT_TRUE(mqa_logits(one, ex).ok());

  std::vector<float> buf(buffer_rows * W), got(size_t(f.M) * W, 9.f);
  MqaLogitsChunkedParams c;
  c.base = f.p;
  c.width = compressed ? W : 0;
  c.chunk_buffer = buf.data();
  c.chunk_buffer_bytes = buf.size() * sizeof(float);
  int calls = 0;
  int64_t next_row = 0;
  c.on_chunk = [&](int64_t row0, int64_t rows, const TensorView& lg) {
    EXPECT_EQ(row0, next_row);
    EXPECT_LE(rows, int64_t(buffer_rows));
    EXPECT_EQ(lg.shape[0], rows);
    EXPECT_EQ(lg.shape[1], W);
    std::memcpy(&got[size_t(row0) * W], lg.data, size_t(rows) * W * sizeof(float));
    next_row = row0 + rows;
    ++calls;
    return Status::Ok();
  };
  const Status s = mqa_logits_chunked(c, ex);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(next_row, f.M);
  EXPECT_EQ(calls, int((f.M + buffer_rows - 1) / buffer_rows)) << "chunks of " << buffer_rows;
  EXPECT_EQ(std::memcmp(got.data(), whole.data(), got.size() * sizeof(float)), 0);
}

TEST(MqaLogitsChunked, ChunksEqualOneCall) {
  expect_same_as_one_call(false, 8);
  expect_same_as_one_call(false, 5);  // fewer than 8 rows fit: chunks of 5
  expect_same_as_one_call(true, 16);
  expect_same_as_one_call(true, 100);  // one chunk
}

TEST(MqaLogitsChunked, RejectsBadArguments) {
  Prefill f(false);
  std::vector<float> buf(1024);
  MqaLogitsChunkedParams c;
  c.base = f.p;
  c.chunk_buffer = buf.data();
  c.chunk_buffer_bytes = 10 * sizeof(float);  // less than one row of 40 logits
  c.on_chunk = [](int64_t, int64_t, const TensorView&) { return Status::Ok(); };
  Status s = mqa_logits_chunked(c, Exec{});
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_NE(s.message.find("mqa_logits_chunked: chunk_buffer_bytes expected >= 160"), std::string::npos) << s.message;
  c.chunk_buffer_bytes = 4096;
  c.on_chunk = nullptr;
  s = mqa_logits_chunked(c, Exec{});
  EXPECT_NE(s.message.find("on_chunk"), std::string::npos) << s.message;
  c.on_chunk = [](int64_t, int64_t, const TensorView&) { return Status(Code::kInternal, "stop"); };
  s = mqa_logits_chunked(c, Exec{});
  EXPECT_EQ(s.code, Code::kInternal);  // the callback's error comes back
  c.base.compressed = true;
  s = mqa_logits_chunked(c, Exec{});
  EXPECT_NE(s.message.find("width expected > 0"), std::string::npos) << s.message;
}

// The whole call is validated before the first chunk, as this op's: ks / ke / weights with fewer
// rows than q were sliced into chunks whose checks they passed, and their rows past the end were
// read (AddressSanitizer: scripts/cpu_asan.sh); errors of the chunk checks named mqa_logits, and
// their row numbers were the chunk's.
TEST(MqaLogitsChunked, ValidatesTheWholeCallUpFront) {
  Prefill f(false);
  std::vector<float> buf(8 * 40);
  MqaLogitsChunkedParams c;
  c.base = f.p;
  c.chunk_buffer = buf.data();
  c.chunk_buffer_bytes = buf.size() * sizeof(float);
  int chunks = 0;
  c.on_chunk = [&](int64_t, int64_t, const TensorView&) {
    ++chunks;
    return Status::Ok();
  };
  c.base.ks = make_tensor(f.ks.data(), DType::kI32, {f.M - 5});  // 16 rows for 21 queries
  Status s = mqa_logits_chunked(c, Exec{});
  EXPECT_EQ(s.message, "mqa_logits_chunked: ks shape expected [21], got [16]");
  c.base.ks = f.p.ks;
  c.base.weights = make_tensor(f.w.data(), DType::kF32, {f.M - 1, f.H});
  s = mqa_logits_chunked(c, Exec{});
  EXPECT_EQ(s.message, "mqa_logits_chunked: weights shape expected [21, 8], got [20, 8]");
  c.base.weights = f.p.weights;
  f.ke[17] = f.Nk + 1;  // row 17 (the third chunk's second row) past the keys
  s = mqa_logits_chunked(c, Exec{});
  EXPECT_EQ(s.message, "mqa_logits_chunked: row 17 window [2, 41) expected 0 <= ks <= ke <= 40");
  EXPECT_EQ(chunks, 0);  // nothing ran before the errors
  size_t bytes = 1;
  f.ke[17] = f.Nk;
  c.base.ke = make_tensor(f.ke.data(), DType::kI32, {f.M, 1});
  s = mqa_logits_chunked_workspace(c, Exec{}, &bytes);
  EXPECT_EQ(s.message, "mqa_logits_chunked: ke shape expected [21], got [21, 1]");
}

}  // namespace
}  // namespace dsattn
