"""Pure-numpy reference of every dsattn op, written from SPEC.md alone (it never calls the C++
code), used by the tests to check the extension and usable by engines to debug their caches.

Conventions: FP8 E4M3 tensors are uint8 bit patterns, bf16 tensors are uint16 bit patterns (or
float32 values where noted), caches are uint8 [num_pages, page_stride_bytes]. Arithmetic is in
float64; results are float32. The reference always "cleans" (-inf outside each row's range) and
returns top-k rows sorted by value (descending, ties: smaller index first, NaN last), which is one
valid order for the unsorted ops as well (compare unsorted results with topk_is_valid).
"""

from __future__ import annotations

import numpy as np

E4M3_MAX = 448.0
E2M1_MAX = 6.0
LATENT_DV = 512


# ------------------------------------------------------------------ codecs (SPEC 2.4)
def _e4m3_table() -> np.ndarray:
    t = np.empty(256, dtype=np.float64)
    for c in range(256):
        sign = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 0xF, c & 0x7
        if e == 0xF and m == 0x7:
            t[c] = np.nan
        elif e == 0:
            t[c] = sign * m * 2.0 ** -9
        else:
            t[c] = sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return t


E4M3_VALUES = _e4m3_table()               # float64 [256]: value of each code
_E4M3_POS = E4M3_VALUES[:0x7F]            # codes 0x00..0x7E, ascending
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def e4m3_to_f32(bits) -> np.ndarray:
    """uint8 E4M3 ("fn": no inf, S.1111.111 = NaN) bit patterns -> float32."""
    return E4M3_VALUES[np.asarray(bits, dtype=np.uint8)].astype(np.float32)


def f32_to_e4m3(x) -> np.ndarray:
    """float -> uint8 E4M3, round to nearest even, saturating to +-448; NaN -> 0x7F | sign."""
    x = np.asarray(x, dtype=np.float32)
    a = np.minimum(np.abs(x).astype(np.float64), E4M3_MAX)
    nan = np.isnan(x)
    a = np.where(nan, 0.0, a)
    hi = np.clip(np.searchsorted(_E4M3_POS, a, side="left"), 0, 0x7E)
    lo = np.clip(hi - 1, 0, 0x7E)
    d_lo, d_hi = a - _E4M3_POS[lo], _E4M3_POS[hi] - a
    code = np.where(d_hi < d_lo, hi, np.where(d_lo < d_hi, lo, np.where(hi % 2 == 0, hi, lo)))
    code = np.where(_E4M3_POS[hi] == a, hi, code).astype(np.uint8)
    code = np.where(nan, np.uint8(0x7F), code).astype(np.uint8)
    return code | np.where(np.signbit(x), np.uint8(0x80), np.uint8(0)).astype(np.uint8)


def ue8m0_to_f32(e) -> np.ndarray:
    """UE8M0 exponent byte -> 2^(e - 127) as float32 (0xFF = NaN)."""
    e = np.asarray(e, dtype=np.uint8)
    v = np.ldexp(1.0, e.astype(np.int32) - 127)
    return np.where(e == 0xFF, np.nan, v).astype(np.float32)


def ue8m0_ceil(x) -> np.ndarray:
    """Smallest e with 2^(e - 127) >= x (x > 0 finite), clamped to [0, 254]; x <= 0 -> 127
    (scale 1); NaN -> 0xFF. The writers' "2^ceil(log2(amax / qmax))"."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    m, ex = np.frexp(np.where(x > 0, x, 1.0))  # x = m * 2^ex, m in [0.5, 1)
    ceil_log2 = np.where(m == 0.5, ex - 1, ex)
    e = np.clip(ceil_log2 + 127, 0, 254)
    e = np.where(x > 0, e, 127)
    e = np.where(np.isposinf(x), 254, e)
    e = np.where(np.isnan(x), 0xFF, e)
    return e.astype(np.uint8)


def e2m1_to_f32(nibbles) -> np.ndarray:
    """4-bit E2M1 codes (values 0..15) -> float32."""
    return E2M1_VALUES[np.asarray(nibbles, dtype=np.uint8) & 0xF].astype(np.float32)


def f32_to_e2m1(x) -> np.ndarray:
    """float -> 4-bit E2M1 code, round to nearest even, saturating to +-6; NaN -> +0."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x).astype(np.float64)
    # Midpoints between neighbouring magnitudes; a tie goes to the even code.
    m = np.select([a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0], [0, 1, 2, 3, 4, 5, 6], 7)
    code = (m | np.where(np.signbit(x), 8, 0)).astype(np.uint8)
    return np.where(np.isnan(x), np.uint8(0), code).astype(np.uint8)


