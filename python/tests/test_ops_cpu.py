"""Every op through the extension on the CPU backend (numpy arrays), checked against
dsattn.reference (an independent numpy implementation of SPEC.md)."""

import numpy as np
import pytest

import dsattn
from dsattn import reference as ref

from cases import indexer_case, mla_case, mqa_case, prefill_case


def _close_logits(got, want, ctx):
    """Compare the defined part [0, ctx) of each row (float32 from double accumulation on both sides)."""
    for r, c in enumerate(ctx):
        np.testing.assert_allclose(got[r, :c], want[r, :c], rtol=1e-5, atol=1e-5 * (np.abs(want[r, :c]).max(initial=1)),
                                   err_msg=f"row {r}")


# ------------------------------------------------------------------ paged_mqa_logits
@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
@pytest.mark.parametrize("S,N,mode", [(64, 1, "per_request"), (32, 2, "per_request"), (5, 3, "per_row"),
                                      (32, 2, "varlen")])
def test_paged_mqa_logits_matches_reference(fmt, S, N, mode):
    c = indexer_case(seed=S + N, B=3, N=N, H=16, D=128, S=S, lens=(70, 0, 133), fmt=fmt, mode=mode, pad=8)
    cache = dsattn.IndexerCache(c.pages, S, 128, fmt)
    want = c.ref_logits(max_context=150)
    got = dsattn.paged_mqa_logits(c.q, c.weights, cache, c.block_table, c.context_lens, q_scales=c.q_scales,
                                  row_request=c.row_request, max_context=150, clean=True)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == want.shape
    ctx = c.row_ctx()
    _close_logits(got, want, ctx)
    for r, n in enumerate(ctx):
        assert np.all(got[r, n:] == -np.inf), f"row {r}: clean=True must write -inf beyond {n}"


def test_paged_mqa_logits_bf16_out_and_row_stride_and_deepgemm_shape():
    S, D = 32, 64
    c = indexer_case(seed=7, B=2, N=1, H=8, D=D, S=S, lens=(40, 90))
    # DeepGEMM's view of the same bytes: [num_pages, S, 1, D + 4]
    cache = dsattn.IndexerCache(c.pages.reshape(c.pages.shape[0], S, 1, D + 4), S, D)
    big = np.full((2, 200), 7, np.uint16)            # bf16 logits with a row stride of 200
    out = big[:, :96]
    ret = dsattn.paged_mqa_logits(c.q, c.weights, cache, c.block_table, c.context_lens, logits=out)
    assert ret is out                                 # written in place, no copy
    want = c.ref_logits(max_context=96)
    got = ref.bf16_to_f32(out)
    for r, n in enumerate(c.row_ctx()):
        np.testing.assert_allclose(got[r, :n], want[r, :n], rtol=2.0 ** -8, atol=1e-3)
    assert np.all(big[:, 96:] == 7), "bytes beyond the logits view were touched"


def test_paged_mqa_logits_uint8_q_equals_same_bits():
    c = indexer_case(seed=3, B=1, N=1, H=8, D=32, S=4, lens=(9,))
    cache = dsattn.IndexerCache(c.pages, 4, 32)
    a = dsattn.paged_mqa_logits(c.q, c.weights, cache, c.block_table, c.context_lens)
    # Read-only inputs are accepted (nothing is written to them).
    q = c.q.copy()
    q.setflags(write=False)
    b = dsattn.paged_mqa_logits(q, c.weights, cache, c.block_table, c.context_lens)
    np.testing.assert_array_equal(a[:, :9], b[:, :9])


# ------------------------------------------------------------------ topk
def _topk_rows(seed, R=6, W=300):
    rng = np.random.default_rng(seed)
    x = rng.integers(-20, 20, (R, W)).astype(np.float32)   # many ties
    x[0, ::7] = np.nan
    x[1, :] = -np.inf
    x[2, 10:] = np.nan
    starts = np.array([0, 5, 0, 17, 290, 0], np.int32)
    ends = np.array([300, 300, 60, 200, 300, 0], np.int32)
    return x, starts, ends


def test_topk_sorted_matches_reference_exactly():
    x, starts, ends = _topk_rows(1)
    k = 16
    res = dsattn.topk(x, k, starts=starts, ends=ends, sorted=True, return_values=True)
    want_idx, want_val = ref.topk(x, k, starts, ends)
    np.testing.assert_array_equal(res.indices, want_idx)
    np.testing.assert_array_equal(res.values, want_val)
    assert res.slot_ids is None


