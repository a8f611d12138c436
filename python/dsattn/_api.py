"""The dsattn ops with keyword arguments mirroring the C++ params structs (include/dsattn/ops.h).

Every op takes the execution keywords
    backend="auto" | "cpu" | "cuda", stream=None, workspace=None, num_threads=0, smem_budget_bytes=0
(see `dsattn` module docs) and returns its outputs; outputs passed in are written in place and
returned, outputs not passed in are allocated (see `_arrays.empty`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from . import _arrays
from . import _dsattn as _core

INDEXER_FORMATS = {"fp8": 0, "mxfp4": 1}
LATENT_FORMATS = {"v4_fp8": 0, "v32_fp8": 1}


def _fmt(op: str, table: dict, name: str, what: str) -> int:
    if name not in table:
        raise ValueError(f"{op}: {what} expected one of {', '.join(table)}, got {name!r}")
    return table[name]


@dataclass
class IndexerCache:
    """Indexer key cache (SPEC 2.1 FP8 / 2.2 MXFP4), mirrors dsattn::IndexerCache.

    pages: uint8 array whose first dimension is the page: [num_pages, page_bytes] or DeepGEMM's
    [num_pages, S, 1, D + 4]; page_stride_bytes = 0 takes the first-dimension stride."""

    pages: Any
    states_per_page: int
    head_dim: int = 128
    format: str = "fp8"
    page_stride_bytes: int = 0

    def _args(self, op: str) -> dict:
        _arrays.check_array(op, "cache.pages", self.pages)
        return dict(cache_pages=_arrays.prep(self.pages),
                    cache_format=_fmt(op, INDEXER_FORMATS, self.format, "cache.format"),
                    states_per_page=int(self.states_per_page), head_dim=int(self.head_dim),
                    page_stride_bytes=int(self.page_stride_bytes))


@dataclass
class LatentCache:
    """Sparse-MLA latent cache (SPEC 2.3), mirrors dsattn::LatentCache.

    pages: uint8 array whose first dimension is the page ([num_pages, page_bytes], or e.g.
    [num_pages, P, 656] for V3.2); page_stride_bytes = 0 takes the first-dimension stride."""

    pages: Any
    tokens_per_page: int
    format: str = "v4_fp8"
    page_stride_bytes: int = 0

    def _args(self, op: str, prefix: str = "cache") -> tuple:
        _arrays.check_array(op, f"{prefix}.pages", self.pages)
        return (_arrays.prep(self.pages), _fmt(op, LATENT_FORMATS, self.format, f"{prefix}.format"),
                int(self.tokens_per_page), int(self.page_stride_bytes))


class TopkResult(NamedTuple):
    indices: Any                 # int32 [R, k]
    values: Optional[Any]        # float32 [R, k] when asked for, else None
    slot_ids: Optional[Any]      # int32 [R, k] when asked for, else None


# ------------------------------------------------------------------ plumbing
def _exec(op, backend, stream, workspace, num_threads, smem_budget_bytes) -> dict:
    if backend not in _arrays.BACKENDS:
        raise ValueError(f"{op}: backend expected one of auto, cpu, cuda, got {backend!r}")
    if workspace is not None:
        _arrays.check_output(op, "workspace", workspace)
    return dict(backend=_arrays.BACKENDS[backend], stream=_arrays.stream_handle(stream),
                workspace=_arrays.prep(workspace), num_threads=int(num_threads),
                smem_budget_bytes=int(smem_budget_bytes))


def _call(fn, args: dict, ex: dict, query: bool):
    kw = {k: _arrays.for_call(v) for k, v in args.items()}
    if ex.get("workspace") is not None:
        ex = dict(ex, workspace=_arrays.for_call(ex["workspace"]))
    try:
        return fn(**kw, query=query, **ex)
    except TypeError as e:
        # nanobind could not take an argument as an array: name the op (the usual cause is a
        # read-only array passed as an output, or an object without __dlpack__).
        raise TypeError(f"{fn.__name__}: {e}") from None


def _workspace_bytes(fn, args: dict, ex: dict) -> int:
    return int(_call(fn, args, dict(ex, workspace=None), True))


def _run(fn, args: dict, ex: dict, like) -> None:
    """Runs `fn`; a workspace the op needs but the caller did not pass is allocated on the inputs'
    device (torch / cupy on CUDA, numpy on the host) by the extension's call to `alloc`, once it
    knows the size (one call: the tensors are converted and the op planned once). Under
    torch.cuda.graph capture a torch allocation comes from the graph's private pool; with cupy or
    a capture torch does not manage, pass the workspace."""
    if ex["workspace"] is None:
        stream = ex["stream"]
        ex = dict(ex, alloc=lambda n: _arrays.for_call(_arrays.scratch(n, like, stream)))
    elif like is not None and _arrays.device_of(ex["workspace"]) != _arrays.device_of(like):
        # The extension sees only the workspace's address and size: kernels would write host memory
        # through a device pointer or the reverse (a crash, not an error), so check here.
        raise ValueError(f"{fn.__name__}: workspace device expected {_arrays.device_str(like)}, got "
                         f"{_arrays.device_str(ex['workspace'])}")
    _call(fn, args, ex, False)


def _out(op, arg, given, shape, dtype, like, dummy: bool = False):
    """The caller's output `arg` (it must be writable), or a new one allocated like `like`. (dummy:
    for *_workspace_size queries, which validate the full call and so need every output; pass the
    outputs you will use to avoid the temporary allocation.)"""
    if given is not None:
        _arrays.check_output(op, arg, given)
        return _arrays.prep(given)
    return _arrays.empty(tuple(max(int(s), 0) for s in shape), dtype, like)


def _dim(x, i: int) -> int:
    """x.shape[i], or 0 when x has no such dimension (the C++ checks then report the real problem)."""
    shape = getattr(x, "shape", ())
    return int(shape[i]) if -len(shape) <= i < len(shape) else 0


def _rows(q, varlen: bool) -> int:
    return _dim(q, 0) if varlen else _dim(q, 0) * _dim(q, 1)


_LOGIT_DTYPES = ("float32", "bfloat16")


def _logits_dtype(op, logits_dtype):
    if logits_dtype not in _LOGIT_DTYPES:
        raise ValueError(f"{op}: logits_dtype expected float32 or bfloat16, got {logits_dtype!r}")
    return logits_dtype


# ------------------------------------------------------------------ paged indexer
def _paged_common(op, q, weights, cache, block_table, context_lens, q_scales, row_request, schedule):
    if not isinstance(cache, IndexerCache):
        raise TypeError(f"{op}: cache expected dsattn.IndexerCache, got {type(cache).__name__}")
    for name, x, req in (("q", q, True), ("weights", weights, True), ("block_table", block_table, True),
                         ("context_lens", context_lens, True), ("q_scales", q_scales, False),
                         ("row_request", row_request, False), ("schedule", schedule, False)):
        _arrays.check_array(op, name, x, req)
    args = dict(q=_arrays.prep(q), q_scales=_arrays.prep(q_scales), weights=_arrays.prep(weights),
                block_table=_arrays.prep(block_table), context_lens=_arrays.prep(context_lens),
                row_request=_arrays.prep(row_request), schedule=_arrays.prep(schedule))
    args.update(cache._args(op))
    return args


def _paged_mqa_logits(q, weights, cache, block_table, context_lens, q_scales, row_request, schedule,
                      logits, max_context, logits_dtype, clean, dummy):
    op = "paged_mqa_logits"
    args = _paged_common(op, q, weights, cache, block_table, context_lens, q_scales, row_request, schedule)
    if max_context is None:
        max_context = _dim(block_table, 1) * int(cache.states_per_page)
    rows = _rows(q, row_request is not None)
    args["logits"] = _out(op, "logits", logits, (rows, max_context), _logits_dtype(op, logits_dtype), q, dummy)
    args["clean"] = bool(clean)
    return args


def paged_mqa_logits(q, weights, cache: IndexerCache, block_table, context_lens, *, q_scales=None,
                     row_request=None, schedule=None, logits=None, max_context=None,
                     logits_dtype="float32", clean=False, backend="auto", stream=None, workspace=None,
                     num_threads=0, smem_budget_bytes=0):
    """Indexer logits over a paged cache (SPEC 3.1). Returns logits [R, max_context] (R = B*N, or
    the varlen row count when row_request is given). max_context defaults to
    block_table.shape[1] * cache.states_per_page; logits_dtype "float32" or "bfloat16"."""
    args = _paged_mqa_logits(q, weights, cache, block_table, context_lens, q_scales, row_request, schedule,
                             logits, max_context, logits_dtype, clean, False)
    ex = _exec("paged_mqa_logits", backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.paged_mqa_logits, args, ex, q)
    return args["logits"] if logits is None else logits


def paged_mqa_logits_workspace_size(q, weights, cache: IndexerCache, block_table, context_lens, *,
                                    q_scales=None, row_request=None, schedule=None, logits=None,
                                    max_context=None, logits_dtype="float32", clean=False, backend="auto", stream=None,
                                    num_threads=0, smem_budget_bytes=0) -> int:
    """Workspace bytes paged_mqa_logits needs for these arguments (0: none). CUDA: pass the stream
    the call will run on; the plan sizes its grids by the SMs that stream can use."""
    args = _paged_mqa_logits(q, weights, cache, block_table, context_lens, q_scales, row_request, schedule,
                             logits, max_context, logits_dtype, clean, True)
    ex = _exec("paged_mqa_logits", backend, stream, None, num_threads, smem_budget_bytes)
    return _workspace_bytes(_core.paged_mqa_logits, args, ex)


def _paged_mqa_topk(q, weights, cache, block_table, context_lens, k, q_scales, row_request, schedule, indices,
                    values, slot_ids, return_values, return_slot_ids, sorted, logits_route, resident_route, dummy):
    op = "paged_mqa_topk"
    args = _paged_common(op, q, weights, cache, block_table, context_lens, q_scales, row_request, schedule)
    rows = _rows(q, row_request is not None)
    args["k"] = int(k)
    args["indices"] = _out(op, "indices", indices, (rows, k), "int32", q, dummy)
    args["values"] = (_out(op, "values", values, (rows, k), "float32", q, dummy)
                      if values is not None or return_values else None)
    args["slot_ids"] = (_out(op, "slot_ids", slot_ids, (rows, k), "int32", q, dummy)
                        if slot_ids is not None or return_slot_ids else None)
    args["sorted"] = bool(sorted)
    args["logits_route"] = bool(logits_route)
    args["resident_route"] = bool(resident_route)
    return args


def paged_mqa_topk(q, weights, cache: IndexerCache, block_table, context_lens, k: int, *, q_scales=None,
                   row_request=None, schedule=None, indices=None, values=None, slot_ids=None,
                   return_values=False, return_slot_ids=False, sorted=False, logits_route=False,
                   resident_route=True, backend="auto", stream=None, workspace=None, num_threads=0,
                   smem_budget_bytes=0) -> TopkResult:
    """Fused indexer + top-k (SPEC 3.4): never materializes the [R, max_context] logits.
    Returns TopkResult(indices [R, k] int32 state indices, values [R, k] float32 or None,
    slot_ids [R, k] int32 or None). values / slot_ids are produced when passed in or when
    return_values / return_slot_ids is set. On CUDA, where no partition's piece of the context is
    longer than twice its candidate buffer (the streaming route would write at least as many
    bytes), the scores go as dense rows into the same workspace and topk's kernels select: faster,
    same results and memory. logits_route=True takes that route wherever the rows fit the workspace, also where
    streaming would have dropped states, and in column chunks of the block table (each selected
    with the winners carried from the chunks before it) where they do not (see ops.h). On
    sm_80 / sm_86 / sm_89 / sm_120, where streaming runs on a slower scoring kernel, the default
    already takes the dense rows wherever they fit; logits_route=True adds the chunks, worth it
    there where block tables are about as wide as the contexts (1.25-1.43x faster on many long
    requests whose rows do not fit, H100 at those budgets; BENCHMARKS.md, 2026-12-07).
    Rows of at most k states are not scored when the output is unsorted and has no values: their
    result is 0..len-1.
    resident_route=False
    (CUDA, sm_90) keeps the call off the resident route (up to six requests on a block table of
    more than 128K states, or of more than 64K where the logits route does not take the call), a
    cooperative launch of one CTA per SM the stream can use (see cuda_stream_num_sms); same
    results."""
    args = _paged_mqa_topk(q, weights, cache, block_table, context_lens, k, q_scales, row_request, schedule,
                           indices, values, slot_ids, return_values, return_slot_ids, sorted, logits_route,
                           resident_route, False)
    ex = _exec("paged_mqa_topk", backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.paged_mqa_topk, args, ex, q)
    return TopkResult(indices if indices is not None else args["indices"],
                      values if values is not None else args["values"],
                      slot_ids if slot_ids is not None else args["slot_ids"])


def paged_mqa_topk_workspace_size(q, weights, cache: IndexerCache, block_table, context_lens, k: int, *,
                                  q_scales=None, row_request=None, schedule=None, indices=None, values=None,
                                  slot_ids=None, return_values=False, return_slot_ids=False, sorted=False,
                                  logits_route=False, resident_route=True, backend="auto", stream=None, num_threads=0,
                                  smem_budget_bytes=0) -> int:
    """Workspace bytes paged_mqa_topk needs for these arguments (0: none). CUDA: pass the stream
    the call will run on; the plan sizes its grids by the SMs that stream can use."""
    args = _paged_mqa_topk(q, weights, cache, block_table, context_lens, k, q_scales, row_request, schedule,
                           indices, values, slot_ids, return_values, return_slot_ids, sorted, logits_route,
                           resident_route, True)
    ex = _exec("paged_mqa_topk", backend, stream, None, num_threads, smem_budget_bytes)
    return _workspace_bytes(_core.paged_mqa_topk, args, ex)


def paged_mqa_topk_route(q, weights, cache: IndexerCache, block_table, context_lens, k: int, *, q_scales=None,
                         row_request=None, schedule=None, indices=None, values=None, slot_ids=None,
                         return_values=False, return_slot_ids=False, sorted=False, logits_route=False,
                         resident_route=True, backend="auto", stream=None, num_threads=0,
                         smem_budget_bytes=0) -> str:
    """The route paged_mqa_topk takes for these arguments (the same validation as the call):
    "cpu", or on CUDA "resident", "logits", "chunked" or "streaming" ("empty" for zero rows). Every route
    gives the same results; for logs and benchmarks."""
    args = _paged_mqa_topk(q, weights, cache, block_table, context_lens, k, q_scales, row_request, schedule,
                           indices, values, slot_ids, return_values, return_slot_ids, sorted, logits_route,
                           resident_route, True)
    ex = _exec("paged_mqa_topk_route", backend, stream, None, num_threads, smem_budget_bytes)
    return str(_call(_core.paged_mqa_topk_route, args, dict(ex, workspace=None), True))


def schedule_metadata_size(num_sms: int = 0) -> int:
    """int32 elements of the schedule metadata for `num_sms` multiprocessors (0: this GPU's)."""
    n = int(num_sms) if num_sms else _core.cuda_num_sms()
    return int(_core.schedule_metadata_size(n))


def schedule_metadata(context_lens, *, states_per_page: int, next_n: int = 1, row_request=None, num_sms: int = 0,
                      metadata=None, backend="auto", stream=None, workspace=None, num_threads=0,
                      smem_budget_bytes=0):
    """Balanced work split for paged_mqa_logits / paged_mqa_topk (pass the result as schedule=).
    On CUDA a device kernel: no host sync, capturable in a CUDA graph when metadata is passed in.
    Returns metadata, int32 [schedule_metadata_size(num_sms)] (layout private to dsattn)."""
    op = "schedule_metadata"
    _arrays.check_array(op, "context_lens", context_lens)
    _arrays.check_array(op, "row_request", row_request, False)
    n = int(num_sms)
    if metadata is None:
        metadata = _arrays.empty((schedule_metadata_size(n),), "int32", context_lens)
    else:
        _arrays.check_output(op, "metadata", metadata)
    args = dict(context_lens=_arrays.prep(context_lens), row_request=_arrays.prep(row_request),
                next_n=int(next_n), states_per_page=int(states_per_page), num_sms=n,
                metadata=_arrays.prep(metadata))
    ex = _exec(op, backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.schedule_metadata, args, ex, context_lens)
    return metadata


# ------------------------------------------------------------------ prefill logits
def _mqa_logits(q, weights, k, k_scales, ks, ke, format, q_scales, logits, compressed, width, clean,
                logits_dtype, dummy):
    op = "mqa_logits"
    for name, x, req in (("q", q, True), ("weights", weights, True), ("k", k, True), ("k_scales", k_scales, True),
                         ("ks", ks, True), ("ke", ke, True), ("q_scales", q_scales, False)):
        _arrays.check_array(op, name, x, req)
    if logits is None:
        if not compressed:
            width = _dim(k, 0)
        elif width is None:
            width = _max_window(ks, ke)  # numpy's broadcast error would not name the op
    args = dict(format=_fmt(op, INDEXER_FORMATS, format, "format"), q=_arrays.prep(q),
                q_scales=_arrays.prep(q_scales), weights=_arrays.prep(weights), k=_arrays.prep(k),
                k_scales=_arrays.prep(k_scales), ks=_arrays.prep(ks), ke=_arrays.prep(ke),
                logits=_out(op, "logits", logits, (_dim(q, 0), width or 0), _logits_dtype(op, logits_dtype), q,
                            dummy),
                compressed=bool(compressed), clean=bool(clean))
    return args


def mqa_logits(q, weights, k, k_scales, ks, ke, *, format="fp8", q_scales=None, logits=None, compressed=False,
               width=None, clean=False, logits_dtype="float32", backend="auto", stream=None, workspace=None,
               num_threads=0, smem_budget_bytes=0):
    """Prefill (ragged) indexer logits (SPEC 3.2). Returns logits [M, Nk], or [M, width] when
    compressed (column t - ks[m]); width defaults to max(ke - ks), which reads ks / ke back to the
    host (pass width= or logits= on the GPU to avoid the sync)."""
    args = _mqa_logits(q, weights, k, k_scales, ks, ke, format, q_scales, logits, compressed, width, clean,
                       logits_dtype, False)
    ex = _exec("mqa_logits", backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.mqa_logits, args, ex, q)
    return args["logits"] if logits is None else logits


def mqa_logits_workspace_size(q, weights, k, k_scales, ks, ke, *, format="fp8", q_scales=None, logits=None,
                              compressed=False, width=None, clean=False, logits_dtype="float32", backend="auto",
                              stream=None, num_threads=0, smem_budget_bytes=0) -> int:
    """Workspace bytes mqa_logits needs for these arguments (0: none)."""
    args = _mqa_logits(q, weights, k, k_scales, ks, ke, format, q_scales, logits, compressed, width, clean,
                       logits_dtype, True)
    ex = _exec("mqa_logits", backend, stream, None, num_threads, smem_budget_bytes)
    return _workspace_bytes(_core.mqa_logits, args, ex)


def _max_window(ks, ke) -> int:
    """max(ke - ks, 0) read back with the inputs' framework (a host sync on GPU arrays); 0 where ks / ke
    are not two 1-D integer arrays of one length (the C++ checks then say what is wrong with them)."""
    shape_s, shape_e = tuple(getattr(ks, "shape", ())), tuple(getattr(ke, "shape", ()))
    kinds = {getattr(getattr(x, "dtype", None), "kind", "i") for x in (ks, ke)}  # torch: no .kind
    if len(shape_s) == 1 and shape_s == shape_e and shape_s[0] > 0 and kinds <= {"i", "u"}:
        try:
            return max(int((ke - ks).max()), 0)
        except (TypeError, ValueError, RuntimeError):
            return 0
    return 0


def mqa_topk(q, weights, k, k_scales, ks, ke, topk: int, *, format="fp8", q_scales=None, width=None,
             chunk_bytes: int = 1 << 28, indices=None, values=None, return_values=False, sorted=False,
             backend="auto", stream=None, num_threads=0, smem_budget_bytes=0) -> TopkResult:
    """Prefill indexer + top-k with bounded memory: per row m the `topk` best keys of its window
    [ks[m], ke[m]) (SPEC 3.2 then 3.3), indices relative to ks[m] (-1 padding). The logits are
    computed in row chunks of at most chunk_bytes (compressed [rows, width] fp32, reused), each
    chunk selected before the next, so memory is O(chunk_bytes + M x topk), not O(M x Nk).
    width (the longest window, max(ke - ks)) defaults to reading ks / ke back to the host (pass it
    on the GPU to avoid the sync). Returns TopkResult(indices int32 [M, topk], values float32
    [M, topk] or None, None)."""
    op = "mqa_topk"
    for name, x, req in (("q", q, True), ("weights", weights, True), ("ks", ks, True), ("ke", ke, True),
                         ("q_scales", q_scales, False)):
        _arrays.check_array(op, name, x, req)
    if int(topk) <= 0:
        raise ValueError(f"{op}: topk expected > 0, got {topk}")
    if int(chunk_bytes) <= 0:
        raise ValueError(f"{op}: chunk_bytes expected > 0, got {chunk_bytes}")
    w = _max_window(ks, ke) if width is None else int(width)
    if w < 0:
        raise ValueError(f"{op}: width expected >= 0, got {w}")
    M = _dim(q, 0)
    out_i = _out(op, "indices", indices, (M, topk), "int32", q)
    out_v = _out(op, "values", values, (M, topk), "float32", q) if values is not None or return_values else None
    chunk = max(1, min(M, int(chunk_bytes) // (4 * max(w, 1))))
    logits = _arrays.empty((chunk, max(w, 1)), "float32", q)
    lens = (ke - ks).clip(0, None)
    ex = dict(backend=backend, stream=stream, num_threads=num_threads, smem_budget_bytes=smem_budget_bytes)
    for r0 in range(0, M, chunk):
        r1 = min(M, r0 + chunk)
        part = logits[: r1 - r0, :w]
        mqa_logits(q[r0:r1], weights[r0:r1], k, k_scales, ks[r0:r1], ke[r0:r1], format=format,
                   q_scales=None if q_scales is None else q_scales[r0:r1], logits=part, compressed=True, **ex)
        _topk_op(part, topk, ends=lens[r0:r1], indices=out_i[r0:r1],
                values=None if out_v is None else out_v[r0:r1], sorted=sorted, **ex)
    return TopkResult(indices if indices is not None else out_i,
                      None if out_v is None else (values if values is not None else out_v), None)


# ------------------------------------------------------------------ top-k
def _topk(logits, k, starts, ends, indices, values, return_values, sorted, block_table, row_request, next_n,
          states_per_page, slot_ids, dummy):
    op = "topk"
    for name, x, req in (("logits", logits, True), ("starts", starts, False), ("ends", ends, False),
                         ("block_table", block_table, False), ("row_request", row_request, False)):
        _arrays.check_array(op, name, x, req)
    rows = _dim(logits, 0)
    return dict(logits=_arrays.prep(logits), starts=_arrays.prep(starts), ends=_arrays.prep(ends), k=int(k),
                indices=_out(op, "indices", indices, (rows, k), "int32", logits, dummy),
                values=(_out(op, "values", values, (rows, k), "float32", logits, dummy)
                        if values is not None or return_values else None),
                sorted=bool(sorted), block_table=_arrays.prep(block_table), row_request=_arrays.prep(row_request),
                next_n=int(next_n), states_per_page=int(states_per_page),
                slot_ids=(_out(op, "slot_ids", slot_ids, (rows, k), "int32", logits, dummy)
                          if slot_ids is not None or block_table is not None else None))


def topk(logits, k: int, *, starts=None, ends=None, indices=None, values=None, return_values=False, sorted=False,
         block_table=None, row_request=None, next_n: int = 1, states_per_page: int = 0, slot_ids=None,
         backend="auto", stream=None, workspace=None, num_threads=0, smem_budget_bytes=0) -> TopkResult:
    """Row-wise top-k of logits [R, W] over [starts, ends) (SPEC 3.3). Returns TopkResult(indices
    [R, k] int32 relative to start with -1 padding, values [R, k] float32 or None, slot_ids [R, k]
    int32 or None). slot_ids (block_table[b][i // S] * S + i % S) are produced when block_table is
    given; b = row_request[r], or r // next_n without it."""
    args = _topk(logits, k, starts, ends, indices, values, return_values, sorted, block_table, row_request,
                 next_n, states_per_page, slot_ids, False)
    ex = _exec("topk", backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.topk, args, ex, logits)
    return TopkResult(indices if indices is not None else args["indices"],
                      values if values is not None else args["values"],
                      slot_ids if slot_ids is not None else args["slot_ids"])


_topk_op = topk  # for mqa_topk, whose count argument is called topk


def topk_workspace_size(logits, k: int, *, starts=None, ends=None, indices=None, values=None, return_values=False,
                        sorted=False, block_table=None, row_request=None, next_n: int = 1, states_per_page: int = 0,
                        slot_ids=None, backend="auto", stream=None, num_threads=0, smem_budget_bytes=0) -> int:
    """Workspace bytes topk needs for these arguments (0: none). CUDA: pass the stream the call
    will run on; the plan sizes its grids by the SMs that stream can use."""
    args = _topk(logits, k, starts, ends, indices, values, return_values, sorted, block_table, row_request,
                 next_n, states_per_page, slot_ids, True)
    ex = _exec("topk", backend, stream, None, num_threads, smem_budget_bytes)
    return _workspace_bytes(_core.topk, args, ex)


# ------------------------------------------------------------------ sparse MLA
_DV = 512


def _sparse_mla_decode(q, cache, indices, sm_scale, topk_length, extra_cache, extra_indices, extra_topk_length,
                       attn_sink, out, lse, dummy):
    op = "sparse_mla_decode"
    if not isinstance(cache, LatentCache):
        raise TypeError(f"{op}: cache expected dsattn.LatentCache, got {type(cache).__name__}")
    if extra_cache is not None and not isinstance(extra_cache, LatentCache):
        raise TypeError(f"{op}: extra_cache expected dsattn.LatentCache, got {type(extra_cache).__name__}")
    for name, x, req in (("q", q, True), ("indices", indices, True), ("topk_length", topk_length, False),
                         ("extra_indices", extra_indices, False), ("extra_topk_length", extra_topk_length, False),
                         ("attn_sink", attn_sink, False)):
        _arrays.check_array(op, name, x, req)
    if sm_scale is None:
        raise ValueError(f"{op}: sm_scale is required (e.g. 1 / sqrt(d_qk))")
    pages, fmt, tpp, stride = cache._args(op)
    if extra_cache is not None:
        e_pages, e_fmt, e_tpp, e_stride = extra_cache._args(op, "extra_cache")
    else:
        e_pages, e_fmt, e_tpp, e_stride = None, 0, 0, 0
    b, s, h = _dim(q, 0), _dim(q, 1), _dim(q, 2)
    return dict(q=_arrays.prep(q), cache_pages=pages, cache_format=fmt, tokens_per_page=tpp,
                page_stride_bytes=stride, indices=_arrays.prep(indices), topk_length=_arrays.prep(topk_length),
                extra_pages=e_pages, extra_format=e_fmt, extra_tokens_per_page=e_tpp,
                extra_page_stride_bytes=e_stride, extra_indices=_arrays.prep(extra_indices),
                extra_topk_length=_arrays.prep(extra_topk_length), attn_sink=_arrays.prep(attn_sink),
                sm_scale=float(sm_scale), out=_out(op, "out", out, (b, s, h, _DV), "bfloat16", q, dummy),
                lse=_out(op, "lse", lse, (b, s, h), "float32", q, dummy))


def sparse_mla_decode(q, cache: LatentCache, indices, *, sm_scale: float, topk_length=None, extra_cache=None,
                      extra_indices=None, extra_topk_length=None, attn_sink=None, out=None, lse=None,
                      backend="auto", stream=None, workspace=None, num_threads=0, smem_budget_bytes=0):
    """Sparse MLA decode over an FP8 latent cache (SPEC 3.5). q bf16 [B, Sq, Hq, d_qk]; indices
    int32 [B, Sq, topk] slot ids (-1 = none). Returns (out bf16 [B, Sq, Hq, 512], lse float32
    [B, Sq, Hq], natural log). On CUDA the tensor-core kernel runs wherever it can
    (DSATTN_MLA_KERNEL=simple / mma force one kernel); when it splits rows it needs the workspace
    that sparse_mla_decode_workspace_size reports (allocated here when none is passed)."""
    args = _sparse_mla_decode(q, cache, indices, sm_scale, topk_length, extra_cache, extra_indices,
                              extra_topk_length, attn_sink, out, lse, False)
    ex = _exec("sparse_mla_decode", backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.sparse_mla_decode, args, ex, q)
    return (out if out is not None else args["out"], lse if lse is not None else args["lse"])


def sparse_mla_decode_workspace_size(q, cache: LatentCache, indices, *, sm_scale: float, topk_length=None,
                                     extra_cache=None, extra_indices=None, extra_topk_length=None, attn_sink=None,
                                     out=None, lse=None, backend="auto", stream=None, num_threads=0,
                                     smem_budget_bytes=0) -> int:
    """Workspace bytes sparse_mla_decode needs for these arguments (0: none)."""
    args = _sparse_mla_decode(q, cache, indices, sm_scale, topk_length, extra_cache, extra_indices,
                              extra_topk_length, attn_sink, out, lse, True)
    ex = _exec("sparse_mla_decode", backend, stream, None, num_threads, smem_budget_bytes)
    return _workspace_bytes(_core.sparse_mla_decode, args, ex)


def _sparse_mla_prefill(q, kv, indices, sm_scale, topk_length, attn_sink, d_v, out, lse, dummy):
    op = "sparse_mla_prefill"
    for name, x, req in (("q", q, True), ("kv", kv, True), ("indices", indices, True),
                         ("topk_length", topk_length, False), ("attn_sink", attn_sink, False)):
        _arrays.check_array(op, name, x, req)
    if sm_scale is None:
        raise ValueError(f"{op}: sm_scale is required (e.g. 1 / sqrt(d_qk))")
    m, h = _dim(q, 0), _dim(q, 1)
    return dict(q=_arrays.prep(q), kv=_arrays.prep(kv), indices=_arrays.prep(indices),
                topk_length=_arrays.prep(topk_length), attn_sink=_arrays.prep(attn_sink), sm_scale=float(sm_scale),
                d_v=int(d_v), out=_out(op, "out", out, (m, h, d_v), "bfloat16", q, dummy),
                lse=_out(op, "lse", lse, (m, h), "float32", q, dummy))


def sparse_mla_prefill(q, kv, indices, *, sm_scale: float, topk_length=None, attn_sink=None, d_v: int = _DV,
                       out=None, lse=None, backend="auto", stream=None, workspace=None, num_threads=0,
                       smem_budget_bytes=0):
    """Sparse MLA over a bf16 latent kv [Nk, d_qk] (SPEC 3.6). q bf16 [M, Hq, d_qk]; indices int32
    [M, topk] rows of kv (-1 = none). Returns (out bf16 [M, Hq, d_v], lse float32 [M, Hq]). On
    CUDA with d_v 512 the tensor-core kernel runs (see sparse_mla_decode)."""
    args = _sparse_mla_prefill(q, kv, indices, sm_scale, topk_length, attn_sink, d_v, out, lse, False)
    ex = _exec("sparse_mla_prefill", backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.sparse_mla_prefill, args, ex, q)
    return (out if out is not None else args["out"], lse if lse is not None else args["lse"])


def sparse_mla_prefill_workspace_size(q, kv, indices, *, sm_scale: float, topk_length=None, attn_sink=None,
                                      d_v: int = _DV, out=None, lse=None, backend="auto", stream=None, num_threads=0,
                                      smem_budget_bytes=0) -> int:
    """Workspace bytes sparse_mla_prefill needs for these arguments (0: none)."""
    args = _sparse_mla_prefill(q, kv, indices, sm_scale, topk_length, attn_sink, d_v, out, lse, True)
    ex = _exec("sparse_mla_prefill", backend, stream, None, num_threads, smem_budget_bytes)
    return _workspace_bytes(_core.sparse_mla_prefill, args, ex)


# ------------------------------------------------------------------ cache writers
def write_indexer_cache(k, slot_mapping, cache: IndexerCache, *, backend="auto", stream=None, workspace=None,
                        num_threads=0, smem_budget_bytes=0) -> None:
    """Quantizes k (float32 / bf16 [T, D]) and writes it into cache.pages in place at
    slot_mapping (int32 / int64 [T], page * S + offset, -1 = skip), SPEC 2.1 / 2.2."""
    op = "write_indexer_cache"
    if not isinstance(cache, IndexerCache):
        raise TypeError(f"{op}: cache expected dsattn.IndexerCache, got {type(cache).__name__}")
    _arrays.check_array(op, "k", k)
    _arrays.check_array(op, "slot_mapping", slot_mapping)
    _arrays.check_output(op, "cache.pages", cache.pages)
    args = dict(k=_arrays.prep(k), slot_mapping=_arrays.prep(slot_mapping))
    args.update(cache._args(op))
    ex = _exec(op, backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.write_indexer_cache, args, ex, k)


def write_latent_cache(kv, slot_mapping, cache: LatentCache, *, backend="auto", stream=None, workspace=None,
                       num_threads=0, smem_budget_bytes=0) -> None:
    """Quantizes kv (float32 / bf16 [T, d_qk]) into the FP8 latent cache in place at slot_mapping
    (int32 / int64 [T], page * P + offset, -1 = skip), SPEC 2.3."""
    op = "write_latent_cache"
    if not isinstance(cache, LatentCache):
        raise TypeError(f"{op}: cache expected dsattn.LatentCache, got {type(cache).__name__}")
    _arrays.check_array(op, "kv", kv)
    _arrays.check_array(op, "slot_mapping", slot_mapping)
    _arrays.check_output(op, "cache.pages", cache.pages)
    pages, fmt, tpp, stride = cache._args(op)
    args = dict(kv=_arrays.prep(kv), slot_mapping=_arrays.prep(slot_mapping), cache_pages=pages,
                cache_format=fmt, tokens_per_page=tpp, page_stride_bytes=stride)
    ex = _exec(op, backend, stream, workspace, num_threads, smem_budget_bytes)
    _run(_core.write_latent_cache, args, ex, kv)
