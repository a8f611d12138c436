"""dsattn.compat.deep_gemm and dsattn.compat.flash_mla: the DeepGEMM / FlashMLA signatures on
dsattn, checked against references on the CPU (and on the GPU where torch has CUDA and dsattn was
built with it).

The DeepGEMM FP8 checks build the cache the way DeepGEMM's callers do, with torch alone (per-state
E4M3 values of a block first, then its fp32 scales, in a [num_blocks, block_kv, 1, D + 4] view of
row-padded pages), and score it with torch in float64: an independent reading of the layout. The
FlashMLA checks apply FlashMLA's own result conventions (lse [b, h_q, s_q], +inf for a query with
no valid index, indices >= s_kv ignored) to dsattn.reference. Skipped without torch (>= 2.4)."""

import numpy as np
import pytest

import dsattn
from dsattn import reference as ref

from cases import _latent_pages, logits_atol, mla_case, to_host, to_torch, topk_tol

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"dsattn.compat needs torch >= 2.4, this is {torch.__version__}", allow_module_level=True)

from dsattn.compat import deep_gemm, flash_mla  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and dsattn.cuda_available()
DEVICES = ["cpu"] + (["cuda"] if HAVE_CUDA else [])
put, host = to_torch, to_host


# ------------------------------------------------------------------ DeepGEMM, paged FP8
class PagedFp8:
    """A decode batch as a DeepGEMM caller holds it, built with torch only."""

    def __init__(self, seed, B, N, H, D, block_kv, lens, pad):
        g = torch.Generator().manual_seed(seed)
        self.N, self.block_kv = N, block_kv
        ppr = -(-max(lens) // block_kv)
        num_blocks = B * ppr + 3
        keys = torch.randn((num_blocks, block_kv, D), generator=g) * torch.empty(num_blocks, block_kv, 1).uniform_(
            0.1, 4.0, generator=g)
        scale = keys.abs().amax(-1).clamp(min=1e-4) / 448.0                  # plain amax / 448 (SPEC 2.1)
        k8 = (keys / scale.unsqueeze(-1)).to(torch.float8_e4m3fn)
        self.k_deq = k8.double() * scale.double().unsqueeze(-1)               # [num_blocks, block_kv, D]
        page_bytes = block_kv * (D + 4)
        buf = torch.randint(0, 256, (num_blocks, page_bytes + pad), dtype=torch.uint8, generator=g)
        buf[:, :block_kv * D] = k8.view(torch.uint8).reshape(num_blocks, -1)
        buf[:, block_kv * D:page_bytes] = scale.contiguous().view(torch.uint8).reshape(num_blocks, -1)
        self.kv_cache = buf[:, :page_bytes].view(num_blocks, block_kv, 1, D + 4)
        self.block_table = torch.randperm(num_blocks, generator=g)[:B * ppr].view(B, ppr).to(torch.int32)
        self.q = torch.randn((B, N, H, D), generator=g).to(torch.float8_e4m3fn)
        self.weights = torch.randn((B * N, H), generator=g)
        lens_t = torch.tensor(lens, dtype=torch.int32)
        self.context_lens = (lens_t.view(B, 1) - N + 1 + torch.arange(N, dtype=torch.int32)).clamp(min=0)

    def want(self, width) -> torch.Tensor:
        """float64 [B * N, width], -inf past each row's context."""
        B, N = self.q.shape[:2]
        out = torch.full((B * N, width), float("-inf"), dtype=torch.float64)
        for b in range(B):
            for j in range(N):
                n = int(self.context_lens[b, j])
                t = torch.arange(n)
                keys = self.k_deq[self.block_table[b, t // self.block_kv].long(), t % self.block_kv]   # [n, D]
                s = torch.relu(self.q[b, j].double() @ keys.T)                                          # [H, n]
                out[b * N + j, :n] = self.weights[b * N + j].double() @ s
        return out

    def args(self, dev):
        return (self.q.to(dev), self.kv_cache.to(dev) if dev == "cpu" else _to_dev_view(self.kv_cache, dev),
                self.weights.to(dev), self.context_lens.to(dev), self.block_table.to(dev))


def _to_dev_view(view: torch.Tensor, dev) -> torch.Tensor:
    """The same strided view (padding and all) on `dev`: .to() would make it contiguous."""
    base = view.as_strided((view.shape[0], view.stride(0)), (view.stride(0), 1)).to(dev)
    return base.as_strided(view.shape, view.stride())


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("block_kv,N,H,pad", [(64, 1, 64, 0), (32, 2, 32, 64), (16, 3, 16, 12)])
def test_deep_gemm_fp8_paged_mqa_logits(dev, block_kv, N, H, pad):
    c = PagedFp8(seed=block_kv + N, B=3, N=N, H=H, D=128, block_kv=block_kv, lens=(300, 1, 170), pad=pad)
    q, kv_cache, w, lens, bt = c.args(dev)
    assert kv_cache.stride(0) == block_kv * 132 + pad
    max_len = bt.shape[1] * block_kv
    want = c.want(max_len)
    fin = torch.isfinite(want)

    num_sms = 20
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, num_sms)
    assert meta.dtype == torch.int32 and tuple(meta.shape) == (num_sms + 1, 2) and meta.device.type == dev
    # Engines keep a [num_sms + 1, 2] buffer and copy each step's schedule into it (CUDA graphs).
    kept = torch.zeros((num_sms + 1, 2), dtype=torch.int32, device=dev)
    kept.copy_(meta)

    for schedule, clean in ((kept, True), (None, False)):
        got = deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt, schedule, max_len, clean)
        assert got.dtype == torch.float32 and tuple(got.shape) == (3 * N, max_len) and got.device.type == dev
        assert got.stride(1) == 1 and got.stride(0) % 256 == 0, "DeepGEMM's row-padded logits"
        g = got.cpu().double()
        torch.testing.assert_close(g[fin], want[fin], rtol=1e-4, atol=logits_atol(want))
        if clean:
            assert bool((g[~fin] == float("-inf")).all()), "clean_logits writes -inf past each row's context"

    # Keyword names as DeepGEMM's binding spells them.
    kw = deep_gemm.fp8_fp4_paged_mqa_logits(q=(q, None), kv_cache=kv_cache, weights=w, context_lens=lens,
                                            block_table=bt, schedule_meta=meta, max_context_len=max_len,
                                            clean_logits=True, logits_dtype=torch.bfloat16)
    assert kw.dtype == torch.bfloat16
    torch.testing.assert_close(kw.cpu().double()[fin], want[fin], rtol=2.0 ** -7, atol=logits_atol(want))


@pytest.mark.parametrize("dev", DEVICES)
def test_deep_gemm_varlen_rows(dev):
    """DeepGEMM's varlen mode: one query row per entry, block table and lengths per row; indices
    names each row's request."""
    c = PagedFp8(seed=5, B=4, N=1, H=32, D=128, block_kv=64, lens=(200, 90, 201, 7), pad=0)
    q, kv_cache, w, lens, bt = c.args(dev)
    indices = torch.tensor([0, 0, 1, 1], dtype=torch.int32, device=dev)
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 8, indices=indices)
    got = deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt, meta, 256, True, indices=indices)
    want = c.want(256)
    fin = torch.isfinite(want)
    torch.testing.assert_close(got.cpu().double()[fin], want[fin], rtol=1e-4, atol=logits_atol(want))


