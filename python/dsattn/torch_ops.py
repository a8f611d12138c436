"""dsattn's ops as PyTorch custom operators: `import dsattn.torch_ops` registers torch.ops.dsattn.*.

What the registration adds over calling dsattn.<op> with torch tensors:
  * torch.compile traces through the ops (fake-tensor implementations give every output's shape
    and dtype), so a model that calls them compiles without graph breaks (fullgraph=True works);
  * the ops run on torch's current stream of the inputs' device, that device made current for the
    call (dsattn.<op> defaults to the legacy default stream and refuses tensors of a device that is
    not current), so they follow torch.cuda.stream() contexts and torch.cuda.graph() capture
    without a stream argument;
  * scratch comes from torch's caching allocator on that stream (inside a capture: the graph's
    private pool), so no workspace has to be sized and passed in.

Ops (every tensor on one device; the backend follows it, as backend="auto" does):
  paged_mqa_logits(...) -> logits            paged_mqa_topk(...) -> indices
  paged_mqa_logits_out(..., logits, ...)     mqa_logits_out(..., logits, ...)   (write logits)
  paged_mqa_topk_out(..., k, indices, values, slot_ids, ...)   (writes the outputs not None)
  topk(logits, k, ...) -> indices            topk_out(logits, k, indices, values, slot_ids, ...)
  mqa_logits(...) -> logits                  schedule_metadata(context_lens, ...) -> metadata
  mqa_topk(..., topk, width, ...) -> indices (prefill logits + top-k in row chunks)
  sparse_mla_decode(...) -> (out, lse)       sparse_mla_prefill(...) -> (out, lse)
  sparse_mla_decode_out(..., out, lse, ...)  sparse_mla_prefill_out(..., out, lse, ...)  (write out, lse)
  write_indexer_cache(k, slot_mapping, cache_pages, ...)   (writes cache_pages in place)
  write_latent_cache(kv, slot_mapping, cache_pages, ...)   (writes cache_pages in place)
The arguments are those of the dsattn.<op> functions (see their docstrings and
include/dsattn/ops.h) with the cache structs spelled out: an indexer cache is
cache_pages, states_per_page, head_dim, cache_format ("fp8" / "mxfp4"), page_stride_bytes; a latent
cache is cache_pages, tokens_per_page, cache_format ("v4_fp8" / "v32_fp8"), page_stride_bytes.
Output dtypes are torch dtypes (logits_dtype=torch.float32 or torch.bfloat16).

Shapes that depend on data cannot be traced: mqa_logits with compressed=True needs width >= 0
here (dsattn.mqa_logits would read max(ke - ks) back to the host). Requires torch >= 2.4
(torch.library.custom_op)."""

from __future__ import annotations

import contextlib
from typing import Optional

import torch
from torch import Tensor

from . import _api, _arrays

_NS = "dsattn"
_DV = 512
_LOGIT_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"dsattn.torch_ops needs torch >= 2.4 (torch.library.custom_op); this is torch "
                      f"{torch.__version__}")


# ------------------------------------------------------------------ plumbing
def _exec_kw(x: Tensor) -> tuple:
    """(context, stream handle) for a call on x's device: CUDA -> torch's current stream there, and
    that device made current if it is not (the kernels launch on the current device); host ->
    nothing."""
    if x.is_cuda:
        stream = _arrays.current_stream_handle(x.device)
        if x.device.index != torch.cuda.current_device():
            return torch.cuda.device(x.device), stream
        return contextlib.nullcontext(), stream
    return contextlib.nullcontext(), None


def _shape(op: str, arg: str, x: Tensor, ndims: tuple) -> tuple:
    """x's shape when x.dim() is one of `ndims`; else ValueError naming the op and argument, worded
    as the library's own check (the fake implementations need the dimensions it checks later)."""
    if x.dim() not in ndims:
        want = " or ".join(str(n) for n in ndims)
        raise ValueError(f"{op}: {arg} rank expected {want}, got {x.dim()} (shape {list(x.shape)})")
    return tuple(x.shape)


def _logits_dtype(op: str, dtype: torch.dtype) -> str:
    if dtype not in _LOGIT_DTYPES:
        raise ValueError(f"{op}: logits_dtype expected torch.float32 or torch.bfloat16, got {dtype}")
    return _LOGIT_DTYPES[dtype]


