"""Argument checks shared by the compat modules: errors name the original library's function
("deep_gemm.fp8_paged_mqa_logits: ...") and the argument, as the library's own messages do."""

from __future__ import annotations

import torch


def fail(fn: str, msg: str, exc=ValueError):
    """Raises exc("<fn>: <msg>"); fn is the qualified name, e.g. "flash_mla.flash_mla_sparse_fwd"."""
    raise exc(f"{fn}: {msg}")


def tensor(fn: str, arg: str, x, dtypes, ndims) -> torch.Tensor:
    """x when it is a torch.Tensor of one of `dtypes` whose rank is one of `ndims`."""
    if not isinstance(x, torch.Tensor):
        fail(fn, f"{arg} expected a torch.Tensor, got {type(x).__name__}", TypeError)
    if x.dtype not in dtypes:
        fail(fn, f"{arg} dtype expected {' or '.join(str(d) for d in dtypes)}, got {x.dtype}")
    if x.dim() not in ndims:
        want = " or ".join(str(n) for n in ndims)
        fail(fn, f"{arg} rank expected {want}, got {x.dim()} (shape {list(x.shape)})")
    return x


def tensors(fn: str, **args) -> None:
    """TypeError naming `fn` and the argument for any value of `args` that is neither a torch.Tensor
    nor None (the ops check dtypes and shapes; the torch dispatcher would raise a RuntimeError
    naming only the op's schema)."""
    for arg, x in args.items():
        if x is not None and not isinstance(x, torch.Tensor):
            fail(fn, f"{arg} expected a torch.Tensor, got {type(x).__name__}", TypeError)


def as_bytes(x: torch.Tensor) -> torch.Tensor:
    """A one-byte tensor (packed FP4 as int8 / float4_e2m1fn_x2, an FP8 or int8 cache) as uint8, the
    dtype dsattn reads such bytes as (a view, no copy)."""
    return x if x.dtype == torch.uint8 else x.view(torch.uint8)
