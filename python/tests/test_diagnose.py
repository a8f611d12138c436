"""dsattn.inspect_indexer_cache / inspect_latent_cache: clean caches written by the reference writers
report nothing; each integration mistake they are meant to catch is reported with its cause (the
wrong page layout, lengths in tokens on a compressed layer, block-table entries past the cache,
slot ids past the cache, unwritten tokens, NaN scales)."""

import numpy as np
import pytest

import dsattn
from dsattn import reference as ref

from cases import _latent_pages, indexer_case


def _cache(c, pages=None):
    return dsattn.IndexerCache(c.pages if pages is None else pages, c.S, c.D, c.fmt)


@pytest.mark.parametrize("fmt,mode", [("fp8", "per_request"), ("fp8", "per_row"), ("mxfp4", "varlen")])
def test_clean_indexer_cache_reports_nothing(fmt, mode):
    c = indexer_case(seed=3, B=3, N=2, H=16, D=128, S=32, lens=(300, 0, 170), fmt=fmt, mode=mode, pad=12)
    rep = dsattn.inspect_indexer_cache(_cache(c), c.block_table, c.context_lens, row_request=c.row_request)
    assert rep.ok, str(rep)
    assert rep.checked == 300 + 170 and "no problem found" in str(rep)


def test_token_interleaved_pages_are_reported_as_a_layout_error():
    """The field failure of SPEC 2.1: states written as [S, D + 4] rows, read page-major."""
    c = indexer_case(seed=4, B=2, N=1, S=64, lens=(128, 64))
    S, D = c.S, c.D
    vals, scale = ref.indexer_cache_decode(c.pages, S, D)                 # the right reading
    inter = np.zeros_like(c.pages)
    codes = c.pages[:, : S * D].reshape(-1, S, D)
    for s in range(S):
        inter[:, s * (D + 4): s * (D + 4) + D] = codes[:, s]
        inter[:, s * (D + 4) + D: (s + 1) * (D + 4)] = scale[:, s:s + 1].astype("<f4").view(np.uint8)
    rep = dsattn.inspect_indexer_cache(_cache(c, inter), c.block_table, c.context_lens)
    assert not rep.ok
    assert rep.counts["nan_or_inf_scale"] + rep.counts["negative_scale"] > 0.2 * rep.checked
    assert "wrong layout" in str(rep) and "token-interleaved" in str(rep)