def _rows(op: str, q: Tensor, row_request: Optional[Tensor]) -> int:
    if row_request is not None:
        return _shape(op, "q", q, (3,))[0]           # varlen: [R, H, D]
    s = _shape(op, "q", q, (4,))                      # [B, N, H, D]
    return s[0] * s[1]


def _width(block_table: Tensor, states_per_page: int, max_context: int) -> int:
    if max_context >= 0:
        return max_context
    return _shape("paged_mqa_logits", "block_table", block_table, (2,))[1] * states_per_page


def _indexer_cache(cache_pages, states_per_page, head_dim, cache_format, page_stride_bytes):
    return _api.IndexerCache(cache_pages, int(states_per_page), int(head_dim), cache_format, int(page_stride_bytes))


def _latent_cache(cache_pages, tokens_per_page, cache_format, page_stride_bytes):
    return _api.LatentCache(cache_pages, int(tokens_per_page), cache_format, int(page_stride_bytes))


def _op(name: str, mutates_args=()):
    return torch.library.custom_op(f"{_NS}::{name}", mutates_args=mutates_args)


# ------------------------------------------------------------------ paged indexer
def _paged_logits(q, weights, cache_pages, block_table, context_lens, states_per_page, head_dim, cache_format,
                  page_stride_bytes, q_scales, row_request, schedule, clean, **out):
    """The one call path of paged_mqa_logits and paged_mqa_logits_out: dsattn.paged_mqa_logits on the
    inputs' device and torch's current stream there; `out` is logits= or max_context= and
    logits_dtype=."""
    ctx, stream = _exec_kw(q)
    with ctx:
        return _api.paged_mqa_logits(
            q, weights, _indexer_cache(cache_pages, states_per_page, head_dim, cache_format, page_stride_bytes),
            block_table, context_lens, q_scales=q_scales, row_request=row_request, schedule=schedule, clean=clean,
            stream=stream, **out)


@_op("paged_mqa_logits")
def paged_mqa_logits(q: Tensor, weights: Tensor, cache_pages: Tensor, block_table: Tensor, context_lens: Tensor,
                     states_per_page: int, head_dim: int = 128, cache_format: str = "fp8", page_stride_bytes: int = 0,
                     q_scales: Optional[Tensor] = None, row_request: Optional[Tensor] = None,
                     schedule: Optional[Tensor] = None, max_context: int = -1,
                     logits_dtype: torch.dtype = torch.float32, clean: bool = False) -> Tensor:
    """dsattn.paged_mqa_logits: logits [R, max_context] (max_context < 0: block_table.shape[1] *
    states_per_page)."""
    return _paged_logits(q, weights, cache_pages, block_table, context_lens, states_per_page, head_dim, cache_format,
                         page_stride_bytes, q_scales, row_request, schedule, clean,
                         max_context=_width(block_table, states_per_page, max_context),
                         logits_dtype=_logits_dtype("paged_mqa_logits", logits_dtype))


@paged_mqa_logits.register_fake
def _(q, weights, cache_pages, block_table, context_lens, states_per_page, head_dim=128, cache_format="fp8",
      page_stride_bytes=0, q_scales=None, row_request=None, schedule=None, max_context=-1,
      logits_dtype=torch.float32, clean=False):
    op = "paged_mqa_logits"
    _logits_dtype(op, logits_dtype)
    return q.new_empty((_rows(op, q, row_request), _width(block_table, states_per_page, max_context)),
                       dtype=logits_dtype)


@_op("paged_mqa_logits_out", mutates_args=("logits",))
def paged_mqa_logits_out(q: Tensor, weights: Tensor, cache_pages: Tensor, block_table: Tensor, context_lens: Tensor,
                         states_per_page: int, logits: Tensor, head_dim: int = 128, cache_format: str = "fp8",
                         page_stride_bytes: int = 0, q_scales: Optional[Tensor] = None,
                         row_request: Optional[Tensor] = None, schedule: Optional[Tensor] = None,
                         clean: bool = False) -> None:
    """dsattn.paged_mqa_logits into the caller's logits (float32 or bfloat16 [R, W], any row stride
    with a contiguous last dimension, e.g. a view of a row-padded buffer); W is max_context."""
    _paged_logits(q, weights, cache_pages, block_table, context_lens, states_per_page, head_dim, cache_format,
                  page_stride_bytes, q_scales, row_request, schedule, clean, logits=logits)


