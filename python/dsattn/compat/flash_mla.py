"""FlashMLA's sparse-attention functions (flash_mla.flash_mla_with_kvcache with indices, and
flash_mla.flash_mla_sparse_fwd) on dsattn.

Same names, positional order, keywords, defaults and results as FlashMLA's Python API:

  get_mla_metadata(*args, **kwargs) -> (FlashMLASchedMeta(), None)
  flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                         num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False,
                         indices=None, attn_sink=None, extra_k_cache=None,
                         extra_indices_in_kvcache=None, topk_length=None, extra_topk_length=None)
      -> (out bf16 [b, s_q, h_q, 512], lse float32 [b, h_q, s_q])
  flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None)
      -> (out bf16 [s_q, h_q, 512], max_logits, lse float32 [s_q, h_q])

Tensors as FlashMLA takes them: decode q bf16 [b, s_q, h_q, d_qk] with d_qk 576 (DeepSeek-V3.2,
656-byte tokens, SPEC 2.3) or 512 (DeepSeek-V4 "MODEL1", 584-byte tokens in page-major pages);
k_cache [num_blocks, page_block_size, 1, 656 or 584] (fp8 / int8 / uint8 storage), its
first-dimension stride the page stride; indices int32 [b, s_q, topk] slot ids
(page * page_block_size + offset, -1 = none); topk_length int32 [b]; attn_sink float32 [h_q];
the extra cache (V4's sliding window) likewise. Prefill: q bf16 [s_q, h_q, d_qk], kv bf16
[s_kv, 1, d_qk], indices int32 [s_q, 1, topk] (-1 or >= s_kv = none), topk_length int32 [s_q].
FlashMLA's conventions are kept: lse is the natural log-sum-exp without the sink, +inf for a query
with no valid index (whose output is zeros); the decode lse is a [b, h_q, s_q] view.

Where this differs from FlashMLA:
  * Only sparse attention: flash_mla_with_kvcache without indices (dense MLA) raises
    NotImplementedError; dsattn has no dense kernel.
  * flash_mla_sparse_fwd's max_logits (the largest sm_scale * q.k per query and head; FlashMLA's
    engines unpack and drop it) is None unless return_max_logits=True, which computes it with torch
    ops over the gathered keys in row blocks (bounded memory, a separate pass). No kernel of
    dsattn produces it; None fails loudly where a caller does use it.
  * More is accepted: h_q in {16, 32, 64, 128} (FlashMLA decodes 64 / 128), any page_block_size,
    sm_80 to sm_120, the CPU; slot ids past the cache are treated as -1.
  * The scheduling object only records the call's configuration to refuse a reuse with another
    one, as FlashMLA does; dsattn plans each call itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import torch_ops  # noqa: F401  (registers torch.ops.dsattn)
from . import _check

_ops = torch.ops.dsattn
_DV = 512
_TOKEN_BYTES = {576: ("v32_fp8", 656), 512: ("v4_fp8", 584)}  # d_qk -> (dsattn format, bytes per token)
_CACHE_DTYPES = (torch.float8_e4m3fn, torch.int8, torch.uint8)
_MAX_LOGITS_BLOCK_BYTES = 64 << 20  # the gathered keys of one row block in return_max_logits


def _fail(fn: str, msg: str, exc=ValueError):
    _check.fail(f"flash_mla.{fn}", msg, exc)


def _tensor(fn: str, arg: str, x, dtypes, ndim: int) -> Tensor:
    return _check.tensor(f"flash_mla.{fn}", arg, x, dtypes, (ndim,))


def _flashmla_lse(lse: Tensor) -> Tensor:
    """dsattn's lse (-inf for a query with no valid index) -> FlashMLA's (+inf there)."""
    return lse.masked_fill_(torch.isneginf(lse), float("inf"))


@dataclass
class FlashMLASchedMeta:
    """What get_mla_metadata returns: the configuration of the first call made with it, so that a
    reuse with other shapes is refused (FlashMLA keeps its tile schedule here; dsattn plans each
    call). Reuse one object only across calls of one configuration, as with FlashMLA."""

    have_initialized: bool = False
    config: Optional[tuple] = None


_CONFIG_FIELDS = ("batch size (q.shape[0])", "s_q (q.shape[1])", "h_q (q.shape[2])",
                  "page_block_size (k_cache.shape[1])", "topk (indices.shape[-1])",
                  "extra page_block_size (extra_k_cache.shape[1])",
                  "extra topk (extra_indices_in_kvcache.shape[-1])")


def get_mla_metadata(*args, **kwargs) -> Tuple[FlashMLASchedMeta, None]:
    """A fresh FlashMLASchedMeta and None, as FlashMLA returns; the arguments of the older
    interface (cache_seqlens, num_q_tokens_per_head_k, ...) are accepted and not needed."""
    return FlashMLASchedMeta(), None


def _check_meta(fn: str, meta, config: tuple) -> None:
    if not isinstance(meta, FlashMLASchedMeta):
        _fail(fn, f"tile_scheduler_metadata expected the FlashMLASchedMeta of dsattn.compat.flash_mla."
                  f"get_mla_metadata(), got {type(meta).__name__}", TypeError)
    if not meta.have_initialized:
        meta.have_initialized, meta.config = True, config
        return
    for name, was, now in zip(_CONFIG_FIELDS, meta.config, config):
        if was != now:
            _fail(fn, f"tile_scheduler_metadata was first used with {name} {was}, this call has {now}; "
                      f"take a new one from get_mla_metadata() per configuration")


def _latent_pages(fn: str, arg: str, cache, d_qk: int) -> Tensor:
    _, token_bytes = _TOKEN_BYTES[d_qk]
    pages = _tensor(fn, arg, cache, _CACHE_DTYPES, 4)
    if pages.shape[2] != 1 or pages.shape[3] != token_bytes:
        _fail(fn, f"{arg} shape expected [num_blocks, page_block_size, 1, {token_bytes}] (d_qk {d_qk}), got "
                  f"{list(pages.shape)}")
    return _check.as_bytes(pages)


def flash_mla_with_kvcache(q: Tensor, k_cache: Tensor, block_table: Optional[Tensor],
                           cache_seqlens: Optional[Tensor], head_dim_v: int,
                           tile_scheduler_metadata: FlashMLASchedMeta, num_splits: None = None,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           is_fp8_kvcache: bool = False, indices: Optional[Tensor] = None,
                           attn_sink: Optional[Tensor] = None, extra_k_cache: Optional[Tensor] = None,
                           extra_indices_in_kvcache: Optional[Tensor] = None,
                           topk_length: Optional[Tensor] = None,
                           extra_topk_length: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Sparse MLA decode over the FP8 latent cache (FlashMLA's sparse mode): (out bf16
    [b, s_q, h_q, 512], lse float32 [b, h_q, s_q]). block_table and cache_seqlens are not read
    (the indices are slot ids), as in FlashMLA's sparse mode."""
    fn = "flash_mla_with_kvcache"
    if indices is None:
        _fail(fn, "dense attention (indices=None) is not provided by dsattn; only FlashMLA's sparse mode "
                  "(indices given) is", NotImplementedError)
    if num_splits is not None:
        _fail(fn, f"num_splits expected None (the second value get_mla_metadata returns), got "
                  f"{type(num_splits).__name__}")
    if causal:
        _fail(fn, "causal expected False with indices (sparse attention), got True")
    if not is_fp8_kvcache:
        _fail(fn, "is_fp8_kvcache expected True with indices (the sparse mode reads the FP8 cache), got False")
    if int(head_dim_v) != _DV:
        _fail(fn, f"head_dim_v expected {_DV}, got {head_dim_v}")
    q = _tensor(fn, "q", q, (torch.bfloat16,), 4)
    _check.tensors(f"flash_mla.{fn}", attn_sink=attn_sink, topk_length=topk_length, extra_topk_length=extra_topk_length)
    d_qk = int(q.shape[3])
    if d_qk not in _TOKEN_BYTES:
        _fail(fn, f"q head dim (shape[3]) expected 576 (V3.2) or 512 (V4), got {d_qk}")
    fmt, _ = _TOKEN_BYTES[d_qk]
    pages = _latent_pages(fn, "k_cache", k_cache, d_qk)
    _tensor(fn, "indices", indices, (torch.int32,), 3)
    extra = None
    if extra_k_cache is not None or extra_indices_in_kvcache is not None:
        if extra_k_cache is None or extra_indices_in_kvcache is None:
            _fail(fn, "extra_k_cache and extra_indices_in_kvcache expected both or neither, got one")
        extra = _latent_pages(fn, "extra_k_cache", extra_k_cache, d_qk)
        _tensor(fn, "extra_indices_in_kvcache", extra_indices_in_kvcache, (torch.int32,), 3)
    elif extra_topk_length is not None:
        _fail(fn, "extra_topk_length expected None without extra_k_cache")
    _check_meta(fn, tile_scheduler_metadata,
                (q.shape[0], q.shape[1], q.shape[2], pages.shape[1], indices.shape[-1],
                 None if extra is None else extra.shape[1],
                 None if extra is None else extra_indices_in_kvcache.shape[-1]))
    scale = float(softmax_scale) if softmax_scale is not None else d_qk ** -0.5
    out, lse = _ops.sparse_mla_decode(
        q, pages, indices, scale, int(pages.shape[1]), cache_format=fmt, topk_length=topk_length,
        attn_sink=attn_sink, extra_pages=extra, extra_indices=extra_indices_in_kvcache if extra is not None else None,
        extra_topk_length=extra_topk_length, extra_tokens_per_page=0 if extra is None else int(extra.shape[1]),
        extra_format=fmt)
    return out, _flashmla_lse(lse).transpose(1, 2)


