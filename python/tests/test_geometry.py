"""Presets, per-layer geometry and cache sizes (expected values computed by hand from SPEC 2 / 4)."""

import numpy as np
import pytest

import dsattn


def test_preset_names_and_unknown_preset():
    names = dsattn.preset_names()
    for n in ("deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4.1-flash"):
        assert n in names
    with pytest.raises(ValueError, match="get_preset.*deepseek-v9"):
        dsattn.get_preset("deepseek-v9")


def test_v41_flash_plan():
    p = dsattn.get_preset("deepseek-v4.1-flash")
    assert (p.index_heads, p.index_head_dim, p.topk, p.block_tokens, p.attn_heads, p.window) == (32, 128, 512, 64, 64, 128)
    layers = dsattn.plan(p)
    assert len(layers) == 2 + 18 + 20 + 3
    r2, r1, win = layers[2], layers[20], layers[0]
    assert (r2.compress_ratio, r2.states_per_page, r2.indexer_page_bytes, r2.topk) == (2, 32, 32 * 132, 512)
    # V4 latent page: 32 * 584 = 18688 B rounded up to a multiple of 576 = 33 * 576
    assert (r2.latent_tokens_per_page, r2.latent_page_bytes) == (32, 33 * 576)
    assert (r1.compress_ratio, r1.states_per_page, r1.indexer_page_bytes) == (1, 64, 64 * 132)
    assert r1.latent_page_bytes == 65 * 576  # 64 * 584 = 37376 -> 65 * 576
    assert r2.has_indexer and r1.has_indexer
    assert (win.compress_ratio, win.has_indexer, win.states_per_page, win.indexer_page_bytes) == (0, False, 0, 0)
    assert [g.compress_ratio for g in dsattn.plan("deepseek-v4.1-flash")] == [g.compress_ratio for g in layers]


def test_v4_flash_plan_states_per_page():
    layers = dsattn.plan("deepseek-v4-flash")
    by_ratio = {g.compress_ratio: g for g in layers}
    assert by_ratio[4].states_per_page == 64 and by_ratio[4].has_indexer
    assert by_ratio[128].states_per_page == 2 and not by_ratio[128].has_indexer


def test_sizes():
    assert dsattn.indexer_state_bytes(128) == 132 and dsattn.indexer_state_bytes(128, "mxfp4") == 68
    assert dsattn.indexer_page_bytes(32) == 4224
    assert dsattn.indexer_cache_shape(10, 32) == (10, 4224)
    assert dsattn.indexer_cache_shape(10, 3, 64, "mxfp4") == (10, 108)   # 3 * 36
    assert dsattn.indexer_cache_shape(10, 64, page_stride_bytes=8704) == (10, 8704)
    assert dsattn.latent_page_bytes(64) == 65 * 576
    assert dsattn.latent_page_bytes(64, "v32_fp8") == 64 * 656
    assert dsattn.latent_dqk("v4_fp8") == 512 and dsattn.latent_dqk("v32_fp8") == 576


def test_empty_caches_numpy():
    c = dsattn.empty_indexer_cache(5, 32)
    assert isinstance(c.pages, np.ndarray) and c.pages.shape == (5, 4224) and c.pages.dtype == np.uint8
    assert not c.pages.any()
    lc = dsattn.empty_latent_cache(3, 32)
    assert lc.pages.shape == (3, 33 * 576) and lc.tokens_per_page == 32 and lc.format == "v4_fp8"


def test_check_indexer_cache_names_layer():
    p = dsattn.get_preset("deepseek-v4.1-flash")
    layer = dsattn.plan(p)[2]  # ratio 2: 32 states per page
    dsattn.check_indexer_cache(layer, p, dsattn.empty_indexer_cache(4, 32))
    with pytest.raises(ValueError, match="layer 2") as e:
        dsattn.check_indexer_cache(layer, p, dsattn.empty_indexer_cache(4, 64))
    assert "32" in str(e.value) and "64" in str(e.value)


def test_visible_states():
    assert dsattn.visible_states(0, 2) == 0 and dsattn.visible_states(1, 2) == 1 and dsattn.visible_states(127, 4) == 32
    np.testing.assert_array_equal(dsattn.visible_states(np.array([0, 63, 64]), 1), [1, 64, 65])
    assert dsattn.visible_states(500, 0) == 0