def _fused_topk(q, weights, cache_pages, block_table, context_lens, states_per_page, k, head_dim, cache_format,
                page_stride_bytes, q_scales, row_request, schedule, sorted, logits_route, resident_route,
                indices=None, values=None, slot_ids=None):
    """The one call path of paged_mqa_topk and paged_mqa_topk_out: dsattn.paged_mqa_topk on the
    inputs' device and torch's current stream there; outputs not given are allocated."""
    ctx, stream = _exec_kw(q)
    with ctx:
        return _api.paged_mqa_topk(
            q, weights, _indexer_cache(cache_pages, states_per_page, head_dim, cache_format, page_stride_bytes),
            block_table, context_lens, k, q_scales=q_scales, row_request=row_request, schedule=schedule,
            indices=indices, values=values, slot_ids=slot_ids, sorted=sorted, logits_route=logits_route,
            resident_route=resident_route, stream=stream)


@_op("paged_mqa_topk_out", mutates_args=("indices", "values", "slot_ids"))
def paged_mqa_topk_out(q: Tensor, weights: Tensor, cache_pages: Tensor, block_table: Tensor, context_lens: Tensor,
                       states_per_page: int, k: int, indices: Tensor, values: Optional[Tensor],
                       slot_ids: Optional[Tensor], head_dim: int = 128, cache_format: str = "fp8",
                       page_stride_bytes: int = 0, q_scales: Optional[Tensor] = None,
                       row_request: Optional[Tensor] = None, schedule: Optional[Tensor] = None,
                       sorted: bool = False, logits_route: bool = False, resident_route: bool = True) -> None:
    """dsattn.paged_mqa_topk into the given outputs: indices int32 [R, k], and values float32 [R, k]
    and slot_ids int32 [R, k] unless None. (values and slot_ids have no defaults: torch before 2.15
    fails on a mutable argument left to its default when the dispatcher drops trailing defaults.)"""
    _fused_topk(q, weights, cache_pages, block_table, context_lens, states_per_page, k, head_dim, cache_format,
                page_stride_bytes, q_scales, row_request, schedule, sorted, logits_route, resident_route,
                indices=indices, values=values, slot_ids=slot_ids)


@_op("paged_mqa_topk")
def paged_mqa_topk(q: Tensor, weights: Tensor, cache_pages: Tensor, block_table: Tensor, context_lens: Tensor,
                   states_per_page: int, k: int, head_dim: int = 128, cache_format: str = "fp8",
                   page_stride_bytes: int = 0, q_scales: Optional[Tensor] = None, row_request: Optional[Tensor] = None,
                   schedule: Optional[Tensor] = None, sorted: bool = False, logits_route: bool = False,
                   resident_route: bool = True) -> Tensor:
    """dsattn.paged_mqa_topk: indices int32 [R, k] (-1 padding). For values or slot ids use
    paged_mqa_topk_out."""
    return _fused_topk(q, weights, cache_pages, block_table, context_lens, states_per_page, k, head_dim,
                       cache_format, page_stride_bytes, q_scales, row_request, schedule, sorted, logits_route,
                       resident_route).indices


@paged_mqa_topk.register_fake
def _(q, weights, cache_pages, block_table, context_lens, states_per_page, k, head_dim=128, cache_format="fp8",
      page_stride_bytes=0, q_scales=None, row_request=None, schedule=None, sorted=False, logits_route=False,
      resident_route=True):
    return q.new_empty((_rows("paged_mqa_topk", q, row_request), k), dtype=torch.int32)


@_op("schedule_metadata")
def schedule_metadata(context_lens: Tensor, states_per_page: int, next_n: int = 1,
                      row_request: Optional[Tensor] = None, num_sms: int = 0) -> Tensor:
    """dsattn.schedule_metadata: int32 [schedule_metadata_size(num_sms)] (num_sms 0: this GPU's)."""
    ctx, stream = _exec_kw(context_lens)
    with ctx:
        return _api.schedule_metadata(context_lens, states_per_page=states_per_page, next_n=next_n,
                                      row_request=row_request, num_sms=num_sms, stream=stream)


@schedule_metadata.register_fake
def _(context_lens, states_per_page, next_n=1, row_request=None, num_sms=0):
    return context_lens.new_empty((_api.schedule_metadata_size(num_sms),), dtype=torch.int32)


