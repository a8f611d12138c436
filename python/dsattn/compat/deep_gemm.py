"""DeepGEMM's lightning-indexer functions (deep_gemm.fp8_paged_mqa_logits and friends) on dsattn.

Same names, positional order, keywords, defaults and result shapes as DeepGEMM's Python API:

  get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None)
      -> int32 [num_sms + 1, 2]
  fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                       max_context_len, clean_logits=False, indices=None)
      -> float32 [B * next_n, max_context_len]
  fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                           max_context_len, clean_logits=False, logits_dtype=torch.float32,
                           indices=None)                 q = (values, scales or None)
  fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True,
                 max_seqlen_k=0)                          kv = (k, k_scales)
      -> float32 [M, Nk], or [M, max_seqlen_k] (column t - ks[m]) when max_seqlen_k > 0
  fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True,
                     max_seqlen_k=0, logits_dtype=torch.float32)
  get_num_sms() -> the current CUDA device's multiprocessors
and one function DeepGEMM does not have, on the same tensors:
  fp8_paged_mqa_topk(q, kv_cache, weights, context_lens, block_table, topk, sorted=False,
                     return_values=False, return_slot_ids=False) -> dsattn.TopkResult
      the logits and their top-k fused (no [B * next_n, max_context_len] logits in memory)

Tensors as DeepGEMM takes them: q E4M3 [B, next_n, H, D] (prefill [M, H, D]); kv_cache uint8
[num_blocks, block_kv, 1, D + 4] (FP8, SPEC 2.1) or [num_blocks, block_kv, 1, D / 2 + 4] (MXFP4,
SPEC 2.2), page-major, its first-dimension stride the page stride (padded strides work);
weights float32 [B * next_n, H]; context_lens int32 [B, next_n] (the states each query row sees);
block_table int32 [B, max_blocks]. MXFP4: q = (packed E2M1 [.., H, D / 2], int32 UE8M0 scales
[.., H]), int8 / uint8 / float4_e2m1fn_x2 storage all read as bytes.

Where this differs from DeepGEMM:
  * schedule_meta holds dsattn's schedule (balanced over num_sms - 2 partitions so that it fits
    DeepGEMM's [num_sms + 1, 2] buffer, which engines keep and copy into for CUDA graphs). A buffer
    filled by DeepGEMM itself must not be passed in; schedule_meta=None computes the schedule
    inside the call. As with DeepGEMM it must come from the same context_lens (and next_n). A call
    with one request does not read it: the op splits one request without a schedule, faster.
  * More geometry is accepted: any block_kv (states per page) from 1 to 256, H in {8, 16, 24, 32,
    48, 64}, D in {32, 64, 128}, MXFP4 and next_n > 1 on every architecture, clean_logits with 2-D
    context_lens, the CPU. context_lens may also be 1-D [B] (row j of request b sees
    L_b - next_n + j + 1 states), but get_paged_mqa_logits_metadata needs the 2-D form, as
    DeepGEMM's does.
  * indices (DeepGEMM's varlen mode on SM100: one query row per entry, block_table and context_lens
    already per row) is checked and needs nothing else: dsattn reads each row's own block-table row.
  * bfloat16 weights (DeepGEMM on SM100) are widened to float32 (exact).
  * Logits rows are allocated the way DeepGEMM allocates them (row stride a multiple of 256
    elements and of 1024 bytes); the entries past a row's context are unspecified unless
    clean_logits (-inf), as in DeepGEMM.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

import dsattn

from .. import torch_ops  # noqa: F401  (registers torch.ops.dsattn)
from . import _check

_ops = torch.ops.dsattn
_PACKED_FP4 = tuple(getattr(torch, n) for n in ("uint8", "int8", "float4_e2m1fn_x2") if hasattr(torch, n))
_E4M3 = (torch.float8_e4m3fn, torch.uint8)
_LOGIT_DTYPES = (torch.float32, torch.bfloat16)
_SCHEDULE_SPARE = 2  # dsattn's 4-int header is the two [num_sms + 1, 2] rows its partitions leave free


def _fail(fn: str, msg: str, exc=ValueError):
    _check.fail(f"deep_gemm.{fn}", msg, exc)


def _tensor(fn: str, arg: str, x, dtypes, ndims) -> Tensor:
    return _check.tensor(f"deep_gemm.{fn}", arg, x, dtypes, ndims)


def _pair(fn: str, arg: str, x, second_optional: bool) -> tuple:
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        what = "(values, scales or None)" if second_optional else "(values, scales)"
        _fail(fn, f"{arg} expected a pair {what}, got {type(x).__name__}", TypeError)
    return x[0], x[1]


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _logits_buffer(rows: int, width: int, dtype: torch.dtype, device) -> Tensor:
    """[rows, width] view of a row-padded buffer: DeepGEMM's rows (256-element and 1024-byte aligned)."""
    stride = _align(_align(max(width, 1), 256), 1024 // dtype.itemsize)
    return torch.empty((rows, stride), dtype=dtype, device=device)[:, :width]


def _weights(fn: str, weights) -> Tensor:
    w = _tensor(fn, "weights", weights, (torch.float32, torch.bfloat16), (2,))
    return w.float() if w.dtype == torch.bfloat16 else w


def get_num_sms() -> int:
    """Multiprocessors of the current CUDA device (0 without CUDA), the num_sms engines pass to
    get_paged_mqa_logits_metadata."""
    return dsattn.cuda_num_sms()


def get_paged_mqa_logits_metadata(context_lens: Tensor, block_kv: int, num_sms: int,
                                  indices: Optional[Tensor] = None) -> Tensor:
    """The work split of fp8_paged_mqa_logits over num_sms multiprocessors: int32 [num_sms + 1, 2]
    on context_lens' device, computed by a device kernel on CUDA (no host sync, graph-safe).
    context_lens int32 [B, next_n]; block_kv the states per page of the cache it will read."""
    fn = "get_paged_mqa_logits_metadata"
    lens = _tensor(fn, "context_lens", context_lens, (torch.int32,), (1, 2))
    if lens.dim() != 2:
        _fail(fn, f"context_lens expected int32 [batch, next_n] (2-D, as DeepGEMM's), got shape {list(lens.shape)}")
    if not 1 <= int(block_kv) <= 256:
        _fail(fn, f"block_kv expected in [1, 256], got {block_kv}")
    if int(num_sms) <= _SCHEDULE_SPARE:
        _fail(fn, f"num_sms expected > {_SCHEDULE_SPARE}, got {num_sms}")
    _check_varlen(fn, indices, lens.shape[0], lens.shape[1])
    meta = _ops.schedule_metadata(lens, int(block_kv), int(lens.shape[1]), None, int(num_sms) - _SCHEDULE_SPARE)
    return meta.view(int(num_sms) + 1, 2)


def _check_varlen(fn: str, indices, rows: int, next_n: int) -> None:
    if indices is None:
        return
    _tensor(fn, "indices", indices, (torch.int32,), (1,))
    if indices.shape[0] != rows or next_n != 1:
        _fail(fn, f"indices expected int32 [{rows}] with next_n 1 (one query row each), got shape "
                  f"{list(indices.shape)} with next_n {next_n}")


def _paged_inputs(fn: str, q, kv_cache) -> tuple:
    """(values, scales or None, head_dim, cache as uint8) of DeepGEMM's q (E4M3, or (values, scales):
    scales None is FP8, int32 scales MXFP4) and kv_cache [num_blocks, block_kv, 1, state bytes]."""
    values, scales = _pair(fn, "q", q, True) if isinstance(q, (tuple, list)) else (q, None)
    fp4 = scales is not None
    if fp4:
        values = _check.as_bytes(_tensor(fn, "q[0]", values, _PACKED_FP4, (4,)))
        _tensor(fn, "q[1]", scales, (torch.int32,), (3,))
        head_dim, state_bytes = 2 * values.shape[3], values.shape[3] + 4
    else:
        values = _tensor(fn, "q", values, _E4M3, (4,))
        head_dim, state_bytes = values.shape[3], values.shape[3] + 4
    cache = _tensor(fn, "kv_cache", kv_cache, (torch.uint8, torch.int8, torch.float8_e4m3fn), (4,))
    if cache.shape[2] != 1 or cache.shape[3] != state_bytes:
        _fail(fn, f"kv_cache shape expected [num_blocks, block_kv, 1, {state_bytes}] ("
                  f"{'D / 2 + 4' if fp4 else 'D + 4'} bytes per state, D = {head_dim}), got {list(cache.shape)}")
    return values, scales, head_dim, _check.as_bytes(cache)


def _paged(fn: str, q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
           logits_dtype, indices) -> Tensor:
    values, scales, head_dim, cache = _paged_inputs(fn, q, kv_cache)
    _check.tensors(f"deep_gemm.{fn}", block_table=block_table)
    if logits_dtype not in _LOGIT_DTYPES:
        _fail(fn, f"logits_dtype expected torch.float32 or torch.bfloat16, got {logits_dtype}")
    lens = _tensor(fn, "context_lens", context_lens, (torch.int32,), (1, 2))
    batch, next_n = values.shape[0], values.shape[1]
    _check_varlen(fn, indices, batch, next_n)
    schedule = None
    if schedule_meta is not None:
        meta = _tensor(fn, "schedule_meta", schedule_meta, (torch.int32,), (2,))
        if meta.shape[1] != 2 or meta.shape[0] <= _SCHEDULE_SPARE + 1 or not meta.is_contiguous():
            _fail(fn, f"schedule_meta expected a contiguous int32 [num_sms + 1, 2] from "
                      f"get_paged_mqa_logits_metadata, got shape {list(meta.shape)}")
        # One request: the op splits it over the SMs without a schedule (no schedule kernel either),
        # which is the faster launch on Hopper (the one-group walk); a schedule is never needed.
        schedule = meta.view(-1) if batch > 1 else None
    if int(max_context_len) < 0:
        _fail(fn, f"max_context_len expected >= 0, got {max_context_len}")
    logits = _logits_buffer(batch * next_n, int(max_context_len), logits_dtype, values.device)
    _ops.paged_mqa_logits_out(values, _weights(fn, weights), cache, block_table, lens, int(cache.shape[1]), logits,
                              head_dim=head_dim, cache_format="fp8" if scales is None else "mxfp4", q_scales=scales,
                              schedule=schedule, clean=bool(clean_logits))
    return logits


def fp8_paged_mqa_logits(q: Tensor, kv_cache: Tensor, weights: Tensor, context_lens: Tensor, block_table: Tensor,
                         schedule_meta: Optional[Tensor], max_context_len: int, clean_logits: bool = False,
                         indices: Optional[Tensor] = None) -> Tensor:
    """Indexer logits over the paged FP8 key cache: float32 [B * next_n, max_context_len]."""
    return _paged("fp8_paged_mqa_logits", q, kv_cache, weights, context_lens, block_table, schedule_meta,
                  max_context_len, clean_logits, torch.float32, indices)


def fp8_fp4_paged_mqa_logits(q: Tuple[Tensor, Optional[Tensor]], kv_cache: Tensor, weights: Tensor,
                             context_lens: Tensor, block_table: Tensor, schedule_meta: Optional[Tensor],
                             max_context_len: int, clean_logits: bool = False,
                             logits_dtype: torch.dtype = torch.float32,
                             indices: Optional[Tensor] = None) -> Tensor:
    """fp8_paged_mqa_logits with q = (values, scales): scales None reads an FP8 cache, an int32
    [B, next_n, H] scale tensor an MXFP4 one. Logits in logits_dtype (float32 or bfloat16)."""
    return _paged("fp8_fp4_paged_mqa_logits", q, kv_cache, weights, context_lens, block_table, schedule_meta,
                  max_context_len, clean_logits, logits_dtype, indices)


def fp8_paged_mqa_topk(q, kv_cache: Tensor, weights: Tensor, context_lens: Tensor, block_table: Tensor, topk: int, *,
                       sorted: bool = False, return_values: bool = False, return_slot_ids: bool = False):
    """Not in DeepGEMM: fp8_paged_mqa_logits and the top-k that follows it, fused (SPEC 3.4), on the
    same tensors (q E4M3 or (values, scales), kv_cache [num_blocks, block_kv, 1, bytes], weights,
    context_lens, block_table). No [B * next_n, max_context_len] logits are made. Returns
    dsattn.TopkResult(indices int32 [B * next_n, topk]: states of each row's request, -1 padding;
    values float32 or None; slot_ids int32 (block_table[b][i // block_kv] * block_kv + i % block_kv)
    or None). It computes its own schedule (faster for the fused kernels than a caller's)."""
    fn = "fp8_paged_mqa_topk"
    values, scales, head_dim, cache = _paged_inputs(fn, q, kv_cache)
    _check.tensors(f"deep_gemm.{fn}", block_table=block_table)
    _tensor(fn, "context_lens", context_lens, (torch.int32,), (1, 2))
    if int(topk) <= 0:
        _fail(fn, f"topk expected > 0, got {topk}")
    rows, dev = values.shape[0] * values.shape[1], values.device
    out_i = torch.empty((rows, int(topk)), dtype=torch.int32, device=dev)
    out_v = torch.empty((rows, int(topk)), dtype=torch.float32, device=dev) if return_values else None
    out_s = torch.empty((rows, int(topk)), dtype=torch.int32, device=dev) if return_slot_ids else None
    _ops.paged_mqa_topk_out(values, _weights(fn, weights), cache, block_table, context_lens, int(cache.shape[1]),
                            int(topk), out_i, out_v, out_s, head_dim=head_dim,
                            cache_format="fp8" if scales is None else "mxfp4",
                            q_scales=scales, sorted=bool(sorted))
    return dsattn.TopkResult(out_i, out_v, out_s)


def _prefill(fn: str, q, kv, weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype) -> Tensor:
    values, q_scales = _pair(fn, "q", q, True) if isinstance(q, (tuple, list)) else (q, None)
    k, k_scales = _pair(fn, "kv", kv, False)
    fp4 = q_scales is not None
    if fp4:
        values = _check.as_bytes(_tensor(fn, "q[0]", values, _PACKED_FP4, (3,)))
        _tensor(fn, "q[1]", q_scales, (torch.int32,), (2,))
        k = _check.as_bytes(_tensor(fn, "kv[0]", k, _PACKED_FP4, (2,)))
        k_scales = _tensor(fn, "kv[1]", k_scales, (torch.int32,), (1, 2))
    else:
        values = _tensor(fn, "q", values, _E4M3, (3,))
        k = _tensor(fn, "kv[0]", k, _E4M3, (2,))
        k_scales = _tensor(fn, "kv[1]", k_scales, (torch.float32,), (1, 2))
    if k_scales.dim() == 2:  # [Nk, 1], as some engines keep it
        if k_scales.shape[1] != 1:
            _fail(fn, f"kv[1] shape expected [{k.shape[0]}] or [{k.shape[0]}, 1], got {list(k_scales.shape)}")
        k_scales = k_scales.view(-1) if k_scales.is_contiguous() else k_scales[:, 0]
    _check.tensors(f"deep_gemm.{fn}", cu_seq_len_k_start=ks, cu_seq_len_k_end=ke)
    if logits_dtype not in _LOGIT_DTYPES:
        _fail(fn, f"logits_dtype expected torch.float32 or torch.bfloat16, got {logits_dtype}")
    width = int(max_seqlen_k)
    if width < 0:
        _fail(fn, f"max_seqlen_k expected >= 0, got {width}")
    compressed = width > 0
    logits = _logits_buffer(values.shape[0], width if compressed else k.shape[0], logits_dtype, values.device)
    _ops.mqa_logits_out(values, _weights(fn, weights), k, k_scales, ks, ke, logits,
                        format="mxfp4" if fp4 else "fp8", q_scales=q_scales, compressed=compressed,
                        clean=bool(clean_logits))
    return logits


def fp8_mqa_logits(q: Tensor, kv: Tuple[Tensor, Tensor], weights: Tensor, cu_seq_len_k_start: Tensor,
                   cu_seq_len_k_end: Tensor, clean_logits: bool = True, max_seqlen_k: int = 0) -> Tensor:
    """Prefill (ragged) indexer logits: q E4M3 [M, H, D], kv = (E4M3 [Nk, D], float32 [Nk]), row m
    over keys [cu_seq_len_k_start[m], cu_seq_len_k_end[m]). float32 [M, Nk], or [M, max_seqlen_k]
    with column t - start when max_seqlen_k > 0."""
    return _prefill("fp8_mqa_logits", q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits,
                    max_seqlen_k, torch.float32)


def fp8_fp4_mqa_logits(q: Tuple[Tensor, Optional[Tensor]], kv: Tuple[Tensor, Tensor], weights: Tensor,
                       cu_seq_len_k_start: Tensor, cu_seq_len_k_end: Tensor, clean_logits: bool = True,
                       max_seqlen_k: int = 0, logits_dtype: torch.dtype = torch.float32) -> Tensor:
    """fp8_mqa_logits with q = (values, scales): scales None is FP8 (kv as there); int32 [M, H]
    scales make it MXFP4 (q packed [M, H, D / 2], kv = (packed [Nk, D / 2], int32 [Nk]))."""
    return _prefill("fp8_fp4_mqa_logits", q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits,
                    max_seqlen_k, logits_dtype)


__all__ = ["fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "fp8_mqa_logits", "fp8_paged_mqa_logits",
           "fp8_paged_mqa_topk", "get_num_sms", "get_paged_mqa_logits_metadata"]
