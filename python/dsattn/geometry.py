"""Model presets, per-layer cache geometry (SPEC 3.8 / 4) and cache allocation helpers.

    preset = dsattn.get_preset("deepseek-v4.1-flash")
    layers = dsattn.plan(preset)                      # list of LayerGeometry, one per layer
    idx = dsattn.empty_indexer_cache(num_pages, layer.states_per_page, preset.index_head_dim,
                                     like=some_tensor)  # torch tensor -> torch cache on its device
"""

from __future__ import annotations

from typing import Optional, Union

from . import _arrays
from . import _dsattn as _core
from ._api import INDEXER_FORMATS, LATENT_FORMATS, IndexerCache, LatentCache

ModelPreset = _core.ModelPreset
LayerGeometry = _core.LayerGeometry

_INDEXER_NAMES = {v: k for k, v in INDEXER_FORMATS.items()}
_LATENT_NAMES = {v: k for k, v in LATENT_FORMATS.items()}


def preset_names() -> list:
    """Names of the built-in presets ("deepseek-v3.2", "deepseek-v4-flash", ...)."""
    return list(_core.preset_names())


def get_preset(name: str) -> ModelPreset:
    """The preset called `name` (ValueError naming the known ones otherwise). indexer_format /
    latent_format are ints; indexer_format_name / latent_format_name give their names."""
    return _core.get_preset(name)


def indexer_format_name(preset: ModelPreset) -> str:
    return _INDEXER_NAMES[preset.indexer_format]


def latent_format_name(preset: ModelPreset) -> str:
    return _LATENT_NAMES[preset.latent_format]


def plan(preset: Union[str, ModelPreset]) -> list:
    """Geometry of every layer of `preset` (a name or a ModelPreset): states per page, indexer and
    latent page bytes, top-k."""
    if isinstance(preset, str):
        preset = get_preset(preset)
    return list(_core.plan(preset))


def check_indexer_cache(layer: LayerGeometry, preset: ModelPreset, cache: IndexerCache) -> None:
    """ValueError (naming the layer, expected and given values) when `cache` does not fit `layer`."""
    a = cache._args("check_indexer_cache")
    _core.check_indexer_cache(layer, preset, a["cache_pages"], a["cache_format"], a["states_per_page"],
                              a["head_dim"], a["page_stride_bytes"])


def visible_states(pos, ratio: int):
    """Compressed states visible to the query token at 0-based position `pos`: (pos + 1) // r
    (0 for window-only layers, r = 0). Works on ints and on arrays of any framework."""
    return (pos + 1) // ratio if ratio > 0 else pos * 0


# ------------------------------------------------------------------ sizes
def indexer_state_bytes(head_dim: int = 128, format: str = "fp8") -> int:
    """Bytes per state: D + 4 (fp8), D / 2 + 4 (mxfp4)."""
    return int(_core.indexer_state_bytes(INDEXER_FORMATS[format], head_dim))


def indexer_page_bytes(states_per_page: int, head_dim: int = 128, format: str = "fp8") -> int:
    """Minimum bytes of one indexer page: S * indexer_state_bytes."""
    return int(states_per_page) * indexer_state_bytes(head_dim, format)


def latent_page_bytes(tokens_per_page: int, format: str = "v4_fp8") -> int:
    """Minimum bytes of one latent page (V4: P * 584 rounded up to a multiple of 576; V3.2: P * 656)."""
    return int(_core.latent_min_page_bytes(LATENT_FORMATS[format], tokens_per_page))


def latent_dqk(format: str = "v4_fp8") -> int:
    """d_qk of a latent format: 512 (v4_fp8), 576 (v32_fp8)."""
    return int(_core.latent_dqk(LATENT_FORMATS[format]))


def indexer_cache_shape(num_pages: int, states_per_page: int, head_dim: int = 128, format: str = "fp8",
                        page_stride_bytes: Optional[int] = None) -> tuple:
    """uint8 shape (num_pages, page_stride_bytes) of an indexer cache; the stride defaults to the
    minimum page bytes rounded up to a multiple of 4."""
    minimum = indexer_page_bytes(states_per_page, head_dim, format)
    stride = page_stride_bytes if page_stride_bytes is not None else (minimum + 3) // 4 * 4
    return (int(num_pages), int(stride))


def latent_cache_shape(num_pages: int, tokens_per_page: int, format: str = "v4_fp8",
                       page_stride_bytes: Optional[int] = None) -> tuple:
    """uint8 shape (num_pages, page_stride_bytes) of a latent cache (stride defaults to the minimum)."""
    stride = page_stride_bytes if page_stride_bytes is not None else latent_page_bytes(tokens_per_page, format)
    return (int(num_pages), int(stride))


# ------------------------------------------------------------------ allocation
def _like(like, device):
    """An array to allocate 'like': `like` itself, or a tiny torch tensor on `device` (a
    torch.device or a string such as "cuda:0"); None -> host numpy."""
    if like is not None:
        return like
    if device is None or str(device) == "cpu":
        return None
    import torch

    return torch.empty(0, dtype=torch.uint8, device=device)


def empty_indexer_cache(num_pages: int, states_per_page: int, head_dim: int = 128, format: str = "fp8",
                        page_stride_bytes: Optional[int] = None, like=None, device=None) -> IndexerCache:
    """A zero-filled indexer cache (all scales 0). Allocated like `like` (same framework and
    device), or with torch on `device`, or with numpy on the host when neither is given."""
    shape = indexer_cache_shape(num_pages, states_per_page, head_dim, format, page_stride_bytes)
    pages = _arrays.empty(shape, "uint8", _like(like, device), zero=True)
    return IndexerCache(pages, states_per_page, head_dim, format)


def empty_latent_cache(num_pages: int, tokens_per_page: int, format: str = "v4_fp8",
                       page_stride_bytes: Optional[int] = None, like=None, device=None) -> LatentCache:
    """A zero-filled latent cache, allocated as for empty_indexer_cache."""
    shape = latent_cache_shape(num_pages, tokens_per_page, format, page_stride_bytes)
    pages = _arrays.empty(shape, "uint8", _like(like, device), zero=True)
    return LatentCache(pages, tokens_per_page, format)