# ------------------------------------------------------------------ prefill logits
def _prefill_logits(q, weights, k, k_scales, ks, ke, format, q_scales, compressed, clean, **out):
    """The one call path of mqa_logits and mqa_logits_out: dsattn.mqa_logits on the inputs' device
    and torch's current stream there; `out` is logits= or width= and logits_dtype=."""
    ctx, stream = _exec_kw(q)
    with ctx:
        return _api.mqa_logits(q, weights, k, k_scales, ks, ke, format=format, q_scales=q_scales,
                               compressed=compressed, clean=clean, stream=stream, **out)


@_op("mqa_logits")
def mqa_logits(q: Tensor, weights: Tensor, k: Tensor, k_scales: Tensor, ks: Tensor, ke: Tensor,
               format: str = "fp8", q_scales: Optional[Tensor] = None, compressed: bool = False, width: int = -1,
               clean: bool = False, logits_dtype: torch.dtype = torch.float32) -> Tensor:
    """dsattn.mqa_logits: logits [M, Nk], or [M, width] when compressed (width >= 0 required)."""
    return _prefill_logits(q, weights, k, k_scales, ks, ke, format, q_scales, compressed, clean,
                           width=_mqa_width(q, k, compressed, width),
                           logits_dtype=_logits_dtype("mqa_logits", logits_dtype))


def _mqa_width(q, k, compressed, width):
    op = "mqa_logits"
    if not compressed:
        return _shape(op, "k", k, (2,))[0]
    if width < 0:
        raise ValueError(f"{op}: width expected >= 0 when compressed (the torch op cannot read max(ke - ks) back "
                         f"to the host), got {width}")
    return width


@mqa_logits.register_fake
def _(q, weights, k, k_scales, ks, ke, format="fp8", q_scales=None, compressed=False, width=-1, clean=False,
      logits_dtype=torch.float32):
    _logits_dtype("mqa_logits", logits_dtype)
    m = _shape("mqa_logits", "q", q, (3,))[0]
    return q.new_empty((m, _mqa_width(q, k, compressed, width)), dtype=logits_dtype)


@_op("mqa_logits_out", mutates_args=("logits",))
def mqa_logits_out(q: Tensor, weights: Tensor, k: Tensor, k_scales: Tensor, ks: Tensor, ke: Tensor, logits: Tensor,
                   format: str = "fp8", q_scales: Optional[Tensor] = None, compressed: bool = False,
                   clean: bool = False) -> None:
    """dsattn.mqa_logits into the caller's logits (float32 or bfloat16 [M, Nk], or [M, W] when
    compressed; any row stride with a contiguous last dimension)."""
    _prefill_logits(q, weights, k, k_scales, ks, ke, format, q_scales, compressed, clean, logits=logits)


@_op("mqa_topk")
def mqa_topk(q: Tensor, weights: Tensor, k: Tensor, k_scales: Tensor, ks: Tensor, ke: Tensor, topk: int, width: int,
             format: str = "fp8", q_scales: Optional[Tensor] = None, chunk_bytes: int = 1 << 28,
             sorted: bool = False) -> Tensor:
    """dsattn.mqa_topk: indices int32 [M, topk] relative to ks, the logits made and selected in row
    chunks of at most chunk_bytes. width: the longest window, max(ke - ks) (the torch op cannot
    read it back to the host)."""
    if width < 0:
        raise ValueError(f"mqa_topk: width expected >= 0 (the longest window, max(ke - ks)), got {width}")
    ctx, stream = _exec_kw(q)
    with ctx:
        return _api.mqa_topk(q, weights, k, k_scales, ks, ke, topk, format=format, q_scales=q_scales, width=width,
                             chunk_bytes=chunk_bytes, sorted=sorted, stream=stream).indices


@mqa_topk.register_fake
def _(q, weights, k, k_scales, ks, ke, topk, width, format="fp8", q_scales=None, chunk_bytes=1 << 28, sorted=False):
    return q.new_empty((_shape("mqa_topk", "q", q, (3,))[0], topk), dtype=torch.int32)