@pytest.mark.parametrize("dev", DEVICES)
def test_deep_gemm_one_request_needs_no_schedule(dev):
    """With one request the call splits it itself (the faster launch) and does not read
    schedule_meta: a zeroed buffer of the right shape gives the right logits."""
    c = PagedFp8(seed=9, B=1, N=2, H=64, D=128, block_kv=64, lens=(1000,), pad=0)
    q, kv_cache, w, lens, bt = c.args(dev)
    got = deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt, torch.zeros((9, 2), dtype=torch.int32,
                                                                                 device=dev), 1024, True)
    want = c.want(1024)
    fin = torch.isfinite(want)
    torch.testing.assert_close(got.cpu().double()[fin], want[fin], rtol=1e-4, atol=logits_atol(want))


@pytest.mark.parametrize("dev", DEVICES)
def test_deep_gemm_style_fused_topk(dev):
    """fp8_paged_mqa_topk (dsattn's addition) on DeepGEMM's tensors: a valid top-k of the
    float64 scores, scores and slot ids consistent with the indices, sorted when asked."""
    c = PagedFp8(seed=31, B=3, N=2, H=32, D=128, block_kv=32, lens=(900, 20, 513), pad=8)
    q, kv_cache, w, lens, bt = c.args(dev)
    want = c.want(bt.shape[1] * 32)
    ends = torch.isfinite(want).sum(dim=1).numpy()
    k = 64
    res = deep_gemm.fp8_paged_mqa_topk(q, kv_cache, w, lens, bt, k, sorted=True, return_values=True,
                                       return_slot_ids=True)
    idx, val, slots = host(res.indices), host(res.values), host(res.slot_ids)
    ref.topk_is_valid(idx, want.numpy(), k, None, ends, atol=topk_tol(want))
    live = idx >= 0
    picked = np.take_along_axis(want.numpy(), np.where(live, idx, 0), axis=1)
    np.testing.assert_allclose(val[live], picked[live], rtol=1e-4, atol=logits_atol(want))
    np.testing.assert_array_equal(slots, ref.slot_ids(idx, c.block_table.numpy(), 32, next_n=2))
    for r in range(idx.shape[0]):
        n = int(live[r].sum())
        assert live[r, :n].all() and np.all(np.diff(val[r, :n]) <= 0), f"row {r}: sorted, live entries first"
    plain = deep_gemm.fp8_paged_mqa_topk(q, kv_cache, w, lens, bt, k)
    assert plain.values is None and plain.slot_ids is None
    ref.topk_is_valid(host(plain.indices), want.numpy(), k, None, ends, atol=topk_tol(want))