def test_lengths_in_tokens_on_a_ratio_2_layer():
    """A ratio-2 layer whose 200 / 90 tokens made 100 / 45 states, asked with token counts: the
    states past the written ones have scale 0."""
    states = (100, 45)
    c = indexer_case(seed=5, B=2, N=1, S=32, lens=(200, 90), spare_pages=0)
    slots = []
    for b, n in enumerate(states):
        t = np.arange(n)
        slots += list(c.block_table[b, t // c.S] * c.S + t % c.S)
    pages = np.zeros_like(c.pages)
    keys = np.random.default_rng(0).standard_normal((len(slots), c.D)).astype(np.float32)
    pages = ref.write_indexer_cache(keys, np.array(slots), pages, c.S, c.D)
    cache = _cache(c, pages)
    assert dsattn.inspect_indexer_cache(cache, c.block_table, np.array(states, np.int32)).ok
    rep = dsattn.inspect_indexer_cache(cache, c.block_table, np.array([200, 90], np.int32))
    assert rep.counts["zero_scale"] == 145 and "tokens // ratio" in str(rep)


def test_block_table_entries_past_the_cache_and_short_tables():
    c = indexer_case(seed=6, B=2, N=1, S=16, lens=(40, 20))
    bt = c.block_table.copy()
    bt[1, 0] = c.pages.shape[0] + 5
    rep = dsattn.inspect_indexer_cache(_cache(c), bt, c.context_lens)
    assert rep.counts["bad_page"] == 16 and f"block_table[1][0] = {c.pages.shape[0] + 5}" in str(rep)
    rep = dsattn.inspect_indexer_cache(_cache(c), c.block_table[:, :2], c.context_lens)
    assert "more pages than the block table has (2)" in str(rep)


def test_mxfp4_nan_scale():
    c = indexer_case(seed=7, B=1, N=1, S=32, lens=(50,), fmt="mxfp4")
    pages = c.pages.copy()
    p, S, D = c.block_table[0, 1], c.S, c.D
    pages[p, S * D // 2 + 4 * 3] = 0xFF                                    # state 32 + 3
    rep = dsattn.inspect_indexer_cache(_cache(c, pages), c.block_table, c.context_lens)
    assert rep.counts["nan_scale"] == 1 and "UE8M0 NaN" in str(rep)


@pytest.mark.parametrize("fmt", ["v4_fp8", "v32_fp8"])
def test_latent_cache(fmt):
    rng = np.random.default_rng(8)
    P = 16
    pages = _latent_pages(rng, 3, P, fmt)
    cache = dsattn.LatentCache(pages, P, fmt)
    ind = rng.integers(-1, 3 * P, (2, 1, 20)).astype(np.int32)
    rep = dsattn.inspect_latent_cache(cache, ind)
    assert rep.ok, str(rep)

    bad = pages.copy()
    tok = int(ind[ind >= 0][0])
    p, o = divmod(tok, P)
    if fmt == "v4_fp8":
        bad[p, P * 576 + o * 8 + 2] = 0xFF                                 # a UE8M0 NaN scale
    else:
        bad[p, o * 656 + 512: o * 656 + 516] = np.array([np.nan], "<f4").view(np.uint8)
    rep = dsattn.inspect_latent_cache(dsattn.LatentCache(bad, P, fmt), ind)
    assert rep.counts["nan_scale"] == 1 and "NaN (or negative) scale" in str(rep)

    # A bf16 NaN in a token's RoPE part (the 3rd RoPE value).
    nan = pages.copy()
    rope_at = o * 576 + 448 if fmt == "v4_fp8" else o * 656 + 528
    nan[p, rope_at + 4: rope_at + 6] = np.array([0x7FC0], "<u2").view(np.uint8)
    rep = dsattn.inspect_latent_cache(dsattn.LatentCache(nan, P, fmt), ind)
    assert rep.counts["nan_values"] == 1 and rep.counts["nan_scale"] == 0 and "bf16 NaN" in str(rep)

    # A slot past the cache, and a slot of a page never written.
    zero = np.concatenate([pages, np.zeros((1, pages.shape[1]), np.uint8)])
    ind2 = np.array([[[3 * P + 2, 4 * P + 1, 0, -1]]], np.int32)
    rep = dsattn.inspect_latent_cache(dsattn.LatentCache(zero, P, fmt), ind2)
    assert rep.counts["bad_slot"] == 1 and rep.counts["unwritten"] == 1 and rep.counts["tokens"] == 2
    # topk_length keeps both out: only slot ids before each request's length are read.
    assert dsattn.inspect_latent_cache(dsattn.LatentCache(zero, P, fmt), ind2[..., 2:].copy()).ok
    assert dsattn.inspect_latent_cache(dsattn.LatentCache(zero, P, fmt), ind2[:, :, ::-1].copy(),
                                       topk_length=np.array([2], np.int32)).ok


def test_torch_tensors_and_a_padded_view():
    torch = pytest.importorskip("torch")
    c = indexer_case(seed=9, B=2, N=1, S=32, lens=(70, 33), pad=20)
    buf = torch.from_numpy(c.pages)
    view = buf[:, : c.S * 132]                         # the pages without their padding, strided
    rep = dsattn.inspect_indexer_cache(dsattn.IndexerCache(view, c.S), torch.from_numpy(c.block_table),
                                       torch.from_numpy(c.context_lens))
    assert rep.ok and rep.checked == 103