# ------------------------------------------------------------------ top-k
@_op("topk_out", mutates_args=("indices", "values", "slot_ids"))
def topk_out(logits: Tensor, k: int, indices: Tensor, values: Optional[Tensor], slot_ids: Optional[Tensor],
             starts: Optional[Tensor] = None, ends: Optional[Tensor] = None, sorted: bool = False,
             block_table: Optional[Tensor] = None, row_request: Optional[Tensor] = None, next_n: int = 1,
             states_per_page: int = 0) -> None:
    """dsattn.topk into the given outputs: indices, and values / slot_ids unless None (slot_ids
    needs block_table; no defaults, as in paged_mqa_topk_out)."""
    ctx, stream = _exec_kw(logits)
    with ctx:
        _api.topk(logits, k, starts=starts, ends=ends, indices=indices, values=values, sorted=sorted,
                  block_table=block_table, row_request=row_request, next_n=next_n, states_per_page=states_per_page,
                  slot_ids=slot_ids, stream=stream)


@_op("topk")
def topk(logits: Tensor, k: int, starts: Optional[Tensor] = None, ends: Optional[Tensor] = None,
         sorted: bool = False) -> Tensor:
    """dsattn.topk: indices int32 [R, k] relative to each row's start, -1 padding. For values or
    slot ids use topk_out."""
    ctx, stream = _exec_kw(logits)
    with ctx:
        return _api.topk(logits, k, starts=starts, ends=ends, sorted=sorted, stream=stream).indices


@topk.register_fake
def _(logits, k, starts=None, ends=None, sorted=False):
    return logits.new_empty((_shape("topk", "logits", logits, (2,))[0], k), dtype=torch.int32)


# ------------------------------------------------------------------ sparse MLA
def _mla_decode(q, cache_pages, indices, sm_scale, tokens_per_page, cache_format, page_stride_bytes, topk_length,
                attn_sink, extra_pages, extra_indices, extra_topk_length, extra_tokens_per_page, extra_format,
                extra_page_stride_bytes, out=None, lse=None):
    ctx, stream = _exec_kw(q)
    extra = (None if extra_pages is None else
             _latent_cache(extra_pages, extra_tokens_per_page, extra_format, extra_page_stride_bytes))
    with ctx:
        return _api.sparse_mla_decode(
            q, _latent_cache(cache_pages, tokens_per_page, cache_format, page_stride_bytes), indices,
            sm_scale=sm_scale, topk_length=topk_length, extra_cache=extra, extra_indices=extra_indices,
            extra_topk_length=extra_topk_length, attn_sink=attn_sink, out=out, lse=lse, stream=stream)


@_op("sparse_mla_decode")
def sparse_mla_decode(q: Tensor, cache_pages: Tensor, indices: Tensor, sm_scale: float, tokens_per_page: int,
                      cache_format: str = "v4_fp8", page_stride_bytes: int = 0,
                      topk_length: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None,
                      extra_pages: Optional[Tensor] = None, extra_indices: Optional[Tensor] = None,
                      extra_topk_length: Optional[Tensor] = None, extra_tokens_per_page: int = 0,
                      extra_format: str = "v4_fp8", extra_page_stride_bytes: int = 0) -> tuple[Tensor, Tensor]:
    """dsattn.sparse_mla_decode: (out bf16 [B, Sq, Hq, 512], lse float32 [B, Sq, Hq]). The extra
    (sliding-window) cache is extra_pages with its own page size, format and stride."""
    out, lse = _mla_decode(q, cache_pages, indices, sm_scale, tokens_per_page, cache_format, page_stride_bytes,
                           topk_length, attn_sink, extra_pages, extra_indices, extra_topk_length,
                           extra_tokens_per_page, extra_format, extra_page_stride_bytes)
    return out, lse


@sparse_mla_decode.register_fake
def _(q, cache_pages, indices, sm_scale, tokens_per_page, cache_format="v4_fp8", page_stride_bytes=0,
      topk_length=None, attn_sink=None, extra_pages=None, extra_indices=None, extra_topk_length=None,
      extra_tokens_per_page=0, extra_format="v4_fp8", extra_page_stride_bytes=0):
    b, s, h, _ = _shape("sparse_mla_decode", "q", q, (4,))
    return q.new_empty((b, s, h, _DV), dtype=torch.bfloat16), q.new_empty((b, s, h), dtype=torch.float32)


