"""Framework-neutral array helpers: which framework and device an array belongs to, allocation of
outputs "like" an input, the bit-pattern views, and stream handles. No framework is imported unless
the caller's arrays already come from it (torch / cupy are imported lazily)."""

from __future__ import annotations

import sys

import numpy as np

# DLPack device types (dlpack.h): 1 CPU, 2 CUDA, 3 CUDA pinned host, 13 CUDA managed.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13

BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}


def framework(x) -> str:
    """'torch', 'cupy', 'jax', 'numpy' or 'other' (by the array type's module)."""
    mod = type(x).__module__.split(".")[0]
    if mod in ("torch", "cupy", "numpy"):
        return mod
    if mod in ("jax", "jaxlib"):
        return "jax"
    return "other"


def is_array(x) -> bool:
    return hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__")


def device_of(x):
    """('cpu', 0) or ('cuda', device_id) for any DLPack / numpy array."""
    if isinstance(x, np.ndarray):
        return ("cpu", 0)
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        kind, idx = dev()
        kind = int(kind)
        if kind in (_DL_CUDA, _DL_CUDA_MANAGED):
            return ("cuda", int(idx))
        return ("cpu", 0)
    return ("cpu", 0)


def device_str(x) -> str:
    """'cpu' or 'cuda:N' for any DLPack / numpy array (device_of, as the library's messages write it)."""
    kind, idx = device_of(x)
    return "cpu" if kind == "cpu" else f"cuda:{idx}"


def first_array(*xs):
    for x in xs:
        if x is not None and is_array(x):
            return x
    return None


def check_array(op: str, arg: str, x, required: bool = True) -> None:
    if x is None:
        if required:
            raise ValueError(f"{op}: {arg} is required but was not given")
        return
    if not is_array(x):
        raise TypeError(f"{op}: {arg} expected an array (numpy / torch / cupy / jax, anything with "
                        f"__dlpack__), got {type(x).__name__}")
    # DLPack carries native byte order only; the extension would refuse the array without naming it.
    if isinstance(x, np.ndarray) and not x.dtype.isnative:
        raise ValueError(f"{op}: {arg} byte order expected native, got {x.dtype.str!r} ({x.dtype.name})")


def check_output(op: str, arg: str, x) -> None:
    """An array the op writes into: check_array's checks, and writable (a read-only numpy array is a
    TypeError, as the extension's own refusal is, but naming the argument)."""
    check_array(op, arg, x)
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        raise TypeError(f"{op}: {arg} expected a writable array, got a read-only one")


def prep(x):
    """Zero-copy view that DLPack can carry: torch tensors are detached; float8_e4m3fn arrays (torch
    or ml_dtypes-numpy) become uint8 views and ml_dtypes bfloat16 numpy arrays become uint16 views,
    which the extension reads as E4M3 / bf16 bit patterns where those dtypes are documented."""
    if x is None:
        return None
    fw = framework(x)
    if fw == "torch":
        import torch

        if x.requires_grad:
            x = x.detach()
        if x.dtype == getattr(torch, "float8_e4m3fn", None):
            x = x.view(torch.uint8)
        return x
    if fw == "numpy":
        name = x.dtype.name
        if name == "float8_e4m3fn":
            return x.view(np.uint8)
        if name == "bfloat16":
            return x.view(np.uint16)
    return x


def for_call(x):
    """What the extension is handed for argument `x`: a torch tensor as a DLPack capsule from
    torch.utils.dlpack.to_dlpack, which the extension takes as it takes the tensor, anything else
    as it is. Given the tensor, the extension calls torch's Python-level __dlpack__ method instead:
    a call with six torch tensors spent 15.7 us in the extension that way and 6.9 us with capsules
    (host CPU, torch 2.15, interleaved rounds). Neither synchronizes a stream: the op runs on the
    stream it is given. A capsule is consumed by one call, so make them per call."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        try:
            return torch.utils.dlpack.to_dlpack(x)
        except (RuntimeError, TypeError, ValueError, BufferError):
            return x  # the extension's own conversion then reports what is wrong with it
    return x


def _torch():
    return sys.modules.get("torch") or __import__("torch")


def _have(mod: str) -> bool:
    if mod in sys.modules:
        return True
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def empty(shape, dtype: str, like, zero: bool = False):
    """A new array of `shape` and `dtype` ('float32', 'bfloat16', 'int32', 'uint8') on the device of
    `like`, allocated by the framework of `like` where practical:
      torch input -> torch tensor on its device;  cupy -> cupy (bfloat16 as uint16 bit patterns);
      host numpy / jax / other -> numpy (bfloat16 as uint16 bit patterns);
      CUDA jax / other -> torch if installed, else cupy, else ValueError (pass the output in).
    """
    shape = tuple(int(s) for s in shape)
    kind, idx = device_of(like) if like is not None else ("cpu", 0)
    fw = framework(like) if like is not None else "numpy"
    if fw == "torch" or (kind == "cuda" and fw not in ("cupy",) and _have("torch")):
        torch = _torch()
        dev = like.device if fw == "torch" else torch.device("cuda", idx)
        fn = torch.zeros if zero else torch.empty
        return fn(shape, dtype=getattr(torch, dtype), device=dev)
    np_dtype = np.uint16 if dtype == "bfloat16" else np.dtype(dtype)
    if kind == "cuda":
        if not _have("cupy"):
            raise ValueError(f"cannot allocate a {dtype} {list(shape)} output on cuda:{idx}: neither torch "
                             f"nor cupy is installed; pass the output array in")
        import cupy

        with cupy.cuda.Device(idx):
            return (cupy.zeros if zero else cupy.empty)(shape, dtype=np_dtype)
    return (np.zeros if zero else np.empty)(shape, dtype=np_dtype)


def current_stream_handle(device) -> int:
    """cudaStream_t of torch's current stream on the CUDA `device` (a torch.device): through
    torch._C._cuda_getCurrentRawStream where torch has it (~0.3 us), else torch.cuda.current_stream
    (~4 us: it builds a Stream object)."""
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device.index if device.index is not None else torch.cuda.current_device()))
    return int(torch.cuda.current_stream(device).cuda_stream)


def scratch(nbytes: int, like, stream: int):
    """A uint8 [nbytes] workspace for one call on `stream` (a handle), allocated like `like`. A torch
    tensor comes from the caching allocator of torch's current stream; when the call runs on
    another stream, record_stream keeps the block from being handed out again before the work
    queued on that stream has finished."""
    buf = empty((nbytes,), "uint8", like)
    if framework(buf) == "torch" and buf.is_cuda:
        torch = _torch()
        if current_stream_handle(buf.device) != stream:
            buf.record_stream(torch.cuda.ExternalStream(stream, device=buf.device))
    return buf


def stream_handle(stream) -> int:
    """cudaStream_t as an int: None -> 0 (the legacy default stream); an int is taken as is; an
    object with __cuda_stream__ (CUDA stream protocol: returns (version, handle)), .cuda_stream
    (torch.cuda.Stream) or .ptr (cupy.cuda.Stream) gives its handle."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError("stream expected an int handle or a stream object, got bool")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"stream handle expected >= 0, got {stream}")
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        v = proto() if callable(proto) else proto
        return int(v[1]) if isinstance(v, tuple) else int(v)
    for attr in ("cuda_stream", "ptr"):
        h = getattr(stream, attr, None)
        if h is not None:
            return int(h)
    raise TypeError(f"stream expected None, an int handle or an object with __cuda_stream__ / "
                    f"cuda_stream / ptr, got {type(stream).__name__}")