def bf16_to_f32(bits) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x) -> np.ndarray:
    """float32 -> uint16 bf16 bit patterns, round to nearest even; NaN stays a quiet NaN."""
    u = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def _as_f32(x) -> np.ndarray:
    """float32 values of a float array or of uint16 bf16 bit patterns."""
    x = np.asarray(x)
    return bf16_to_f32(x) if x.dtype == np.uint16 else x.astype(np.float32)


def _amax(x, axis=None) -> np.ndarray:
    """max |x| ignoring NaN (0 for all-NaN or all-zero groups), float32."""
    a = np.abs(np.asarray(x, dtype=np.float32))
    return np.max(np.where(np.isnan(a), np.float32(0), a), axis=axis).astype(np.float32)


def _writer_e4m3(x, scale) -> np.ndarray:
    """The writers' E4M3 of x / scale (float32 division): a NaN quotient (NaN input, or inf / inf)
    is stored as the positive NaN code 0x7F whatever its sign."""
    with np.errstate(invalid="ignore", divide="ignore"):
        q = (np.asarray(x, dtype=np.float32) / np.asarray(scale, dtype=np.float32)).astype(np.float32)
    return np.where(np.isnan(q), np.uint8(0x7F), f32_to_e4m3(q)).astype(np.uint8)


def _f32_at(raw: np.ndarray) -> np.ndarray:
    """Little-endian float32 from a trailing dimension of 4 bytes."""
    return np.ascontiguousarray(raw).view("<f4")[..., 0]


def _mx_scales(packed) -> np.ndarray:
    """int32 of packed UE8M0 scales -> uint8 [..., 4] bytes, byte j = 32-value block j."""
    return np.ascontiguousarray(np.asarray(packed, dtype=np.int32)).view(np.uint8).reshape(np.shape(packed) + (4,))