@_op("sparse_mla_decode_out", mutates_args=("out", "lse"))
def sparse_mla_decode_out(q: Tensor, cache_pages: Tensor, indices: Tensor, sm_scale: float, tokens_per_page: int,
                          out: Tensor, lse: Tensor, cache_format: str = "v4_fp8", page_stride_bytes: int = 0,
                          topk_length: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None,
                          extra_pages: Optional[Tensor] = None, extra_indices: Optional[Tensor] = None,
                          extra_topk_length: Optional[Tensor] = None, extra_tokens_per_page: int = 0,
                          extra_format: str = "v4_fp8", extra_page_stride_bytes: int = 0) -> None:
    """sparse_mla_decode into the caller's out (bf16 [B, Sq, Hq, 512] with a contiguous last
    dimension, e.g. a view into an engine's output buffer) and lse (float32 [B, Sq, Hq])."""
    _mla_decode(q, cache_pages, indices, sm_scale, tokens_per_page, cache_format, page_stride_bytes, topk_length,
                attn_sink, extra_pages, extra_indices, extra_topk_length, extra_tokens_per_page, extra_format,
                extra_page_stride_bytes, out=out, lse=lse)


def _mla_prefill(q, kv, indices, sm_scale, topk_length, attn_sink, d_v, out=None, lse=None):
    ctx, stream = _exec_kw(q)
    with ctx:
        return _api.sparse_mla_prefill(q, kv, indices, sm_scale=sm_scale, topk_length=topk_length,
                                       attn_sink=attn_sink, d_v=d_v, out=out, lse=lse, stream=stream)


@_op("sparse_mla_prefill")
def sparse_mla_prefill(q: Tensor, kv: Tensor, indices: Tensor, sm_scale: float,
                       topk_length: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None,
                       d_v: int = _DV) -> tuple[Tensor, Tensor]:
    """dsattn.sparse_mla_prefill: (out bf16 [M, Hq, d_v], lse float32 [M, Hq])."""
    out, lse = _mla_prefill(q, kv, indices, sm_scale, topk_length, attn_sink, d_v)
    return out, lse


@sparse_mla_prefill.register_fake
def _(q, kv, indices, sm_scale, topk_length=None, attn_sink=None, d_v=_DV):
    m, h, _ = _shape("sparse_mla_prefill", "q", q, (3,))
    return q.new_empty((m, h, d_v), dtype=torch.bfloat16), q.new_empty((m, h), dtype=torch.float32)


@_op("sparse_mla_prefill_out", mutates_args=("out", "lse"))
def sparse_mla_prefill_out(q: Tensor, kv: Tensor, indices: Tensor, sm_scale: float, out: Tensor, lse: Tensor,
                           topk_length: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None) -> None:
    """sparse_mla_prefill into the caller's out (bf16 [M, Hq, d_v], d_v from its shape) and lse
    (float32 [M, Hq])."""
    _mla_prefill(q, kv, indices, sm_scale, topk_length, attn_sink, _shape("sparse_mla_prefill", "out", out, (3,))[2],
                 out=out, lse=lse)


# ------------------------------------------------------------------ cache writers
@_op("write_indexer_cache", mutates_args=("cache_pages",))
def write_indexer_cache(k: Tensor, slot_mapping: Tensor, cache_pages: Tensor, states_per_page: int,
                        head_dim: int = 128, cache_format: str = "fp8", page_stride_bytes: int = 0) -> None:
    """dsattn.write_indexer_cache: quantizes k [T, D] into cache_pages at slot_mapping (-1 skips)."""
    ctx, stream = _exec_kw(k)
    with ctx:
        _api.write_indexer_cache(k, slot_mapping,
                                 _indexer_cache(cache_pages, states_per_page, head_dim, cache_format,
                                                page_stride_bytes), stream=stream)


@_op("write_latent_cache", mutates_args=("cache_pages",))
def write_latent_cache(kv: Tensor, slot_mapping: Tensor, cache_pages: Tensor, tokens_per_page: int,
                       cache_format: str = "v4_fp8", page_stride_bytes: int = 0) -> None:
    """dsattn.write_latent_cache: quantizes kv [T, d_qk] into cache_pages at slot_mapping."""
    ctx, stream = _exec_kw(kv)
    with ctx:
        _api.write_latent_cache(kv, slot_mapping, _latent_cache(cache_pages, tokens_per_page, cache_format,
                                                                page_stride_bytes), stream=stream)


OPS = ("paged_mqa_logits", "paged_mqa_logits_out", "paged_mqa_topk", "paged_mqa_topk_out", "schedule_metadata",
       "mqa_logits", "mqa_logits_out", "mqa_topk", "topk", "topk_out", "sparse_mla_decode", "sparse_mla_decode_out",
       "sparse_mla_prefill", "sparse_mla_prefill_out", "write_indexer_cache", "write_latent_cache")