def test_topk_unsorted_is_a_valid_topk_and_slot_ids():
    x, starts, ends = _topk_rows(2)
    k, S = 32, 16
    bt = np.random.default_rng(0).permutation(64)[:3 * 19].reshape(3, 19).astype(np.int32)
    res = dsattn.topk(x, k, starts=starts, ends=ends, block_table=bt, next_n=2, states_per_page=S)
    ref.topk_is_valid(res.indices, x, k, starts, ends)
    np.testing.assert_array_equal(res.slot_ids, ref.slot_ids(res.indices, bt, S, next_n=2))


def test_topk_bf16_logits_and_preallocated_outputs():
    x, starts, ends = _topk_rows(3)
    bits = ref.f32_to_bf16(x)
    idx = np.empty((6, 8), np.int32)
    val = np.empty((6, 8), np.float32)
    res = dsattn.topk(bits, 8, starts=starts, ends=ends, indices=idx, values=val, sorted=True)
    assert res.indices is idx and res.values is val
    want_idx, want_val = ref.topk(x, 8, starts, ends)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(val, want_val)


# ------------------------------------------------------------------ fused paged_mqa_topk
@pytest.mark.parametrize("fmt,mode", [("fp8", "per_request"), ("mxfp4", "per_row"), ("fp8", "varlen")])
def test_paged_mqa_topk_matches_reference(fmt, mode):
    c = indexer_case(seed=11, B=3, N=2, H=32, D=128, S=32, lens=(300, 20, 129), fmt=fmt, mode=mode)
    cache = dsattn.IndexerCache(c.pages, 32, 128, fmt)
    k = 64
    res = dsattn.paged_mqa_topk(c.q, c.weights, cache, c.block_table, c.context_lens, k, q_scales=c.q_scales,
                                row_request=c.row_request, return_values=True, return_slot_ids=True)
    want = c.ref_logits()
    ctx = c.row_ctx()
    ref.topk_is_valid(res.indices, want, k, None, ctx, atol=1e-4 * np.abs(want[np.isfinite(want)]).max())
    sel = np.where(res.indices >= 0, res.indices, 0)
    want_vals = np.where(res.indices >= 0, np.take_along_axis(want, sel, 1), -np.inf)
    np.testing.assert_allclose(res.values, want_vals, rtol=1e-5, atol=1e-4)
    rr = c.row_request
    np.testing.assert_array_equal(res.slot_ids, ref.slot_ids(res.indices, c.block_table, 32, next_n=c.next_n,
                                                             row_request=rr))


def test_paged_mqa_topk_route_switches_pass_through():
    # logits_route / resident_route choose CUDA routes; the CPU backend takes them and ignores them.
    c = indexer_case(seed=12, B=2, N=1, H=32, D=128, S=32, lens=(300, 129), mode="per_request")
    cache = dsattn.IndexerCache(c.pages, 32, 128)
    base = dsattn.paged_mqa_topk(c.q, c.weights, cache, c.block_table, c.context_lens, 64, q_scales=c.q_scales)
    for kw in ({"resident_route": False}, {"logits_route": True}):
        res = dsattn.paged_mqa_topk(c.q, c.weights, cache, c.block_table, c.context_lens, 64, q_scales=c.q_scales,
                                    **kw)
        np.testing.assert_array_equal(res.indices, base.indices)
        assert dsattn.paged_mqa_topk_workspace_size(c.q, c.weights, cache, c.block_table, c.context_lens, 64,
                                                    q_scales=c.q_scales, **kw) == \
            dsattn.paged_mqa_topk_workspace_size(c.q, c.weights, cache, c.block_table, c.context_lens, 64,
                                                 q_scales=c.q_scales)


def test_paged_mqa_topk_route_query():
    c = indexer_case(seed=12, B=2, N=1, H=32, D=128, S=32, lens=(300, 129), mode="per_request")
    cache = dsattn.IndexerCache(c.pages, 32, 128)
    assert dsattn.paged_mqa_topk_route(c.q, c.weights, cache, c.block_table, c.context_lens, 64,
                                       q_scales=c.q_scales) == "cpu"
    # The call's own validation: a wrong indices shape is refused, naming the argument.
    bad = np.zeros((2, 65), np.int32)
    with pytest.raises(ValueError, match="indices"):
        dsattn.paged_mqa_topk_route(c.q, c.weights, cache, c.block_table, c.context_lens, 64, q_scales=c.q_scales,
                                    indices=bad)


