// Hopper (sm_90a) primitives: warpgroup MMA (wgmma) on E4M3 operands in shared memory, its
// shared-memory matrix descriptors, and tensor-map copies (cp.async.bulk.tensor) completing on an
// mbarrier. Everything compiles to nothing outside sm_90a device code (DSATTN_SM90A_DEVICE = 0), so
// the headers can be included by every architecture's pass; callers never run those stubs (the
// host only launches sm_90a kernels on a compute-capability-9.0 device of a build that has sm_90a
// code, see indexer_wgmma_launch.cu).
#pragma once
#include <cuda.h>  // CUtensorMap

#include <cstdint>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DSATTN_SM90A_DEVICE 1
#else
#define DSATTN_SM90A_DEVICE 0
#endif
// Tensor-map copies and L2 cache policies (below) exist on every sm_90+ target (sm_90a, sm_100f,
// sm_120f): the warp-specialized kernel with mma.sync consumers (indexer_ws_mma.cuh) uses them there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DSATTN_TMA_DEVICE 1
#else
#define DSATTN_TMA_DEVICE 0
#endif

namespace dsattn {
namespace cuda {

// A shared-memory matrix descriptor with the 128-byte swizzle (the atom's base 1024-byte aligned):
// start address, leading and stride byte offsets, each in 16-byte units. For a K-major operand
// `lbo` is unused (16: K fits the atom) and `sbo` the distance of 8-row groups (1024 for 128-byte
// rows); for an MN-major operand (imm-trans 1, the bf16 MMAs of mla_wgmma_kernel.cuh) `lbo` is the
// distance between its 64-element (128-byte) chunks along M / N and `sbo` that of its 8-row groups
// along K.
__device__ __forceinline__ uint64_t wgmma_desc_sw128_lbo(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}
// A K-major operand tile: rows of 128 bytes, 8-row atoms of 1024 bytes. A k-step of 32 E4M3 (16
// bf16) elements inside the row is addressed by adding 32 bytes to `addr`.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t addr) { return wgmma_desc_sw128_lbo(addr, 16, 1024); }

__device__ __forceinline__ void wgmma_fence() {
#if DSATTN_SM90A_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if DSATTN_SM90A_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_wait_all() {
#if DSATTN_SM90A_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
// At most one committed group still in flight (groups complete in order).
__device__ __forceinline__ void wgmma_wait_1() {
#if DSATTN_SM90A_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accumulator reads / writes across the asynchronous MMA window.
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The accumulators of an m64n64 / m64n128 MMA as inline-asm operands %0 .. %31 / %63.
#define DSATTN_WG_D16(d, o)                                                                             \
  "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
      "+f"(d[o + 7]), "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]),    \
      "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15])
#define DSATTN_WG_D32(d) DSATTN_WG_D16(d, 0), DSATTN_WG_D16(d, 16)
#define DSATTN_WG_D64(d) DSATTN_WG_D32(d), DSATTN_WG_D16(d, 32), DSATTN_WG_D16(d, 48)

// D[64 x 64] (+)= A[64 x 32] * B[32 x 64]^T, E4M3 x E4M3 -> f32; A, B K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
#if DSATTN_SM90A_DEVICE
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, %32, %33, p, 1, 1;\n}\n"
      : DSATTN_WG_D32(d)
      : "l"(da), "l"(db), "r"(accumulate));
#else
  (void)d; (void)da; (void)db; (void)accumulate;
#endif
}

// D[64 x 128] (+)= A[64 x 32] * B[32 x 128]^T, E4M3 x E4M3 -> f32; A, B K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
#if DSATTN_SM90A_DEVICE
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : DSATTN_WG_D64(d)
      : "l"(da), "l"(db), "r"(accumulate));
#else
  (void)d; (void)da; (void)db; (void)accumulate;
#endif
}

template <int NW>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[NW / 2], uint64_t da, uint64_t db, int accumulate) {
  static_assert(NW == 64 || NW == 128, "wgmma_e4m3: N is 64 or 128");
  if constexpr (NW == 64) {
    wgmma_m64n64k32_e4m3(d, da, db, accumulate);
  } else {
    wgmma_m64n128k32_e4m3(d, da, db, accumulate);
  }
}

// The same MMAs with A (the keys) from registers: per thread 4 registers of 4 E4M3 bytes, in the
// m16n8k32 A layout of the warp's 16 rows (warp q of the warpgroup: rows 16 q + lane / 4 (+ 8);
// register 0: k 4 (lane % 4) .. + 3 of the first row, 1: the same k of the second row, 2 and 3:
// k + 16). The registers must not change until the MMA has completed (wgmma_fence_operands after
// the wait keeps the compiler from reusing them).
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                        int accumulate) {
#if DSATTN_SM90A_DEVICE
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
      : DSATTN_WG_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
  (void)d; (void)a; (void)db; (void)accumulate;
#endif
}

