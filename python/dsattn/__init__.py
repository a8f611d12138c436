"""dsattn — DeepSeek Sparse Attention (V3.2 / V4 / V4.1) for serving engines.

Every op of include/dsattn/ops.h, with keyword arguments named after the C++ params fields:
    paged_mqa_logits, paged_mqa_topk, schedule_metadata, mqa_logits, topk,
    sparse_mla_decode, sparse_mla_prefill, write_indexer_cache, write_latent_cache
plus mqa_topk (prefill logits + top-k in row chunks: bounded memory), *_workspace_size(...)
queries, geometry (get_preset, plan, cache sizes / allocation), inspect_indexer_cache /
inspect_latent_cache (host-side checks of a cache's contents, for debugging an integration: see
dsattn.diagnose) and `dsattn.reference`, a pure-numpy implementation of every op used by the tests.

Arrays
  Tensors travel through DLPack without copies: torch, cupy, jax and numpy (anything with
  __dlpack__). All tensors of one call live on one device; the backend follows it (backend="auto")
  or is forced with backend="cpu" / "cuda" (a mismatch is a ValueError, never a silent copy).
  A wrong dtype, shape or device raises ValueError with the C++ message, which names the op and the
  argument ("paged_mqa_logits: q dtype expected f8_e4m3, got f32"). A request this build cannot
  serve raises NotImplementedError; a CUDA failure raises RuntimeError.

Bit-pattern rule (numpy has neither FP8 nor bf16)
  * An argument documented as FP8 E4M3 (q and, for mqa_logits, k with format="fp8") also accepts a
    uint8 array holding E4M3 bit patterns. torch.float8_e4m3fn (and ml_dtypes float8_e4m3fn numpy)
    arrays are passed as zero-copy uint8 views, so they work whether or not DLPack carries FP8.
  * An argument documented as bf16 (logits, sparse-MLA q / kv / out, writer inputs) also accepts a
    uint16 array holding bf16 bit patterns (ml_dtypes bfloat16 numpy arrays are viewed as uint16).
  * Nothing else is reinterpreted: a uint8 array where f32 is expected is a ValueError.

Outputs
  Pass outputs in (preallocated; required for CUDA graphs) or let the call allocate them with the
  inputs' framework: torch inputs -> torch tensors on the same device; cupy -> cupy; host numpy /
  jax -> numpy; CUDA jax -> torch if installed, else cupy. Without a bf16 dtype (numpy, cupy) a
  bf16 output is a uint16 array of bf16 bit patterns (dsattn.reference.bf16_to_f32 decodes it).

Streams
  stream= takes an int cudaStream_t handle, or an object with __cuda_stream__ (CUDA stream
  protocol), .cuda_stream (torch.cuda.Stream) or .ptr (cupy.cuda.Stream). The default (None) is
  the legacy default stream (handle 0), NOT torch's current stream: inside torch.cuda.graph() or a
  torch.cuda.stream() context pass stream=torch.cuda.current_stream().
  (dsattn.torch_ops, below, takes torch's current stream by itself.)

Workspace
  CUDA ops take workspace= (a uint8 tensor of at least *_workspace_size(...) bytes on the same
  device; another device is a ValueError). When an op needs scratch and none is passed, the call
  allocates it (torch, else cupy; numpy on the host) once it knows the size. A torch allocation is
  kept for the call's stream and, inside torch.cuda.graph(), comes from the graph's private pool;
  with cupy, or a capture torch does not manage, size it with *_workspace_size and pass it in. Do
  not share one workspace between eager calls and graph replays that may overlap.

PyTorch custom ops
  `import dsattn.torch_ops` registers the ops as torch.ops.dsattn.* (torch >= 2.4): traceable by
  torch.compile(fullgraph=True), run on torch's current stream, scratch from torch's allocator. See
  that module's docstring. Not imported here, so `import dsattn` does not import torch.

Build
  `pip install .` at the repository root; CUDA kernels are compiled in when nvcc is found
  (DSATTN_CUDA=OFF skips them, DSATTN_CUDA_ARCHS="90a" limits the architectures).
"""

from __future__ import annotations

from . import _dsattn
from ._api import (
    IndexerCache,
    LatentCache,
    TopkResult,
    mqa_logits,
    mqa_logits_workspace_size,
    mqa_topk,
    paged_mqa_logits,
    paged_mqa_logits_workspace_size,
    paged_mqa_topk,
    paged_mqa_topk_route,
    paged_mqa_topk_workspace_size,
    schedule_metadata,
    schedule_metadata_size,
    sparse_mla_decode,
    sparse_mla_decode_workspace_size,
    sparse_mla_prefill,
    sparse_mla_prefill_workspace_size,
    topk,
    topk_workspace_size,
    write_indexer_cache,
    write_latent_cache,
)
from .diagnose import CacheReport, inspect_indexer_cache, inspect_latent_cache
from .geometry import (
    LayerGeometry,
    ModelPreset,
    check_indexer_cache,
    empty_indexer_cache,
    empty_latent_cache,
    get_preset,
    indexer_cache_shape,
    indexer_format_name,
    indexer_page_bytes,
    indexer_state_bytes,
    latent_cache_shape,
    latent_dqk,
    latent_format_name,
    latent_page_bytes,
    plan,
    preset_names,
    visible_states,
)

__version__ = _dsattn.__version__


def cuda_available() -> bool:
    """True when this build has CUDA kernels and a CUDA device is visible."""
    return bool(_dsattn.cuda_available())


def cuda_architectures() -> list:
    """The CUDA architectures this build has code for, as DSATTN_CUDA_ARCHS named them
    (["80", "89", "90a", "100f", "120f"] by default; [] without CUDA). A CUDA call on a GPU none of
    them runs on raises NotImplementedError naming the entry to add."""
    return [a for a in str(_dsattn.cuda_architectures()).replace(";", ",").split(",") if a]


def cuda_num_sms() -> int:
    """Multiprocessors of the current CUDA device (0 without CUDA)."""
    return int(_dsattn.cuda_num_sms())


def cuda_stream_num_sms(stream=None) -> int:
    """Multiprocessors that work on `stream` can use (None: the legacy default stream): those of
    its green context, else cuda_num_sms() (an MPS client's share under an SM limit). The CUDA
    ops size their grids and workspaces by it (0 without CUDA)."""
    from ._arrays import stream_handle
    return int(_dsattn.cuda_stream_num_sms(stream_handle(stream)))