# ------------------------------------------------------------------ mqa_logits (prefill)
@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
@pytest.mark.parametrize("compressed", [False, True])
def test_mqa_logits_matches_reference(fmt, compressed):
    D = 64
    m = mqa_case(5, M=7, H=16, D=D, Nk=90, fmt=fmt)
    q, qs, w, k, kscale = m.q, m.q_scales, m.weights, m.k, m.k_scales
    ks = np.array([0, 0, 10, 40, 89, 50, 3], np.int32)
    ke = np.array([1, 90, 60, 40, 90, 90, 33], np.int32)
    got = dsattn.mqa_logits(q, w, k, kscale, ks, ke, format=fmt, q_scales=qs, compressed=compressed, clean=True)
    want = ref.mqa_logits(q, w, k, kscale, ks, ke, head_dim=D, format=fmt, q_scales=qs, compressed=compressed)
    assert got.shape == want.shape
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-4)
    assert np.all(got[~fin] == -np.inf)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_mqa_topk_in_chunks_matches_reference(fmt):
    """Prefill logits + top-k row chunk by row chunk: the same indices as the reference's top-k of
    its full logits, whatever the chunk size (one row, three rows, all at once)."""
    D, k = 64, 12
    m = mqa_case(6, M=7, H=16, D=D, Nk=90, fmt=fmt)
    q, qs, w, kk, kscale = m.q, m.q_scales, m.weights, m.k, m.k_scales
    ks = np.array([0, 0, 10, 40, 89, 50, 3], np.int32)
    ke = np.array([1, 90, 60, 40, 90, 90, 33], np.int32)
    full = ref.mqa_logits(q, w, kk, kscale, ks, ke, head_dim=D, format=fmt, q_scales=qs, compressed=True)
    want_i, want_v = ref.topk(full, k, ends=ke - ks)
    for chunk_bytes in (4 * 90, 3 * 4 * 90, 1 << 20):
        got = dsattn.mqa_topk(q, w, kk, kscale, ks, ke, k, format=fmt, q_scales=qs, chunk_bytes=chunk_bytes,
                              sorted=True, return_values=True)
        np.testing.assert_array_equal(got.indices, want_i, err_msg=f"chunk_bytes {chunk_bytes}")
        np.testing.assert_allclose(got.values, want_v, rtol=1e-5, atol=1e-4)
        assert got.slot_ids is None
    out = np.full((7, k), -7, np.int32)
    res = dsattn.mqa_topk(q, w, kk, kscale, ks, ke, k, format=fmt, q_scales=qs, width=90, indices=out)
    assert res.indices is out and res.values is None
    ref.topk_is_valid(out, full, k, None, ke - ks)
    with pytest.raises(ValueError, match="mqa_topk: topk expected > 0, got 0"):
        dsattn.mqa_topk(q, w, kk, kscale, ks, ke, 0, format=fmt, q_scales=qs)


# ------------------------------------------------------------------ sparse MLA
@pytest.mark.parametrize("fmt,extra,sink", [("v4_fp8", True, True), ("v4_fp8", False, False),
                                            ("v32_fp8", False, True)])
def test_sparse_mla_decode_matches_reference(fmt, extra, sink):
    c = mla_case(seed=2, B=2, Sq=2, Hq=16, fmt=fmt, extra=extra, sink=sink)
    cache = dsattn.LatentCache(c.pages, c.P, fmt)
    kw = {}
    if extra:
        kw = dict(extra_cache=dsattn.LatentCache(c.extra_pages, c.extra_P, fmt), extra_indices=c.extra_indices)
    out, lse = dsattn.sparse_mla_decode(c.q, cache, c.indices, sm_scale=c.sm_scale, topk_length=c.topk_length,
                                        attn_sink=c.attn_sink, **kw)
    assert out.dtype == np.uint16 and out.shape == (2, 2, 16, 512)  # bf16 bits from numpy inputs
    want_out, want_lse = c.ref()
    np.testing.assert_allclose(ref.bf16_to_f32(out), want_out, rtol=2.0 ** -7, atol=2e-3)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    if not extra:
        assert np.all(lse[1, 0] == -np.inf) and not ref.bf16_to_f32(out[1, 0]).any()