__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                         int accumulate) {
#if DSATTN_SM90A_DEVICE
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, {%64,%65,%66,%67}, %68, p, 1, 1;\n}\n"
      : DSATTN_WG_D64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
  (void)d; (void)a; (void)db; (void)accumulate;
#endif
}

template <int NW>
__device__ __forceinline__ void wgmma_e4m3_rs(float (&d)[NW / 2], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  static_assert(NW == 64 || NW == 128, "wgmma_e4m3_rs: N is 64 or 128");
  if constexpr (NW == 64) {
    wgmma_m64n64k32_e4m3_rs(d, a, db, accumulate);
  } else {
    wgmma_m64n128k32_e4m3_rs(d, a, db, accumulate);
  }
}

// bf16 operands (the sparse-MLA kernel, mla_wgmma_kernel.cuh).
// D[64 x 64] (+)= A[64 x 16] * B[16 x 64], bf16 -> f32; A and B K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n64k16_bf16_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
#if DSATTN_SM90A_DEVICE
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : DSATTN_WG_D32(d)
      : "l"(da), "l"(db), "r"(accumulate));
#else
  (void)d; (void)da; (void)db; (void)accumulate;
#endif
}

// D[64 x 32] (+)= A[64 x 16] * B[16 x 32], bf16 -> f32; A and B K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n32k16_bf16_ss(float (&d)[16], uint64_t da, uint64_t db, int accumulate) {
#if DSATTN_SM90A_DEVICE
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : DSATTN_WG_D16(d, 0)
      : "l"(da), "l"(db), "r"(accumulate));
#else
  (void)d; (void)da; (void)db; (void)accumulate;
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_bf16_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
  static_assert(N == 32 || N == 64, "wgmma_bf16_ss: N is 32 or 64");
  if constexpr (N == 32) {
    wgmma_m64n32k16_bf16_ss(d, da, db, accumulate);
  } else {
    wgmma_m64n64k16_bf16_ss(d, da, db, accumulate);
  }
}

// D[64 x N] (+)= A[64 x 16] * B[16 x N], bf16 -> f32, N = 64 or 128; A from registers (the
// m16n8k16 A layout of each warp's 16 rows: register 0 row lane / 4, k 2 (lane % 4) .. + 1;
// 1: row + 8; 2: k + 8; 3: both), B MN-major in shared memory (imm-trans-b 1).
__device__ __forceinline__ void wgmma_m64n64k16_bf16_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                           int accumulate) {
#if DSATTN_SM90A_DEVICE
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : DSATTN_WG_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
  (void)d; (void)a; (void)db; (void)accumulate;
#endif
}
__device__ __forceinline__ void wgmma_m64n128k16_bf16_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                            int accumulate) {
#if DSATTN_SM90A_DEVICE
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
      : DSATTN_WG_D64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
#else
  (void)d; (void)a; (void)db; (void)accumulate;
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_bf16_rs_tb(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_bf16_rs_tb: N is 64 or 128");
  if constexpr (N == 64) {
    wgmma_m64n64k16_bf16_rs_tb(d, a, db, accumulate);
  } else {
    wgmma_m64n128k16_bf16_rs_tb(d, a, db, accumulate);
  }
}

// Keeps registers that an asynchronous MMA reads (A from registers) alive and unchanged until here.
template <int N>
__device__ __forceinline__ void wgmma_fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Tensor-map copies global -> shared (coordinates in elements, innermost first), completing on the
// mbarrier `bar` with complete_tx (the caller announces the bytes with mbar_expect_tx first).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            uint32_t bar) {
#if DSATTN_TMA_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
#else
  (void)dst; (void)map; (void)c0; (void)c1; (void)c2; (void)bar;
#endif
}
// The same two copies with an L2 cache policy (from createpolicy; l2_policy_evict_first: data read
// once, which should not push out what later copies and loads read again).
__device__ __forceinline__ void tma_load_3d_hint(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                                 uint32_t bar, uint64_t pol) {
#if DSATTN_TMA_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4}], "
      "[%5], %6;\n" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(pol)
      : "memory");
#else
  (void)dst; (void)map; (void)c0; (void)c1; (void)c2; (void)bar; (void)pol;
#endif
}
__device__ __forceinline__ void bulk_copy_g2s_hint(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t pol) {
#if DSATTN_TMA_DEVICE
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(pol) : "memory");
#else
  (void)dst; (void)src; (void)bytes; (void)bar; (void)pol;
#endif
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t pol = 0;
#if DSATTN_TMA_DEVICE
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
#endif
  return pol;
}
}  // namespace cuda
}  // namespace dsattn