def _fp4_paged_case(seed, dev, B=2, N=2, H=16, D=128, S=32, lens=(100, 45)):
    """MXFP4 keys and queries (reference codecs) in DeepGEMM's [num_blocks, block_kv, 1, D / 2 + 4]."""
    rng = np.random.default_rng(seed)
    ppr = -(-max(lens) // S)
    num_blocks = B * ppr + 1
    pages = np.zeros((num_blocks, S * (D // 2 + 4)), np.uint8)
    block_table = rng.permutation(num_blocks)[:B * ppr].reshape(B, ppr).astype(np.int32)
    t = np.arange(ppr * S)
    slots = np.concatenate([np.where(t < lens[b], block_table[b, t // S] * S + t % S, -1) for b in range(B)])
    keys = rng.standard_normal((len(slots), D)).astype(np.float32)
    pages = ref.write_indexer_cache(keys, slots, pages, S, D, "mxfp4")
    qv, qs = ref.mxfp4_quant(rng.standard_normal((B, N, H, D)).astype(np.float32), D)
    w = rng.standard_normal((B * N, H)).astype(np.float32)
    lens2 = np.array([[max(L - N + j + 1, 0) for j in range(N)] for L in lens], np.int32)
    want = ref.paged_mqa_logits(qv, w, pages, S, D, block_table, lens2, format="mxfp4", q_scales=qs,
                                max_context=ppr * S)
    kv = put(pages, dev).view(num_blocks, S, 1, D // 2 + 4)
    return (put(qv, dev).view(torch.int8), put(qs, dev)), kv, put(w, dev), put(lens2, dev), put(block_table, dev), want


@pytest.mark.parametrize("dev", DEVICES)
def test_deep_gemm_fp4_paged_mqa_logits(dev):
    q, kv, w, lens, bt, want = _fp4_paged_case(7, dev)
    got = host(deep_gemm.fp8_fp4_paged_mqa_logits(q, kv, w, lens, bt, None, want.shape[1], clean_logits=True))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=logits_atol(want))
    assert np.all(got[~fin] == -np.inf)


# ------------------------------------------------------------------ DeepGEMM, prefill
@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("max_seqlen_k", [0, 64])
def test_deep_gemm_fp8_mqa_logits(dev, max_seqlen_k):
    g = torch.Generator().manual_seed(3)
    M, H, D, Nk = 6, 32, 64, 150
    q = torch.randn((M, H, D), generator=g).to(torch.float8_e4m3fn)
    k = torch.randn((Nk, D), generator=g).to(torch.float8_e4m3fn)
    k_sf = torch.empty(Nk).uniform_(0.5, 2.0, generator=g)
    w = torch.randn((M, H), generator=g)
    ks = torch.tensor([0, 0, 10, 40, 149, 100], dtype=torch.int32)
    ke = torch.tensor([1, 64, 70, 40, 150, 150], dtype=torch.int32)
    full = torch.full((M, Nk), float("-inf"), dtype=torch.float64)
    for m in range(M):
        s = torch.relu(q[m].double() @ k[ks[m]:ke[m]].double().T)
        full[m, ks[m]:ke[m]] = (w[m].double() @ s) * k_sf[ks[m]:ke[m]].double()
    if max_seqlen_k:
        want = torch.full((M, max_seqlen_k), float("-inf"), dtype=torch.float64)
        for m in range(M):
            want[m, :ke[m] - ks[m]] = full[m, ks[m]:ke[m]]
    else:
        want = full
    args = [x.to(dev) for x in (q, k, k_sf, w, ks, ke)]
    got = deep_gemm.fp8_mqa_logits(args[0], (args[1], args[2].view(Nk, 1)), args[3], args[4], args[5],
                                   clean_logits=True, max_seqlen_k=max_seqlen_k)
    assert got.dtype == torch.float32 and tuple(got.shape) == tuple(want.shape) and got.stride(1) == 1
    fin = torch.isfinite(want)
    g64 = got.cpu().double()
    torch.testing.assert_close(g64[fin], want[fin], rtol=1e-4, atol=logits_atol(want))
    assert bool((g64[~fin] == float("-inf")).all())


@pytest.mark.parametrize("dev", DEVICES)
def test_deep_gemm_fp4_mqa_logits(dev):
    rng = np.random.default_rng(8)
    M, H, D, Nk = 4, 16, 128, 50
    qv, qs = ref.mxfp4_quant(rng.standard_normal((M, H, D)).astype(np.float32), D)
    kv, kvs = ref.mxfp4_quant(rng.standard_normal((Nk, D)).astype(np.float32), D)
    w = rng.standard_normal((M, H)).astype(np.float32)
    ks, ke = np.array([0, 5, 20, 49], np.int32), np.array([50, 30, 20, 50], np.int32)
    want = ref.mqa_logits(qv, w, kv, kvs, ks, ke, head_dim=D, format="mxfp4", q_scales=qs)
    got = host(deep_gemm.fp8_fp4_mqa_logits((put(qv, dev), put(qs, dev)), (put(kv, dev), put(kvs, dev)), put(w, dev),
                                            put(ks, dev), put(ke, dev), logits_dtype=torch.float32))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=logits_atol(want))
    assert np.all(got[~fin] == -np.inf)


def test_deep_gemm_bad_arguments_name_the_function():
    c = PagedFp8(seed=1, B=1, N=1, H=16, D=128, block_kv=16, lens=(20,), pad=0)
    q, kv_cache, w, lens, bt = c.args("cpu")
    with pytest.raises(ValueError, match=r"deep_gemm.fp8_paged_mqa_logits: kv_cache shape expected "
                                         r"\[num_blocks, block_kv, 1, 132\]"):
        deep_gemm.fp8_paged_mqa_logits(q, kv_cache[..., :130], w, lens, bt, None, 32)
    with pytest.raises(ValueError, match=r"get_paged_mqa_logits_metadata: context_lens expected int32 "
                                         r"\[batch, next_n\]"):
        deep_gemm.get_paged_mqa_logits_metadata(lens.view(-1), 16, 132)
    with pytest.raises(ValueError, match="get_paged_mqa_logits_metadata: num_sms expected > 2, got 2"):
        deep_gemm.get_paged_mqa_logits_metadata(lens, 16, 2)
    with pytest.raises(ValueError, match=r"schedule_meta expected a contiguous int32 \[num_sms \+ 1, 2\]"):
        deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt, torch.zeros((3, 2), dtype=torch.int32), 32)
    with pytest.raises(ValueError, match=r"indices expected int32 \[1\] with next_n 1"):
        deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt, None, 32,
                                       indices=torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="fp8_paged_mqa_logits: max_context_len expected >= 0, got -1"):
        deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt, None, -1)
    with pytest.raises(TypeError, match=r"fp8_mqa_logits: kv expected a pair \(values, scales\)"):
        deep_gemm.fp8_mqa_logits(q[0], kv_cache, w, lens, lens)
    # What dsattn itself refuses keeps its message (the op and the argument).
    with pytest.raises(ValueError, match="paged_mqa_logits: .*block_table"):
        deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt.to(torch.int64), None, 32)


# ------------------------------------------------------------------ FlashMLA, sparse decode
def _flashmla_lse(lse_bsh: np.ndarray) -> np.ndarray:
    """dsattn.reference's lse [b, s_q, h_q] in FlashMLA's convention: [b, h_q, s_q], +inf where a
    query has no valid index."""
    out = np.where(np.isneginf(lse_bsh), np.inf, lse_bsh)
    return np.ascontiguousarray(out.transpose(0, 2, 1))


def _flashmla_cache(pages: np.ndarray, P: int, token_bytes: int, dev) -> torch.Tensor:
    """FlashMLA's [num_blocks, P, 1, token_bytes] view of (padded) pages."""
    t = put(pages, dev)
    return t[:, :P * token_bytes].view(t.shape[0], P, 1, token_bytes)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("fmt", ["v32_fp8", "v4_fp8"])
def test_flash_mla_with_kvcache_sparse(dev, fmt):
    token_bytes = 656 if fmt == "v32_fp8" else 584
    c = mla_case(seed=12, B=3, Sq=2, Hq=64, topk=40, P=64, num_pages=3, fmt=fmt, extra=fmt == "v4_fp8", sink=True)
    extra_len = np.array([8, 0, 3], np.int32)  # mla_case leaves query b = 1 no main index
    extra = None if c.extra_pages is None else dict(pages=c.extra_pages, tokens_per_page=c.extra_P,
                                                   indices=c.extra_indices, topk_length=extra_len, format=fmt)
    want_out, want_lse = ref.sparse_mla_decode(c.q, c.pages, c.P, c.indices, sm_scale=c.sm_scale, format=fmt,
                                               topk_length=c.topk_length, extra=extra, attn_sink=c.attn_sink)
    assert np.isneginf(want_lse).any(), "the case has a query with no valid index"

    meta, splits = flash_mla.get_mla_metadata(torch.zeros(3, dtype=torch.int32), 2 * 64, 1, 64, True, 40)
    assert splits is None
    kw = dict(attn_sink=put(c.attn_sink, dev), topk_length=put(c.topk_length, dev))
    if extra is not None:
        kw.update(extra_k_cache=_flashmla_cache(c.extra_pages, c.extra_P, token_bytes, dev),
                  extra_indices_in_kvcache=put(c.extra_indices, dev), extra_topk_length=put(extra_len, dev))
    q = put(c.q, dev, "bf16")
    k_cache = _flashmla_cache(c.pages, c.P, token_bytes, dev).view(torch.float8_e4m3fn)
    for _ in range(2):  # the same sched_meta reused across calls of one configuration
        out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, meta, None, None, False, True,
                                                    indices=put(c.indices, dev), **kw)
        assert out.dtype == torch.bfloat16 and tuple(out.shape) == (3, 2, 64, 512) and out.device.type == dev
        assert lse.dtype == torch.float32 and tuple(lse.shape) == (3, 64, 2)
        np.testing.assert_allclose(ref.bf16_to_f32(host(out)), want_out, rtol=2.0 ** -7, atol=4e-3)
        np.testing.assert_allclose(host(lse), _flashmla_lse(want_lse), rtol=1e-4, atol=1e-4)
    # softmax_scale None is FlashMLA's 1 / sqrt(d_qk): mla_case's scale.
    out2, _ = flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, flash_mla.get_mla_metadata()[0],
                                               is_fp8_kvcache=True, indices=put(c.indices, dev), **kw)
    assert torch.equal(out2, out)


def test_flash_mla_refusals():
    c = mla_case(seed=2, B=1, Sq=1, Hq=16, topk=8, P=16, num_pages=2, fmt="v32_fp8")
    q, ind = put(c.q, "cpu", "bf16"), put(c.indices, "cpu")
    cache = _flashmla_cache(c.pages, 16, 656, "cpu")
    meta = flash_mla.get_mla_metadata()[0]
    with pytest.raises(NotImplementedError, match="flash_mla_with_kvcache: dense attention"):
        flash_mla.flash_mla_with_kvcache(q, cache, torch.zeros((1, 2), dtype=torch.int32),
                                         torch.ones(1, dtype=torch.int32), 512, meta, is_fp8_kvcache=True)
    with pytest.raises(ValueError, match="is_fp8_kvcache expected True"):
        flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, indices=ind)
    with pytest.raises(ValueError, match=r"k_cache shape expected \[num_blocks, page_block_size, 1, 656\]"):
        flash_mla.flash_mla_with_kvcache(q, cache[..., :584], None, None, 512, meta, is_fp8_kvcache=True,
                                         indices=ind)
    with pytest.raises(TypeError, match="tile_scheduler_metadata expected the FlashMLASchedMeta"):
        flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, torch.zeros(4), is_fp8_kvcache=True, indices=ind)
    flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, is_fp8_kvcache=True, indices=ind)
    with pytest.raises(ValueError, match=r"first used with topk \(indices.shape\[-1\]\) 8, this call has 4"):
        flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, is_fp8_kvcache=True,
                                         indices=ind[..., :4].contiguous())
    with pytest.raises(ValueError, match=r"kv \[s_kv, h_kv, d_qk\] and indices \[s_q, h_kv, topk\] expected h_kv 1"):
        flash_mla.flash_mla_sparse_fwd(q[0], torch.zeros((5, 2, 576), dtype=torch.bfloat16),
                                       ind[0].view(1, 1, 8).expand(1, 2, 8), 0.1)