def mxfp4_dequant(packed, scales_i32, dim: int) -> np.ndarray:
    """Packed E2M1 [..., dim/2] (low nibble = even element) + int32 [...] of dim/32 UE8M0 scales
    -> float32 [..., dim]."""
    packed = np.asarray(packed, dtype=np.uint8)
    vals = np.empty(packed.shape[:-1] + (dim,), dtype=np.float32)
    vals[..., 0::2] = e2m1_to_f32(packed & 0xF)
    vals[..., 1::2] = e2m1_to_f32(packed >> 4)
    sc = ue8m0_to_f32(_mx_scales(scales_i32)[..., : dim // 32])
    with np.errstate(over="ignore", invalid="ignore"):  # garbage (unwritten) states may overflow
        return vals * np.repeat(sc, 32, axis=-1)


def mxfp4_quant(x, dim: int):
    """float32 [..., dim] -> (packed uint8 [..., dim/2], int32 [...] scales), SPEC 2.2 writer rule
    (block scale 2^ceil(log2(amax / 6)); unused scale bytes are 0)."""
    x = np.asarray(x, dtype=np.float32)
    blocks = x.reshape(x.shape[:-1] + (dim // 32, 32))
    e = ue8m0_ceil(_amax(blocks, axis=-1) / np.float32(E2M1_MAX))
    codes = f32_to_e2m1(blocks / ue8m0_to_f32(e)[..., None]).reshape(x.shape)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    sb = np.zeros(x.shape[:-1] + (4,), dtype=np.uint8)
    sb[..., : dim // 32] = e
    return packed, np.ascontiguousarray(sb).view("<i4")[..., 0].astype(np.int32)


# ------------------------------------------------------------------ indexer cache (SPEC 2.1 / 2.2)
def indexer_cache_decode(pages, states_per_page: int, head_dim: int, format: str = "fp8"):
    """uint8 pages [P, stride] -> (values float32 [P, S, D] without the scale, scale float32
    [P, S]) for fp8; (dequantized float32 [P, S, D], ones [P, S]) for mxfp4."""
    pages = np.asarray(pages, dtype=np.uint8)
    P, S, D = pages.shape[0], states_per_page, head_dim
    pages = pages.reshape(P, -1)
    if format == "fp8":
        vals = e4m3_to_f32(pages[:, : S * D].reshape(P, S, D))
        scale = _f32_at(pages[:, S * D : S * D + 4 * S].reshape(P, S, 4))
        return vals, scale
    if format == "mxfp4":
        packed = pages[:, : S * D // 2].reshape(P, S, D // 2)
        sc = np.ascontiguousarray(pages[:, S * D // 2 : S * D // 2 + 4 * S]).view("<i4").reshape(P, S)
        return mxfp4_dequant(packed, sc, D), np.ones((P, S), dtype=np.float32)
    raise ValueError(f"unknown indexer format {format!r}")


def write_indexer_cache(k, slot_mapping, pages, states_per_page: int, head_dim: int, format: str = "fp8"):
    """Returns a copy of `pages` with k (float32 [T, D] or bf16 bits) quantized in at slot_mapping
    (page * S + offset, -1 = skip). FP8 scale per state: 2^ceil(log2(amax / 448))."""
    out = np.array(pages, dtype=np.uint8, copy=True)
    flat = out.reshape(out.shape[0], -1)
    k = _as_f32(k)
    S, D = states_per_page, head_dim
    for t, slot in enumerate(np.asarray(slot_mapping).tolist()):
        if slot < 0:
            continue
        p, s = divmod(int(slot), S)
        if format == "fp8":
            e = ue8m0_ceil(_amax(k[t]) / np.float32(E4M3_MAX))
            scale = ue8m0_to_f32(e)
            flat[p, s * D : (s + 1) * D] = _writer_e4m3(k[t], scale)
            flat[p, S * D + 4 * s : S * D + 4 * s + 4] = np.array([scale], dtype="<f4").view(np.uint8)
        else:
            packed, sc = mxfp4_quant(k[t], D)
            flat[p, s * D // 2 : (s + 1) * D // 2] = packed
            off = S * D // 2 + 4 * s
            flat[p, off : off + 4] = np.array([sc], dtype="<i4").view(np.uint8)
    return out


# ------------------------------------------------------------------ indexer logits (SPEC 3.1 / 3.2)
def _q_values(q, q_scales, head_dim: int, format: str) -> np.ndarray:
    if format == "fp8":
        return e4m3_to_f32(q).astype(np.float64)
    return mxfp4_dequant(q, q_scales, head_dim).astype(np.float64)


def row_contexts(context_lens, rows: int, next_n: int, row_request=None):
    """(request, context) of each query row following SPEC 3.1: [B, N] per row, [B] with row j of
    request b seeing L_b - N + j + 1 (clamped at 0), or varlen [R] with row_request."""
    lens = np.asarray(context_lens).astype(np.int64)
    out = []
    for r in range(rows):
        if row_request is not None:
            out.append((int(np.asarray(row_request)[r]), int(lens[r])))
        elif lens.ndim == 2:
            out.append((r // next_n, int(lens[r // next_n, r % next_n])))
        else:
            b, j = divmod(r, next_n)
            out.append((b, max(int(lens[b]) - next_n + j + 1, 0)))
    return out


def _index_score(qv, w, kvals, kscale):
    """scale[t] * sum_h w[h] * relu(q[h] . k8[t]) for one query row: qv [H, D], w [H],
    kvals [T, D], kscale [T] -> float64 [T]."""
    dots = kvals.astype(np.float64) @ qv.T  # [T, H]
    return kscale.astype(np.float64) * (np.maximum(dots, 0.0) @ w.astype(np.float64))


def paged_mqa_logits(q, weights, pages, states_per_page: int, head_dim: int, block_table, context_lens, *,
                     format: str = "fp8", q_scales=None, row_request=None, max_context=None):
    """Reference of paged_mqa_logits: float32 [R, max_context], -inf beyond each row's context.
    q: uint8 E4M3 [B, N, H, D] (varlen [R, H, D]) or packed E2M1 [.., H, D/2] with q_scales."""
    q = np.asarray(q)
    varlen = row_request is not None
    H = q.shape[-2]
    qr = q.reshape((-1,) + q.shape[-2:])
    rows = qr.shape[0]
    qs = None if q_scales is None else np.asarray(q_scales).reshape(rows, H)
    next_n = 1 if varlen else q.shape[1]
    bt = np.asarray(block_table)
    S = states_per_page
    if max_context is None:
        max_context = bt.shape[1] * S
    kvals, kscale = indexer_cache_decode(pages, S, head_dim, format)
    w = np.asarray(weights, dtype=np.float32).reshape(rows, H)
    out = np.full((rows, max_context), -np.inf, dtype=np.float32)
    for r, (b, ctx) in enumerate(row_contexts(context_lens, rows, next_n, row_request)):
        if ctx <= 0:
            continue
        t = np.arange(ctx)
        page = bt[b, t // S]
        qv = _q_values(qr[r], None if qs is None else qs[r], head_dim, format)
        out[r, :ctx] = _index_score(qv, w[r], kvals[page, t % S], kscale[page, t % S]).astype(np.float32)
    return out


def mqa_logits(q, weights, k, k_scales, ks, ke, *, head_dim=None, format: str = "fp8", q_scales=None,
               compressed: bool = False):
    """Reference of mqa_logits: float32 [M, Nk] (or [M, max(ke - ks)] compressed, column t - ks[m]),
    -inf outside [ks[m], ke[m])."""
    q = np.asarray(q)
    M = q.shape[0]
    D = head_dim or (q.shape[2] if format == "fp8" else q.shape[2] * 2)
    if format == "fp8":
        kv = e4m3_to_f32(k).astype(np.float64)
        kscale = np.asarray(k_scales, dtype=np.float32)
    else:
        kv = mxfp4_dequant(k, k_scales, D).astype(np.float64)
        kscale = np.ones(kv.shape[0], dtype=np.float32)
    ks, ke = np.asarray(ks).astype(np.int64), np.asarray(ke).astype(np.int64)
    nk = kv.shape[0]
    width = int(np.max(ke - ks)) if compressed and M else nk
    out = np.full((M, max(width, 0)), -np.inf, dtype=np.float32)
    w = np.asarray(weights, dtype=np.float32)
    qs = None if q_scales is None else np.asarray(q_scales)
    for m in range(M):
        lo, hi = int(ks[m]), int(ke[m])
        if hi <= lo:
            continue
        qv = _q_values(q[m], None if qs is None else qs[m], D, format)
        sc = _index_score(qv, w[m], kv[lo:hi], kscale[lo:hi]).astype(np.float32)
        if compressed:
            out[m, : hi - lo] = sc
        else:
            out[m, lo:hi] = sc
    return out


# ------------------------------------------------------------------ top-k (SPEC 3.3)
def topk(logits, k: int, starts=None, ends=None):
    """(indices int32 [R, k], values float32 [R, k]): per row the k largest of logits[start:end],
    indices relative to start, sorted by value descending (ties: smaller index first; NaN ranks
    below every number). Rows with end - start <= k give all of 0 .. len-1 (sorted the same way)
    then -1; padding values are -inf."""
    x = _as_f32(logits)
    R, W = x.shape
    st = np.zeros(R, np.int64) if starts is None else np.asarray(starts).astype(np.int64)
    en = np.full(R, W, np.int64) if ends is None else np.asarray(ends).astype(np.int64)
    idx = np.full((R, k), -1, dtype=np.int32)
    val = np.full((R, k), -np.inf, dtype=np.float32)
    for r in range(R):
        row = x[r, st[r] : en[r]]
        n = row.shape[0]
        # lexsort: last key primary -> (is NaN, -value, index)
        keyval = np.where(np.isnan(row), 0.0, -row.astype(np.float64))
        sel = np.lexsort((np.arange(n), keyval, np.isnan(row)))[:k]
        idx[r, : sel.shape[0]] = sel
        val[r, : sel.shape[0]] = row[sel]
    return idx, val


def slot_ids(indices, block_table, states_per_page: int, next_n: int = 1, row_request=None):
    """block_table[b][i // S] * S + i % S for each index (-1 stays -1); b = row_request[r] or r // next_n."""
    ind = np.asarray(indices).astype(np.int64)
    bt = np.asarray(block_table).astype(np.int64)
    S = states_per_page
    rows = np.arange(ind.shape[0])
    b = np.asarray(row_request).astype(np.int64) if row_request is not None else rows // next_n
    safe = np.maximum(ind, 0)
    slots = bt[b[:, None], safe // S] * S + safe % S
    return np.where(ind < 0, -1, slots).astype(np.int32)


def paged_mqa_topk(q, weights, pages, states_per_page: int, head_dim: int, block_table, context_lens, k: int,
                   **kw):
    """Reference of the fused op: topk of paged_mqa_logits over [0, ctx) of each row."""
    logits = paged_mqa_logits(q, weights, pages, states_per_page, head_dim, block_table, context_lens, **kw)
    ends = np.isfinite(logits).sum(axis=1)  # contexts: the reference writes -inf exactly beyond ctx
    return topk(logits, k, None, ends)


def topk_is_valid(indices, values_ref, k: int, starts=None, ends=None, atol: float = 0.0) -> None:
    """Asserts that `indices` (from any implementation, any order) is a correct top-k of the
    reference row values `values_ref` [R, W]: distinct in-range indices, -1 padding only after the
    row runs out, and no unselected value above a selected one (beyond atol: near-ties may
    resolve either way when two implementations round differently)."""
    x = np.asarray(values_ref, dtype=np.float64)
    ind = np.asarray(indices).astype(np.int64)
    R, W = x.shape
    st = np.zeros(R, np.int64) if starts is None else np.asarray(starts).astype(np.int64)
    en = np.full(R, W, np.int64) if ends is None else np.asarray(ends).astype(np.int64)
    for r in range(R):
        n = max(int(en[r] - st[r]), 0)
        got = ind[r]
        valid = got[got >= 0]
        assert valid.shape[0] == min(n, k), f"row {r}: {valid.shape[0]} indices, expected {min(n, k)}"
        assert np.all(got[: valid.shape[0]] >= 0) and np.all(got[valid.shape[0]:] == -1), \
            f"row {r}: -1 padding must follow the selected indices: {got}"
        assert np.unique(valid).shape[0] == valid.shape[0], f"row {r}: duplicate indices {np.sort(valid)}"
        assert np.all(valid < n), f"row {r}: index out of range [0, {n}): {valid.max()}"
        if n <= k:
            assert set(valid.tolist()) == set(range(n)), f"row {r}: expected all of 0..{n - 1}"
            continue
        row = x[r, st[r] : en[r]]
        chosen = np.zeros(n, bool)
        chosen[valid] = True
        rank = np.where(np.isnan(row), -np.inf, row)
        worst_in = np.min(rank[chosen])
        best_out = np.max(rank[~chosen])
        if np.isnan(row[chosen]).any():
            assert np.isnan(row[~chosen]).all(), f"row {r}: a NaN was selected before a number"
        assert best_out <= worst_in + atol, f"row {r}: unselected {best_out} above selected {worst_in}"


# ------------------------------------------------------------------ latent cache (SPEC 2.3)
def latent_token(pages, slot: int, tokens_per_page: int, format: str = "v4_fp8") -> np.ndarray:
    """Dequantized latent (float32 [d_qk]: 512 for v4_fp8, 576 for v32_fp8) of token `slot`."""
    pages = np.asarray(pages, dtype=np.uint8)
    flat = pages.reshape(pages.shape[0], -1)
    p, o = divmod(int(slot), tokens_per_page)
    page = flat[p]
    if format == "v4_fp8":
        rec = page[o * 576 : (o + 1) * 576]
        sc = ue8m0_to_f32(page[tokens_per_page * 576 + o * 8 : tokens_per_page * 576 + o * 8 + 7])
        nope = e4m3_to_f32(rec[:448]) * np.repeat(sc, 64)
        rope = bf16_to_f32(np.ascontiguousarray(rec[448:576]).view("<u2"))
        return np.concatenate([nope, rope]).astype(np.float32)
    if format == "v32_fp8":
        rec = page[o * 656 : (o + 1) * 656]
        sc = np.ascontiguousarray(rec[512:528]).view("<f4")
        nope = e4m3_to_f32(rec[:512]) * np.repeat(sc, 128)
        rope = bf16_to_f32(np.ascontiguousarray(rec[528:656]).view("<u2"))
        return np.concatenate([nope, rope]).astype(np.float32)
    raise ValueError(f"unknown latent format {format!r}")


def write_latent_cache(kv, slot_mapping, pages, tokens_per_page: int, format: str = "v4_fp8"):
    """Returns a copy of `pages` with kv (float32 [T, d_qk] or bf16 bits) quantized in.
    v4_fp8: per 64 NoPE values a UE8M0 scale 2^ceil(log2(amax / 448)), RoPE as bf16, pad byte 0.
    v32_fp8: per 128 NoPE values an fp32 scale max(amax / 448, FLT_MIN) (vLLM's fp8_ds_mla rule).
    amax ignores NaN inputs; a NaN quotient is stored as the positive NaN code 0x7F."""
    out = np.array(pages, dtype=np.uint8, copy=True)
    flat = out.reshape(out.shape[0], -1)
    kv = _as_f32(kv)
    P = tokens_per_page
    for t, slot in enumerate(np.asarray(slot_mapping).tolist()):
        if slot < 0:
            continue
        p, o = divmod(int(slot), P)
        x = kv[t]
        if format == "v4_fp8":
            blocks = x[:448].reshape(7, 64)
            e = ue8m0_ceil(_amax(blocks, axis=1) / np.float32(E4M3_MAX))
            codes = _writer_e4m3(blocks, ue8m0_to_f32(e)[:, None]).reshape(448)
            rope = f32_to_bf16(x[448:512]).astype("<u2").view(np.uint8)
            flat[p, o * 576 : o * 576 + 448] = codes
            flat[p, o * 576 + 448 : (o + 1) * 576] = rope
            base = P * 576 + o * 8
            flat[p, base : base + 7] = e
            flat[p, base + 7] = 0
        else:
            blocks = x[:512].reshape(4, 128)
            amax = _amax(blocks, axis=1)
            sc = np.maximum(amax / np.float32(E4M3_MAX), np.finfo(np.float32).tiny).astype(np.float32)
            codes = _writer_e4m3(blocks, sc[:, None]).reshape(512)
            rec = flat[p, o * 656 : (o + 1) * 656]
            rec[:512] = codes
            rec[512:528] = sc.astype("<f4").view(np.uint8)
            rec[528:656] = f32_to_bf16(x[512:576]).astype("<u2").view(np.uint8)
    return out


# ------------------------------------------------------------------ sparse MLA (SPEC 3.5 / 3.6)
def _attend(qv, keys, d_v, sm_scale, sink):
    """One (token, head): qv [d_qk] float64, keys [n, d_qk] float64 -> (out [d_v], lse)."""
    if keys.shape[0] == 0:
        return np.zeros(d_v), -np.inf
    s = sm_scale * (keys @ qv)
    mx = np.max(s)
    p = np.exp(s - mx)
    denom = np.sum(p)
    lse = mx + np.log(denom)
    out = (p @ keys[:, :d_v]) / denom
    if sink is not None:
        out = out * (1.0 / (1.0 + np.exp(sink - lse)))  # exp(lse) / (exp(lse) + exp(sink))
    return out, lse


def _valid(ind_row, length):
    ind = np.asarray(ind_row).astype(np.int64)
    if length is not None:
        ind = ind[: max(int(length), 0)]
    return ind[ind >= 0]


def sparse_mla_decode(q, pages, tokens_per_page: int, indices, *, sm_scale: float, format: str = "v4_fp8",
                      topk_length=None, extra=None, attn_sink=None):
    """Reference of sparse_mla_decode: (out float32 [B, Sq, Hq, 512], lse float32 [B, Sq, Hq]).
    q: bf16 bits (uint16) or float [B, Sq, Hq, d_qk]. extra: optional dict(pages=, tokens_per_page=,
    indices=, topk_length=None, format=) for the second cache; both index sets join one softmax.
    The sink scales out by exp(lse) / (exp(lse) + exp(sink[h])); lse is the sink-free value."""
    qf = _as_f32(q).astype(np.float64)
    B, Sq, Hq, _ = qf.shape
    ind = np.asarray(indices)
    out = np.zeros((B, Sq, Hq, LATENT_DV), dtype=np.float32)
    lse = np.full((B, Sq, Hq), -np.inf, dtype=np.float32)
    sinks = None if attn_sink is None else np.asarray(attn_sink, dtype=np.float64)
    for b in range(B):
        for s in range(Sq):
            keys = [latent_token(pages, i, tokens_per_page, format)
                    for i in _valid(ind[b, s], None if topk_length is None else np.asarray(topk_length)[b])]
            if extra is not None:
                e_len = extra.get("topk_length")
                e_ind = _valid(np.asarray(extra["indices"])[b, s], None if e_len is None else np.asarray(e_len)[b])
                keys += [latent_token(extra["pages"], i, extra["tokens_per_page"], extra.get("format", format))
                         for i in e_ind]
            K = np.array(keys, dtype=np.float64).reshape(len(keys), qf.shape[-1])
            for h in range(Hq):
                o, l = _attend(qf[b, s, h], K, LATENT_DV, sm_scale, None if sinks is None else sinks[h])
                out[b, s, h] = o
                lse[b, s, h] = l
    return out, lse


def sparse_mla_prefill(q, kv, indices, *, sm_scale: float, topk_length=None, attn_sink=None, d_v: int = LATENT_DV):
    """Reference of sparse_mla_prefill: (out float32 [M, Hq, d_v], lse float32 [M, Hq]) over rows
    of the bf16 latent kv [Nk, d_qk]."""
    qf = _as_f32(q).astype(np.float64)
    kvf = _as_f32(kv).astype(np.float64)
    M, Hq, _ = qf.shape
    ind = np.asarray(indices)
    out = np.zeros((M, Hq, d_v), dtype=np.float32)
    lse = np.full((M, Hq), -np.inf, dtype=np.float32)
    sinks = None if attn_sink is None else np.asarray(attn_sink, dtype=np.float64)
    for m in range(M):
        K = kvf[_valid(ind[m], None if topk_length is None else np.asarray(topk_length)[m])]
        for h in range(Hq):
            o, l = _attend(qf[m, h], K, d_v, sm_scale, None if sinks is None else sinks[h])
            out[m, h] = o
            lse[m, h] = l
    return out, lse