def _max_logits(q: Tensor, kv: Tensor, ids: Tensor, topk_length: Optional[Tensor], sm_scale: float) -> Tensor:
    """max over the valid indices of sm_scale * q.k, float32 [s_q, h_q] (-inf without one), with torch
    ops over row blocks of gathered keys."""
    s_q, h_q, d_qk = q.shape
    s_kv, topk = kv.shape[0], ids.shape[1]
    out = torch.full((s_q, h_q), float("-inf"), dtype=torch.float32, device=q.device)
    if s_kv == 0 or topk == 0:
        return out
    rows = max(1, _MAX_LOGITS_BLOCK_BYTES // max(1, topk * d_qk * 4))
    pos = torch.arange(topk, device=q.device)
    for r0 in range(0, s_q, rows):
        r1 = min(s_q, r0 + rows)
        idx = ids[r0:r1].long()
        valid = (idx >= 0) & (idx < s_kv)
        if topk_length is not None:
            valid &= pos.unsqueeze(0) < topk_length[r0:r1].long().unsqueeze(1)
        keys = kv[torch.where(valid, idx, torch.zeros_like(idx))].float()        # [r, topk, d_qk]
        s = torch.einsum("rhd,rtd->rht", q[r0:r1].float(), keys) * sm_scale     # [r, h_q, topk]
        s.masked_fill_(~valid.unsqueeze(1), float("-inf"))
        out[r0:r1] = s.amax(dim=2)
    return out


def flash_mla_sparse_fwd(q: Tensor, kv: Tensor, indices: Tensor, sm_scale: float, d_v: int = _DV,
                         attn_sink: Optional[Tensor] = None, topk_length: Optional[Tensor] = None, *,
                         return_max_logits: bool = False) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """Sparse MLA prefill over a bf16 latent: (out bf16 [s_q, h_q, d_v], max_logits float32
    [s_q, h_q] or None (see the module docstring), lse float32 [s_q, h_q])."""
    fn = "flash_mla_sparse_fwd"
    q = _tensor(fn, "q", q, (torch.bfloat16,), 3)
    kv = _tensor(fn, "kv", kv, (torch.bfloat16,), 3)
    indices = _tensor(fn, "indices", indices, (torch.int32,), 3)
    _check.tensors(f"flash_mla.{fn}", attn_sink=attn_sink, topk_length=topk_length)
    if kv.shape[1] != 1 or indices.shape[1] != 1:
        _fail(fn, f"kv [s_kv, h_kv, d_qk] and indices [s_q, h_kv, topk] expected h_kv 1 (MQA), got kv "
                  f"{list(kv.shape)} and indices {list(indices.shape)}")
    if int(d_v) != _DV:
        _fail(fn, f"d_v expected {_DV}, got {d_v}")
    kv2, ids = kv.select(1, 0), indices.select(1, 0)
    out, lse = _ops.sparse_mla_prefill(q, kv2, ids, float(sm_scale), topk_length=topk_length, attn_sink=attn_sink,
                                       d_v=int(d_v))
    max_logits = _max_logits(q, kv2, ids, topk_length, float(sm_scale)) if return_max_logits else None
    return out, max_logits, _flashmla_lse(lse)


__all__ = ["FlashMLASchedMeta", "flash_mla_sparse_fwd", "flash_mla_with_kvcache", "get_mla_metadata"]