# ------------------------------------------------------------------ FlashMLA, sparse prefill
@pytest.mark.parametrize("dev", DEVICES)
def test_flash_mla_sparse_fwd(dev):
    rng = np.random.default_rng(21)
    s_q, h_q, d_qk, s_kv, topk = 5, 16, 512, 70, 24
    q = ref.f32_to_bf16(rng.standard_normal((s_q, h_q, d_qk)).astype(np.float32))
    kv = ref.f32_to_bf16(rng.standard_normal((s_kv, d_qk)).astype(np.float32))
    ind = rng.integers(-1, s_kv + 20, (s_q, topk)).astype(np.int32)     # >= s_kv: none, as in FlashMLA
    ind[4] = s_kv                                                      # a query with no valid index
    tl = np.array([topk, 10, 0, topk, topk], np.int32)
    sink = rng.standard_normal(h_q).astype(np.float32)
    ind_ref = np.where(ind >= s_kv, -1, ind)
    want_out, want_lse = ref.sparse_mla_prefill(q, kv, ind_ref, sm_scale=0.04, topk_length=tl, attn_sink=sink)

    args = (put(q, dev, "bf16"), put(kv, dev, "bf16").view(s_kv, 1, d_qk), put(ind, dev).view(s_q, 1, topk), 0.04)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(*args, attn_sink=put(sink, dev), topk_length=put(tl, dev))
    assert max_logits is None
    assert tuple(out.shape) == (s_q, h_q, 512) and tuple(lse.shape) == (s_q, h_q)
    np.testing.assert_allclose(ref.bf16_to_f32(host(out)), want_out, rtol=2.0 ** -7, atol=4e-3)
    want_lse = np.where(np.isneginf(want_lse), np.inf, want_lse)
    np.testing.assert_allclose(host(lse), want_lse, rtol=1e-4, atol=1e-4)
    assert np.isinf(want_lse[2]).all() and np.isinf(want_lse[4]).all()

    # max_logits on request: max of sm_scale * q.k over each query's valid indices (-inf without).
    _, ml, _ = flash_mla.flash_mla_sparse_fwd(*args, topk_length=put(tl, dev), return_max_logits=True)
    qf, kf = ref.bf16_to_f32(q).astype(np.float64), ref.bf16_to_f32(kv).astype(np.float64)
    want_ml = np.full((s_q, h_q), -np.inf)
    for m in range(s_q):
        ids = ind_ref[m, :tl[m]]
        ids = ids[ids >= 0]
        if ids.size:
            want_ml[m] = (0.04 * qf[m] @ kf[ids].T).max(axis=1)
    np.testing.assert_allclose(host(ml), want_ml, rtol=1e-5, atol=1e-5)


