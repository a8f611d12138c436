"""Host-side checks of what is *in* a cache, for debugging an integration.

The ops cannot read device memory before they run, so bytes that are wrong in content rather than
in shape give wrong results without an error: a cache written token-interleaved ([S, D + 4] rows)
but read page-major (SPEC 2.1) yields NaN scores, context lengths counted in tokens where the layer
compresses (ratio 2: half the states were never written) score zeros, a stale block table points at
another request's pages. These functions copy the states a call would read to the host and report
what looks wrong:

    report = dsattn.inspect_indexer_cache(cache, block_table, context_lens)
    if not report.ok:
        print(report)          # what was found, with counts and the likely cause

    dsattn.inspect_latent_cache(latent_cache, indices)   # the tokens that slot ids point at

They synchronize (device -> host copies) and take time proportional to the states read: for tests
and debugging, not for the serving loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

from ._api import IndexerCache, LatentCache

# SPEC 2.3 byte layouts. V4: per page, P records of [448 E4M3 | 64 bf16 RoPE] then P records of
# [7 UE8M0 scales | pad]. V3.2: 656-byte tokens [512 E4M3 | 4 fp32 scales | 64 bf16 RoPE].
_V4_RECORD, _V4_NOPE, _V4_SCALE_RECORD, _V4_SCALES = 576, 448, 8, 7
_V32_TOKEN, _V32_NOPE, _V32_ROPE_AT = 656, 512, 528

_WRITTEN_BUT_ZERO_HINT = ("never written? (context lengths must count states: tokens // ratio on a "
                          "compressed layer; or the writes used other slot ids)")


@dataclass
class CacheReport:
    """What inspect_indexer_cache / inspect_latent_cache found. ok: no problem; problems: one line
    each; counts: the raw tallies (keys depend on the format)."""

    cache: str
    checked: int
    problems: List[str] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = f"{self.cache}: {self.checked} entries checked"
        if self.ok:
            return head + ", no problem found"
        return head + "\n" + "\n".join(f"  - {p}" for p in self.problems)


def _host(x) -> np.ndarray:
    """x as a host numpy array (torch / cupy / numpy / anything DLPack on the host); FP8 and bf16
    torch dtypes come back as their bit patterns."""
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        import torch

        t = x.detach()
        if t.dtype in (torch.float8_e4m3fn, torch.int8):
            t = t.view(torch.uint8)
        elif t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        return t.cpu().numpy()
    if mod == "cupy":
        return x.get()
    return np.from_dlpack(x)


def _pages_2d(fn: str, pages: np.ndarray, page_stride_bytes: int) -> np.ndarray:
    """[num_pages, bytes] uint8: one row per page (the first dimension is the page, as the ops read
    it; an explicit page_stride_bytes other than the row length re-cuts a contiguous buffer)."""
    flat = np.ascontiguousarray(pages).reshape(pages.shape[0], -1).view(np.uint8)
    stride = int(page_stride_bytes)
    if stride and stride != flat.shape[1]:
        if flat.size % stride:
            raise ValueError(f"{fn}: cache.page_stride_bytes {stride} does not divide the {flat.size} bytes of "
                             f"cache.pages (shape {list(pages.shape)})")
        flat = flat.reshape(-1, stride)
    return flat


def _request_lengths(block_table, context_lens, row_request):
    """Per block-table row, the most states any of its query rows sees."""
    bt = _host(block_table).astype(np.int64)
    lens = _host(context_lens).astype(np.int64)
    per = np.zeros(bt.shape[0], np.int64)
    if row_request is not None:
        rr = _host(row_request).astype(np.int64).reshape(-1)
        for r, b in enumerate(rr):
            if 0 <= b < bt.shape[0]:
                per[b] = max(per[b], lens.reshape(-1)[r])
    elif lens.ndim == 2:
        per[: lens.shape[0]] = lens.max(axis=1) if lens.shape[1] else 0
    else:
        per[: lens.shape[0]] = lens
    return bt, np.maximum(per, 0)


def inspect_indexer_cache(cache: IndexerCache, block_table, context_lens, *, row_request=None) -> CacheReport:
    """Checks the states that paged_mqa_logits / paged_mqa_topk would read for these block-table
    rows and context lengths (the same arguments: lengths [B], [B, N], or varlen [R] with
    row_request): block-table entries outside the cache, and per state the scale (FP8: finite and
    > 0; 0 means the state was never written) and the values (FP8 NaN codes; MXFP4: the UE8M0
    NaN scale 0xFF, and all-zero states)."""
    if not isinstance(cache, IndexerCache):
        raise TypeError(f"inspect_indexer_cache: cache expected dsattn.IndexerCache, got {type(cache).__name__}")
    S, D, fmt = int(cache.states_per_page), int(cache.head_dim), cache.format
    pages = _pages_2d("inspect_indexer_cache", _host(cache.pages), cache.page_stride_bytes)
    bt, per = _request_lengths(block_table, context_lens, row_request)
    name = f"indexer cache ({fmt}, S = {S}, D = {D}, {pages.shape[0]} pages)"
    counts = {"states": 0, "bad_page": 0}
    problems: List[str] = []
    page_ids, offsets = [], []
    first_bad = short = None
    for b in range(bt.shape[0]):
        n = int(per[b])
        if n == 0:
            continue
        t = np.arange(n)
        col = t // S
        if col.max() >= bt.shape[1]:
            short = short or (b, n)
            keep = col < bt.shape[1]
            t, col = t[keep], col[keep]
        pid = bt[b, col]
        bad = (pid < 0) | (pid >= pages.shape[0])
        if bad.any():
            counts["bad_page"] += int(bad.sum())
            if first_bad is None:
                first_bad = (b, int(col[bad][0]), int(pid[bad][0]))
        page_ids.append(pid[~bad])
        offsets.append((t % S)[~bad])
    if short is not None:
        b, n = short
        problems.append(f"context lengths need more pages than the block table has ({bt.shape[1]}), e.g. "
                        f"row {b}: {n} states need {-(-n // S)} pages (states past the table score -inf)")
    if first_bad is not None:
        b, c, p = first_bad
        problems.append(f"{counts['bad_page']} states on block-table entries outside [0, {pages.shape[0]}), "
                        f"e.g. block_table[{b}][{c}] = {p} (they score -inf)")
    if not page_ids:
        return CacheReport(name, 0, problems, counts)
    pid, off = np.concatenate(page_ids), np.concatenate(offsets)
    counts["states"] = int(pid.size)
    if fmt == "fp8":
        vals = pages[pid[:, None], off[:, None] * D + np.arange(D)]                       # [n, D] codes
        sc_bytes = pages[pid[:, None], S * D + 4 * off[:, None] + np.arange(4)]           # [n, 4]
        scale = np.ascontiguousarray(sc_bytes).view("<f4").reshape(-1)
        counts["nan_or_inf_scale"] = int((~np.isfinite(scale)).sum())
        counts["negative_scale"] = int((scale < 0).sum())
        counts["zero_scale"] = int((scale == 0).sum())
        counts["nan_values"] = int(((vals & 0x7F) == 0x7F).any(axis=1).sum())
        broken = counts["nan_or_inf_scale"] + counts["negative_scale"]
        if broken:
            problems.append(f"{broken} of {pid.size} states have a NaN, infinite or negative scale: the pages "
                            "may be read with the wrong layout (SPEC 2.1 is page-major: S * D value bytes, then "
                            "S fp32 scales; not token-interleaved [S, D + 4] rows), a wrong states_per_page or "
                            "a wrong page stride")
        if counts["zero_scale"]:
            problems.append(f"{counts['zero_scale']} of {pid.size} states have scale 0: {_WRITTEN_BUT_ZERO_HINT}")
        if counts["nan_values"]:
            problems.append(f"{counts['nan_values']} of {pid.size} states hold E4M3 NaN codes (0x7f / 0xff)")
    elif fmt == "mxfp4":
        vals = pages[pid[:, None], off[:, None] * (D // 2) + np.arange(D // 2)]
        sc = pages[pid[:, None], S * D // 2 + 4 * off[:, None] + np.arange(D // 32)]
        counts["nan_scale"] = int((sc == 0xFF).any(axis=1).sum())
        counts["unwritten"] = int(((vals == 0).all(axis=1) & (sc == 0).all(axis=1)).sum())
        if counts["nan_scale"]:
            problems.append(f"{counts['nan_scale']} of {pid.size} states have a UE8M0 NaN scale (0xff): the pages "
                            "may be read with the wrong layout (SPEC 2.2: S * D / 2 value bytes, then S int32 "
                            "scale words) or a wrong states_per_page")
        if counts["unwritten"]:
            problems.append(f"{counts['unwritten']} of {pid.size} states are all zero: {_WRITTEN_BUT_ZERO_HINT}")
    else:
        raise ValueError(f"inspect_indexer_cache: cache.format expected fp8 or mxfp4, got {fmt!r}")
    return CacheReport(name, int(pid.size), problems, counts)


def inspect_latent_cache(cache: LatentCache, indices, topk_length=None) -> CacheReport:
    """Checks the tokens that sparse_mla_decode would read for these slot ids (int32 [..., topk],
    -1 = none; topk_length [B] limits each request's first dimension row as in the op): slot ids
    past the cache, and per token the scales (V4: UE8M0 bytes, 0xff is NaN; V3.2: fp32, finite
    and > 0), E4M3 NaN codes, NaN in the bf16 RoPE part, and all-zero (never written) tokens."""
    if not isinstance(cache, LatentCache):
        raise TypeError(f"inspect_latent_cache: cache expected dsattn.LatentCache, got {type(cache).__name__}")
    P, fmt = int(cache.tokens_per_page), cache.format
    pages = _pages_2d("inspect_latent_cache", _host(cache.pages), cache.page_stride_bytes)
    ind = _host(indices).astype(np.int64)
    if topk_length is not None:
        tl = _host(topk_length).astype(np.int64).reshape(-1)
        live = np.arange(ind.shape[-1]) < tl.reshape((-1,) + (1,) * (ind.ndim - 1))
        ind = np.where(live, ind, -1)
    ids = np.unique(ind[ind >= 0])
    slots = pages.shape[0] * P
    name = f"latent cache ({fmt}, P = {P}, {pages.shape[0]} pages)"
    counts = {"tokens": 0, "bad_slot": int((ids >= slots).sum())}
    problems: List[str] = []
    if counts["bad_slot"]:
        problems.append(f"{counts['bad_slot']} slot ids are >= {slots} (num_pages * tokens_per_page), e.g. "
                        f"{int(ids[ids >= slots][0])} (they are skipped as -1)")
    ids = ids[ids < slots]
    counts["tokens"] = int(ids.size)
    if ids.size == 0:
        return CacheReport(name, 0, problems, counts)
    pid, off = ids // P, ids % P
    if fmt == "v4_fp8":
        rec = pages[pid[:, None], off[:, None] * _V4_RECORD + np.arange(_V4_RECORD)]
        sc = pages[pid[:, None], P * _V4_RECORD + off[:, None] * _V4_SCALE_RECORD + np.arange(_V4_SCALES)]
        nope, rope = rec[:, :_V4_NOPE], np.ascontiguousarray(rec[:, _V4_NOPE:]).view("<u2")
        counts["nan_scale"] = int((sc == 0xFF).any(axis=1).sum())
        counts["unwritten"] = int(((rec == 0).all(axis=1) & (sc == 0).all(axis=1)).sum())
        layout = "SPEC 2.3 V4: P records of 576 bytes, then P scale records of 8 bytes, page-major"
    elif fmt == "v32_fp8":
        rec = pages[pid[:, None], off[:, None] * _V32_TOKEN + np.arange(_V32_TOKEN)]
        scale = np.ascontiguousarray(rec[:, _V32_NOPE:_V32_ROPE_AT]).view("<f4")           # [n, 4]
        nope, rope = rec[:, :_V32_NOPE], np.ascontiguousarray(rec[:, _V32_ROPE_AT:]).view("<u2")
        counts["nan_scale"] = int(((~np.isfinite(scale)) | (scale < 0)).any(axis=1).sum())
        counts["unwritten"] = int((rec == 0).all(axis=1).sum())
        layout = "SPEC 2.3 V3.2: 656-byte tokens, 512 E4M3 values, 4 fp32 scales, 64 bf16 RoPE values"
    else:
        raise ValueError(f"inspect_latent_cache: cache.format expected v4_fp8 or v32_fp8, got {fmt!r}")
    e4m3_nan = ((nope & 0x7F) == 0x7F).any(axis=1)                                         # S.1111.111
    bf16_nan = (((rope & 0x7F80) == 0x7F80) & ((rope & 0x7F) != 0)).any(axis=1)            # exponent 255, mantissa != 0
    counts["nan_values"] = int((e4m3_nan | bf16_nan).sum())
    if counts["nan_scale"]:
        problems.append(f"{counts['nan_scale']} of {ids.size} tokens have a NaN (or negative) scale: the pages may "
                        f"be read with the wrong format, tokens_per_page or page stride ({layout})")
    if counts["unwritten"]:
        problems.append(f"{counts['unwritten']} of {ids.size} tokens are all zero: never written? (the slot ids "
                        "must be page * tokens_per_page + offset of tokens the writer stored)")
    if counts["nan_values"]:
        problems.append(f"{counts['nan_values']} of {ids.size} tokens hold NaN values (E4M3 NaN codes or bf16 NaN "
                        "in the RoPE part)")
    return CacheReport(name, int(ids.size), problems, counts)