def test_prefill_over_the_fp8_cache_is_decode_with_one_token_per_request():
    """README's pattern: prefill tokens over the paged V4 cache through sparse_mla_decode with
    q [M, 1, Hq, d_qk], indices [M, 1, topk] and per-token lengths, equal to sparse_mla_prefill over
    the same tokens dequantized to bf16 (exact for V4: E4M3 times a power of two fits bf16)."""
    c = mla_case(seed=10, B=5, Sq=1, Hq=16, topk=24, P=16, num_pages=4, sink=True)
    slots = np.unique(c.indices[c.indices >= 0])
    kv = ref.f32_to_bf16(np.stack([ref.latent_token(c.pages, s, c.P) for s in slots]))
    assert np.array_equal(ref.bf16_to_f32(kv), np.stack([ref.latent_token(c.pages, s, c.P) for s in slots]))
    rows = np.where(c.indices[:, 0] >= 0, np.searchsorted(slots, c.indices[:, 0]), -1).astype(np.int32)
    out_d, lse_d = dsattn.sparse_mla_decode(c.q, dsattn.LatentCache(c.pages, c.P), c.indices, sm_scale=c.sm_scale,
                                            topk_length=c.topk_length, attn_sink=c.attn_sink)
    out_p, lse_p = dsattn.sparse_mla_prefill(c.q[:, 0], kv, rows, sm_scale=c.sm_scale, topk_length=c.topk_length,
                                             attn_sink=c.attn_sink)
    np.testing.assert_array_equal(out_d[:, 0], out_p)
    np.testing.assert_allclose(lse_d[:, 0], lse_p, rtol=1e-6, atol=1e-6)


def test_sparse_mla_prefill_matches_reference():
    q, kv, ind, tl = prefill_case()
    Hq = q.shape[1]
    out, lse = dsattn.sparse_mla_prefill(q, kv, ind, sm_scale=0.05, topk_length=tl)
    want_out, want_lse = ref.sparse_mla_prefill(q, kv, ind, sm_scale=0.05, topk_length=tl)
    np.testing.assert_allclose(ref.bf16_to_f32(out), want_out, rtol=2.0 ** -7, atol=2e-3)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    assert lse[2].tolist() == [-np.inf] * Hq


# ------------------------------------------------------------------ cache writers (bit-exact)
@pytest.mark.parametrize("fmt,D", [("fp8", 128), ("mxfp4", 128), ("mxfp4", 64)])
@pytest.mark.parametrize("bf16_in", [False, True])
def test_write_indexer_cache_bit_exact(fmt, D, bf16_in):
    rng = np.random.default_rng(4)
    S, T = 8, 20
    k = (rng.standard_normal((T, D)) * 3).astype(np.float32)
    k[3] = 0.0
    k[5, 7] = -np.nan  # negative NaN input: stored as the positive NaN code
    k[6, 1] = np.nan
    if bf16_in:
        k = ref.f32_to_bf16(k)
    slots = rng.permutation(4 * S)[:T].astype(np.int64)
    slots[[2, 9]] = -1
    stride = S * (D + 4 if fmt == "fp8" else D // 2 + 4) + 4
    pages = rng.integers(0, 256, (4, stride), dtype=np.uint8)
    want = ref.write_indexer_cache(k, slots, pages, S, D, fmt)
    cache = dsattn.IndexerCache(pages, S, D, fmt)
    assert dsattn.write_indexer_cache(k, slots, cache) is None
    np.testing.assert_array_equal(pages, want)


@pytest.mark.parametrize("fmt", ["v4_fp8", "v32_fp8"])
def test_write_latent_cache_bit_exact(fmt):
    rng = np.random.default_rng(6)
    P, T = 4, 10
    dqk = dsattn.latent_dqk(fmt)
    kv = (rng.standard_normal((T, dqk)) * 10).astype(np.float32)
    kv[1] = 0.0
    kv[2, 5] = -np.nan
    kv[3, 200] = np.inf  # V3.2: an infinite group (scale inf, inf / inf = NaN)
    slots = rng.permutation(3 * P)[:T].astype(np.int32)
    slots[4] = -1
    pages = rng.integers(0, 256, dsattn.latent_cache_shape(3, P, fmt), dtype=np.uint8)
    want = ref.write_latent_cache(kv, slots, pages, P, fmt)
    dsattn.write_latent_cache(kv, slots, dsattn.LatentCache(pages, P, fmt))
    np.testing.assert_array_equal(pages, want)


def test_written_cache_roundtrips_through_reference_decode():
    # The writer's bytes decode (reference) to the input within E4M3 precision: a layout check that
    # does not rely on the reference writer.
    rng = np.random.default_rng(8)
    k = rng.standard_normal((6, 128)).astype(np.float32)
    cache = dsattn.empty_indexer_cache(2, 4)
    dsattn.write_indexer_cache(k, np.arange(6, dtype=np.int32), cache)
    vals, scale = ref.indexer_cache_decode(cache.pages, 4, 128)
    got = (vals * scale[..., None]).reshape(8, 128)[:6]
    np.testing.assert_allclose(got, k, rtol=2.0 ** -3, atol=1e-6)