def test_flash_mla_cache_of_padded_pages():
    """FlashMLA's V4 pages are padded to a multiple of 576 bytes: the [num_blocks, P, 1, 584] view's
    first-dimension stride is the page stride."""
    rng = np.random.default_rng(0)
    pages = _latent_pages(rng, 2, 8, "v4_fp8")
    view = _flashmla_cache(pages, 8, 584, "cpu")
    assert view.stride(0) == pages.shape[1] == 5184 and view.shape[1:] == (8, 1, 584)


# ------------------------------------------------------------------ CUDA graphs, as engines capture decode
@pytest.mark.skipif(not HAVE_CUDA, reason="needs torch with CUDA and a CUDA build of dsattn")
def test_compat_decode_step_in_a_cuda_graph():
    """An engine's captured decode step: the schedule copied into a kept [num_sms + 1, 2] buffer,
    DeepGEMM-style paged logits, FlashMLA-style sparse decode over slot ids; replayed with new
    context lengths and indices written into the captured inputs."""
    from cases import capture_graph

    dev, num_sms = "cuda", deep_gemm.get_num_sms()
    c = PagedFp8(seed=13, B=3, N=1, H=64, D=128, block_kv=64, lens=(700, 700, 700), pad=0)
    q, kv_cache, w, lens, bt = c.args(dev)
    kept = torch.zeros((num_sms + 1, 2), dtype=torch.int32, device=dev)
    m = mla_case(seed=14, B=3, Sq=1, Hq=64, topk=32, P=64, num_pages=3, fmt="v32_fp8", sink=True)
    mq, k_cache = put(m.q, dev, "bf16"), _flashmla_cache(m.pages, m.P, 656, dev)
    ind, tl, sink = put(m.indices, dev), put(m.topk_length, dev), put(m.attn_sink, dev)
    sched = flash_mla.get_mla_metadata()[0]

    def step():
        kept.copy_(deep_gemm.get_paged_mqa_logits_metadata(lens, 64, num_sms))
        logits = deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt, kept, 704, True)
        out, lse = flash_mla.flash_mla_with_kvcache(mq, k_cache, None, None, 512, sched, softmax_scale=m.sm_scale,
                                                    is_fp8_kvcache=True, indices=ind, attn_sink=sink, topk_length=tl)
        return logits, out, lse

    graph, (logits, out, lse) = capture_graph(step)
    rng = np.random.default_rng(15)
    for new_lens in ((700, 1, 350), (0, 640, 699)):
        c.context_lens = torch.tensor(new_lens, dtype=torch.int32).view(3, 1)
        lens.copy_(c.context_lens)
        m.indices = rng.integers(-1, 3 * 64, m.indices.shape).astype(np.int32)
        ind.copy_(put(m.indices, dev))
        graph.replay()
        torch.cuda.synchronize()
        want = c.want(704)
        fin = torch.isfinite(want)
        g = logits.cpu().double()
        torch.testing.assert_close(g[fin], want[fin], rtol=1e-4, atol=logits_atol(want))
        assert bool((g[~fin] == float("-inf")).all())
        want_out, want_lse = m.ref()
        np.testing.assert_allclose(ref.bf16_to_f32(host(out)), want_out, rtol=2.0 ** -7, atol=4e-3)
        np.testing.assert_allclose(host(lse.contiguous()), _flashmla_lse(want_lse), rtol=1e-4, atol=1e-4)
