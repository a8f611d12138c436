"""torch.ops.dsattn.* (dsattn.torch_ops): every op against dsattn.reference on the CPU (and, where
torch has CUDA and dsattn was built with it, on the GPU), torch.library.opcheck of every op
(schema, fake-tensor implementation, AOT dispatch), torch.compile(fullgraph=True) of a decode step,
and on the GPU a torch.cuda.graph capture with no stream or workspace passed. Skipped without torch
(>= 2.4)."""

import numpy as np
import pytest

import dsattn
from dsattn import reference as ref

from cases import (capture_graph, indexer_case, logits_atol, mla_case, mqa_case, prefill_case, to_host, to_torch,
                   topk_tol)

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"dsattn.torch_ops needs torch >= 2.4, this is {torch.__version__}", allow_module_level=True)

from dsattn import torch_ops  # noqa: E402  (registers torch.ops.dsattn.*)

ops = torch.ops.dsattn
HAVE_CUDA = torch.cuda.is_available() and dsattn.cuda_available()
DEVICES = ["cpu"] + (["cuda"] if HAVE_CUDA else [])
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="needs torch with CUDA and a CUDA build of dsattn")


put = to_torch
host = to_host


def _indexer_args(c, dev, fp8_dtype=True):
    q = put(c.q, dev, "fp8" if c.fmt == "fp8" and fp8_dtype else "")
    kw = dict(head_dim=c.D, cache_format=c.fmt)
    if c.q_scales is not None:
        kw["q_scales"] = put(c.q_scales, dev)
    if c.row_request is not None:
        kw["row_request"] = put(c.row_request, dev)
    return (q, put(c.weights, dev), put(c.pages, dev), put(c.block_table, dev), put(c.context_lens, dev), c.S), kw


# ------------------------------------------------------------------ the ops against the reference
@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("fmt,mode", [("fp8", "per_request"), ("mxfp4", "varlen")])
def test_paged_logits_and_fused_topk(dev, fmt, mode):
    c = indexer_case(seed=11, B=3, N=2, H=16, D=128, S=32, lens=(300, 0, 170), fmt=fmt, mode=mode)
    args, kw = _indexer_args(c, dev)
    want = c.ref_logits(max_context=320)
    ctx = c.row_ctx()

    logits = ops.paged_mqa_logits(*args, max_context=320, clean=True, **kw)
    assert logits.device.type == dev and logits.dtype == torch.float32 and tuple(logits.shape) == want.shape
    got = host(logits)
    for r, n in enumerate(ctx):
        np.testing.assert_allclose(got[r, :n], want[r, :n], rtol=1e-4, atol=logits_atol(want), err_msg=f"row {r}")
        assert np.all(got[r, n:] == -np.inf), f"row {r}: clean=True writes -inf beyond {n}"
    bf = ops.paged_mqa_logits(*args, max_context=320, logits_dtype=torch.bfloat16, **kw)
    assert bf.dtype == torch.bfloat16 and tuple(bf.shape) == want.shape

    # The out variant into a view of a row-padded buffer: the rows land there, the padding is untouched.
    buf = torch.full((want.shape[0], 384), 7.0, device=dev)
    assert ops.paged_mqa_logits_out(*args, buf[:, :320], clean=True, **kw) is None
    np.testing.assert_array_equal(host(buf[:, :320]), got)
    assert np.all(host(buf[:, 320:]) == 7.0)

    k = 64
    idx = ops.paged_mqa_topk(*args, k, **kw)
    assert idx.dtype == torch.int32 and tuple(idx.shape) == (want.shape[0], k)
    ref.topk_is_valid(host(idx), want, k, None, ctx, atol=topk_tol(want))

    # The out variant: indices, scores and slot ids into the caller's buffers.
    rows = want.shape[0]
    oi = torch.full((rows, k), -7, dtype=torch.int32, device=dev)
    ov = torch.zeros((rows, k), dtype=torch.float32, device=dev)
    osl = torch.full((rows, k), -7, dtype=torch.int32, device=dev)
    assert ops.paged_mqa_topk_out(*args, k, oi, ov, osl, sorted=True, **kw) is None
    i_np = host(oi)
    ref.topk_is_valid(i_np, want, k, None, ctx, atol=topk_tol(want))
    np.testing.assert_array_equal(host(osl), ref.slot_ids(i_np, c.block_table, c.S, next_n=c.next_n,
                                                          row_request=c.row_request))
    v_np, live = host(ov), i_np >= 0
    picked = np.take_along_axis(want, np.where(live, i_np, 0), axis=1)
    np.testing.assert_allclose(v_np[live], picked[live], rtol=1e-4, atol=logits_atol(want))
    for r in range(rows):  # sorted=True: the live entries first, their scores descending
        n = int(live[r].sum())
        assert live[r, :n].all() and np.all(np.diff(v_np[r, :n]) <= 0), f"row {r}"


@pytest.mark.parametrize("dev", DEVICES)
def test_topk_and_topk_out(dev):
    rng = np.random.default_rng(3)
    R, W, k = 5, 900, 100
    x = rng.standard_normal((R, W)).astype(np.float32)
    x[1, :] = 0.5                      # ties: the smaller index wins
    x[2, 10:20] = np.nan               # NaN below every number
    ends = np.array([900, 900, 900, 40, 0], np.int32)
    logits, e = put(x, dev), put(ends, dev)
    got = host(ops.topk(logits, k, ends=e, sorted=True))
    want, want_v = ref.topk(x, k, ends=ends)
    np.testing.assert_array_equal(got, want)

    bt = rng.permutation(40)[:10].reshape(1, 10).astype(np.int32).repeat(R, axis=0)
    oi = torch.empty((R, k), dtype=torch.int32, device=dev)
    ov = torch.empty((R, k), dtype=torch.float32, device=dev)
    osl = torch.empty((R, k), dtype=torch.int32, device=dev)
    ops.topk_out(logits, k, oi, ov, osl, ends=e, sorted=True, block_table=put(bt, dev), states_per_page=100)
    np.testing.assert_array_equal(host(oi), want)
    np.testing.assert_array_equal(host(osl), ref.slot_ids(want, bt, 100))
    np.testing.assert_array_equal(host(ov), want_v)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("compressed", [False, True])
def test_mqa_logits(dev, compressed):
    D = 128
    m = mqa_case(5, M=7, H=16, D=D, Nk=90)
    q, w, k, kscale = m.q, m.weights, m.k, m.k_scales
    ks = np.array([0, 0, 10, 40, 89, 50, 3], np.int32)
    ke = np.array([1, 90, 60, 40, 90, 90, 33], np.int32)
    args = (put(q, dev, "fp8"), put(w, dev), put(k, dev, "fp8"), put(kscale, dev), put(ks, dev), put(ke, dev))
    want = ref.mqa_logits(q, w, k, kscale, ks, ke, head_dim=D, compressed=compressed)
    width = want.shape[1] if compressed else -1
    got = host(ops.mqa_logits(*args, compressed=compressed, width=width, clean=True))
    assert got.shape == want.shape
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=logits_atol(want))
    assert np.all(got[~fin] == -np.inf)
    buf = torch.full((want.shape[0], want.shape[1] + 5), 7.0, device=dev)
    assert ops.mqa_logits_out(*args, buf[:, :want.shape[1]], compressed=compressed, clean=True) is None
    np.testing.assert_array_equal(host(buf[:, :want.shape[1]]), got)
    assert np.all(host(buf[:, want.shape[1]:]) == 7.0)
    if compressed:
        with pytest.raises(ValueError, match="mqa_logits: width expected >= 0 when compressed"):
            ops.mqa_logits(*args, compressed=True)


@pytest.mark.parametrize("dev", DEVICES)
def test_mqa_topk(dev):
    D, k = 128, 16
    m = mqa_case(15, M=9, H=16, D=D, Nk=300)
    ks = np.array([0, 0, 10, 40, 299, 50, 3, 100, 0], np.int32)
    ke = np.array([1, 300, 60, 40, 300, 290, 33, 300, 250], np.int32)
    args = (put(m.q, dev, "fp8"), put(m.weights, dev), put(m.k, dev, "fp8"), put(m.k_scales, dev), put(ks, dev),
            put(ke, dev))
    full = ref.mqa_logits(m.q, m.weights, m.k, m.k_scales, ks, ke, head_dim=D, compressed=True)
    for chunk_bytes in (3 * 4 * 300, 1 << 28):  # three rows per chunk; one chunk
        got = host(ops.mqa_topk(*args, k, 300, chunk_bytes=chunk_bytes))
        ref.topk_is_valid(got, full, k, None, ke - ks, atol=topk_tol(full))
    with pytest.raises(ValueError, match="mqa_topk: width expected >= 0"):
        ops.mqa_topk(*args, k, -1)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("fmt,extra", [("v4_fp8", True), ("v32_fp8", False)])
def test_sparse_mla_decode(dev, fmt, extra):
    c = mla_case(seed=4, B=2, Sq=1, Hq=16, topk=32, P=16, fmt=fmt, extra=extra, sink=True)
    kw = dict(topk_length=put(c.topk_length, dev), attn_sink=put(c.attn_sink, dev))
    if extra:
        kw.update(extra_pages=put(c.extra_pages, dev), extra_indices=put(c.extra_indices, dev),
                  extra_tokens_per_page=c.extra_P, extra_format=fmt)
    out, lse = ops.sparse_mla_decode(put(c.q, dev, "bf16"), put(c.pages, dev), put(c.indices, dev), c.sm_scale,
                                     c.P, cache_format=fmt, **kw)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (2, 1, 16, 512) and out.device.type == dev
    want_out, want_lse = c.ref()
    np.testing.assert_allclose(ref.bf16_to_f32(host(out)), want_out, rtol=2.0 ** -7, atol=4e-3)
    np.testing.assert_allclose(host(lse), want_lse, rtol=1e-4, atol=1e-4)

    # The out variant into a view of a wider buffer (an engine's output rows): the view is written,
    # the rest of the buffer is not.
    big = torch.full((2, 1, 16, 600), 7.0, dtype=torch.bfloat16, device=dev)
    o_lse = torch.empty((2, 1, 16), dtype=torch.float32, device=dev)
    assert ops.sparse_mla_decode_out(put(c.q, dev, "bf16"), put(c.pages, dev), put(c.indices, dev), c.sm_scale, c.P,
                                     big[..., :512], o_lse, cache_format=fmt, **kw) is None
    np.testing.assert_allclose(ref.bf16_to_f32(host(big[..., :512].contiguous())), want_out, rtol=2.0 ** -7,
                               atol=4e-3)
    np.testing.assert_allclose(host(o_lse), want_lse, rtol=1e-4, atol=1e-4)
    assert bool((big[..., 512:] == 7.0).all()), "bytes beyond the out view were written"


@pytest.mark.parametrize("dev", DEVICES)
def test_sparse_mla_prefill(dev):
    q, kv, ind, tl = prefill_case()
    out, lse = ops.sparse_mla_prefill(put(q, dev, "bf16"), put(kv, dev, "bf16"), put(ind, dev), 0.05,
                                      topk_length=put(tl, dev))
    want_out, want_lse = ref.sparse_mla_prefill(q, kv, ind, sm_scale=0.05, topk_length=tl)
    np.testing.assert_allclose(ref.bf16_to_f32(host(out)), want_out, rtol=2.0 ** -7, atol=4e-3)
    np.testing.assert_allclose(host(lse), want_lse, rtol=1e-4, atol=1e-4)
    o = torch.empty_like(out)
    o_lse = torch.empty_like(lse)
    ops.sparse_mla_prefill_out(put(q, dev, "bf16"), put(kv, dev, "bf16"), put(ind, dev), 0.05, o, o_lse,
                               topk_length=put(tl, dev))
    np.testing.assert_allclose(ref.bf16_to_f32(host(o)), want_out, rtol=2.0 ** -7, atol=4e-3)
    np.testing.assert_allclose(host(o_lse), want_lse, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dev", DEVICES)
def test_cache_writers_bit_exact(dev):
    rng = np.random.default_rng(6)
    S, T, D = 8, 20, 128
    k = (rng.standard_normal((T, D)) * 3).astype(np.float32)
    slots = rng.permutation(4 * S)[:T].astype(np.int64)
    slots[[2, 9]] = -1
    pages = rng.integers(0, 256, (4, S * (D + 4)), dtype=np.uint8)
    tp = put(pages, dev)
    assert ops.write_indexer_cache(put(k, dev), put(slots, dev), tp, S) is None
    np.testing.assert_array_equal(host(tp), ref.write_indexer_cache(k, slots, pages, S, D, "fp8"))

    P = 4
    kv = (rng.standard_normal((10, 512)) * 10).astype(np.float32)
    lslots = rng.permutation(3 * P)[:10].astype(np.int32)
    lslots[4] = -1
    lpages = rng.integers(0, 256, dsattn.latent_cache_shape(3, P, "v4_fp8"), dtype=np.uint8)
    tl = put(lpages, dev)
    ops.write_latent_cache(put(kv, dev), put(lslots, dev), tl, P)
    np.testing.assert_array_equal(host(tl), ref.write_latent_cache(kv, lslots, lpages, P, "v4_fp8"))


def test_bad_arguments_name_the_op():
    c = indexer_case(seed=1, B=1, N=1, H=8, D=128, S=16, lens=(20,))
    args, kw = _indexer_args(c, "cpu")
    with pytest.raises(ValueError, match="paged_mqa_logits: logits_dtype expected torch.float32 or torch.bfloat16"):
        ops.paged_mqa_logits(*args, logits_dtype=torch.float16, **kw)
    with pytest.raises(ValueError, match=r"paged_mqa_topk: q rank expected 4, got 2"):
        ops.paged_mqa_topk(args[0].reshape(8, 128), *args[1:], 4, **kw)
    # The library's own checks come through unchanged (here: k beyond 4096).
    with pytest.raises(ValueError, match="paged_mqa_topk: k"):
        ops.paged_mqa_topk(*args, 5000, **kw)
    # The fake implementations refuse the same shapes while tracing.
    with pytest.raises(Exception, match=r"sparse_mla_decode: q rank expected 4, got 3"):
        torch.compile(lambda q: ops.sparse_mla_decode(q, args[2], args[3], 0.1, 16), fullgraph=True,
                      backend="eager")(torch.zeros(2, 16, 512, dtype=torch.bfloat16))


def test_api_hands_torch_tensors_over_as_capsules():
    """dsattn.<op> with torch tensors: the extension gets DLPack capsules (to_dlpack, not torch's
    slower Python __dlpack__); a tensor to_dlpack cannot export goes over as it is, and the
    extension's refusal names the op."""
    from dsattn import _arrays

    t = torch.zeros(3, 4)
    assert type(_arrays.for_call(t)).__name__ == "PyCapsule"
    a = np.zeros(3)
    assert _arrays.for_call(a) is a and _arrays.for_call(None) is None and _arrays.for_call(5) == 5
    sparse = torch.zeros(4, 64).to_sparse()
    assert _arrays.for_call(sparse) is sparse
    with pytest.raises(TypeError, match=r"^topk: "):
        dsattn.topk(sparse, 8)
    # ... and the results are those of the tensors themselves (the capsule path end to end).
    x = torch.randn(5, 300)
    np.testing.assert_array_equal(host(dsattn.topk(x, 16, sorted=True).indices), ref.topk(x.numpy(), 16)[0])


# ------------------------------------------------------------------ opcheck
def _opcheck_cases(dev):
    c = indexer_case(seed=2, B=2, N=1, H=16, D=128, S=16, lens=(50, 33))
    # E4M3 as uint8 bit patterns: opcheck compares inputs with ops torch lacks for float8 on the CPU.
    args, kw = _indexer_args(c, dev, fp8_dtype=False)
    m = mla_case(seed=5, B=1, Sq=1, Hq=16, topk=8, P=16, num_pages=2)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)).to(dev)
    out_i = torch.empty((2, 8), dtype=torch.int32, device=dev)
    out_v = torch.empty((2, 8), dtype=torch.float32, device=dev)
    cases = [
        (ops.paged_mqa_logits, args, dict(kw, clean=True)),
        (ops.paged_mqa_logits_out, args + (torch.empty((2, 70), device=dev)[:, :64],), dict(kw, clean=True)),
        (ops.paged_mqa_topk, args + (8,), kw),
        (ops.paged_mqa_topk_out, args + (8, out_i, out_v, None), kw),
        (ops.topk, (x, 8), dict(sorted=True)),
        (ops.topk_out, (x, 8, torch.empty((3, 8), dtype=torch.int32, device=dev), None, None), {}),
        (ops.sparse_mla_decode, (put(m.q, dev, "bf16"), put(m.pages, dev), put(m.indices, dev), m.sm_scale, m.P),
         {}),
        (ops.sparse_mla_decode_out, (put(m.q, dev, "bf16"), put(m.pages, dev), put(m.indices, dev), m.sm_scale, m.P,
                                     torch.empty((1, 1, 16, 512), dtype=torch.bfloat16, device=dev),
                                     torch.empty((1, 1, 16), device=dev)), {}),
        (ops.sparse_mla_prefill, (put(m.q[0], dev, "bf16"), torch.zeros((20, 512), dtype=torch.bfloat16, device=dev),
                                  put(m.indices[0] % 20, dev), 0.1), {}),
        (ops.sparse_mla_prefill_out, (put(m.q[0], dev, "bf16"), torch.zeros((20, 512), dtype=torch.bfloat16,
                                                                            device=dev),
                                      put(m.indices[0] % 20, dev), 0.1,
                                      torch.empty((1, 16, 512), dtype=torch.bfloat16, device=dev),
                                      torch.empty((1, 16), device=dev)), {}),
        (ops.mqa_logits, (args[0][0], args[1][:1], put(c.q[1, 0], dev), torch.ones(16, device=dev),
                          torch.zeros(1, dtype=torch.int32, device=dev), torch.full((1,), 9, dtype=torch.int32,
                                                                                   device=dev)), dict(clean=True)),
        (ops.mqa_topk, (args[0][0], args[1][:1], put(c.q[1, 0], dev), torch.ones(16, device=dev),
                        torch.zeros(1, dtype=torch.int32, device=dev), torch.full((1,), 9, dtype=torch.int32,
                                                                                 device=dev), 4, 9), {}),
        (ops.mqa_logits_out, (args[0][0], args[1][:1], put(c.q[1, 0], dev), torch.ones(16, device=dev),
                              torch.zeros(1, dtype=torch.int32, device=dev),
                              torch.full((1,), 9, dtype=torch.int32, device=dev), torch.empty((1, 16), device=dev)),
         dict(clean=True)),
        (ops.write_indexer_cache, (torch.ones((3, 128), device=dev), torch.tensor([0, -1, 5], device=dev),
                                   torch.zeros((2, 16 * 132), dtype=torch.uint8, device=dev), 16), {}),
        (ops.write_latent_cache, (torch.ones((2, 512), device=dev), torch.tensor([1, 3], dtype=torch.int32,
                                                                                 device=dev),
                                  torch.zeros(dsattn.latent_cache_shape(1, 4, "v4_fp8"), dtype=torch.uint8,
                                              device=dev), 4), {}),
    ]
    if dev == "cuda":
        cases.append((ops.schedule_metadata, (args[4], c.S), {}))
    return cases


@pytest.mark.parametrize("dev", DEVICES)
def test_opcheck_every_op(dev):
    cases = _opcheck_cases(dev)
    checked = {op._qualified_op_name.split("::")[1] for op, _, _ in cases}
    assert checked | ({"schedule_metadata"} if dev == "cpu" else set()) == set(torch_ops.OPS)
    for op, args, kw in cases:
        torch.library.opcheck(op, args, kw)


# ------------------------------------------------------------------ torch.compile
def _decode_step(q, w, ipages, bt, lens, k_new, slots, lat_q, lpages, kv_new, lslots, S, P, k):
    """One layer's decode step as an engine writes it: both cache writes, the fused indexer + top-k,
    the selected states' slot ids, sparse MLA over them."""
    ops.write_indexer_cache(k_new, slots, ipages, S)
    ops.write_latent_cache(kv_new, lslots, lpages, P)
    idx = ops.paged_mqa_topk(q, w, ipages, bt, lens, S, k)
    rows = idx.shape[0]
    pos = idx.clamp(min=0)
    slot = torch.gather(bt, 1, torch.div(pos, S, rounding_mode="floor")) * S + pos % S
    slot = torch.where(idx >= 0, slot, torch.full_like(slot, -1)).to(torch.int32)
    out, lse = ops.sparse_mla_decode(lat_q, lpages, slot.view(rows, 1, k), 512 ** -0.5, P)
    return idx, out, lse


def _step_inputs(dev):
    rng = np.random.default_rng(12)
    S = P = 16
    c = indexer_case(seed=13, B=2, N=1, H=16, D=128, S=S, lens=(90, 60))
    k = 32
    num_pages = c.pages.shape[0]
    k_new = torch.from_numpy(rng.standard_normal((2, 128)).astype(np.float32)).to(dev)
    slots = torch.tensor([int(c.block_table[0, 89 // S]) * S + 89 % S, int(c.block_table[1, 59 // S]) * S + 59 % S],
                         dtype=torch.int64, device=dev)
    lpages = put(np.zeros(dsattn.latent_cache_shape(num_pages, P, "v4_fp8"), np.uint8), dev)
    dsattn.write_latent_cache(torch.from_numpy(rng.standard_normal((num_pages * P, 512)).astype(np.float32)).to(dev),
                              torch.arange(num_pages * P, dtype=torch.int32, device=dev),
                              dsattn.LatentCache(lpages, P),
                              stream=torch.cuda.current_stream() if dev == "cuda" else None)
    lat_q = put(ref.f32_to_bf16(rng.standard_normal((2, 1, 16, 512)).astype(np.float32)), dev, "bf16")
    kv_new = torch.from_numpy(rng.standard_normal((2, 512)).astype(np.float32)).to(dev)
    return (put(c.q, dev, "fp8"), put(c.weights, dev), put(c.pages, dev), put(c.block_table, dev),
            put(c.context_lens, dev), k_new, slots, lat_q, lpages, kv_new, slots.to(torch.int32), S, P, k)


@pytest.mark.parametrize("dev", DEVICES)
def test_compile_fullgraph_decode_step(dev):
    a = _step_inputs(dev)
    b = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in a)
    want = _decode_step(*a)
    torch._dynamo.reset()
    backend = "inductor" if dev == "cuda" else "aot_eager"
    got = torch.compile(_decode_step, fullgraph=True, backend=backend)(*b)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    assert torch.equal(b[2], a[2]) and torch.equal(b[8], a[8]), "the compiled step wrote the caches alike"
    # ... and the writes landed: the cache differs from a fresh copy of the inputs.
    fresh = _step_inputs(dev)
    assert not torch.equal(fresh[2], a[2]) and not torch.equal(fresh[8], a[8])


# ------------------------------------------------------------------ CUDA: stream and graph capture
@needs_cuda
def test_cuda_graph_capture_without_stream_or_workspace():
    """torch.cuda.graph() captures on a side stream with global capture mode: an op launched on the
    legacy default stream would fail the capture. The torch ops take the current stream, and their
    scratch comes from the graph's private pool."""
    S, k = 64, 128
    c = indexer_case(seed=8, B=4, N=1, H=32, D=128, S=S, lens=(1536,) * 4)
    q, w, pages, bt = put(c.q, "cuda", "fp8"), put(c.weights, "cuda"), put(c.pages, "cuda"), put(c.block_table, "cuda")
    lens = put(np.array([900, 64, 1500, 300], np.int32), "cuda")

    def step():
        meta = ops.schedule_metadata(lens, S)
        logits = ops.paged_mqa_logits(q, w, pages, bt, lens, S, schedule=meta)
        return ops.paged_mqa_topk(q, w, pages, bt, lens, S, k, schedule=meta), ops.topk(logits, k, ends=lens)

    graph, (fused, unfused) = capture_graph(step)
    for new_lens in ((900, 64, 1500, 300), (1, 0, 1536, 1024)):
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        lens_np = np.array(new_lens, np.int32)
        want = ref.paged_mqa_logits(c.q, c.weights, c.pages, S, 128, c.block_table, lens_np)
        ref.topk_is_valid(host(fused), want, k, None, lens_np, atol=topk_tol(want))
        ref.topk_is_valid(host(unfused), want, k, None, lens_np, atol=topk_tol(want))


@needs_cuda
def test_cuda_op_makes_the_tensors_device_current():
    """The torch ops run on the inputs' device whatever device is current (dsattn.<op> refuses such a
    call). Needs two GPUs."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = torch.randn(3, 500, device="cuda:1")
    with torch.cuda.device(0):
        got = ops.topk(x, 16, sorted=True)
    torch.cuda.synchronize(1)
    assert got.device == x.device
    assert torch.equal(got, torch.topk(x, 16).indices.to(torch.int32))


@needs_cuda
def test_compile_reduce_overhead_replays():
    """torch.compile(mode="reduce-overhead") (inductor's CUDA-graph trees) of the fused op: each of four
    calls with new context lengths returns a valid top-k for them, and inductor did not skip the
    CUDA graph (it counts each skip, e.g. for a CPU tensor or an input it cannot keep static)."""
    from torch._dynamo.utils import counters

    S, k = 64, 128
    c = indexer_case(seed=17, B=3, N=1, H=32, D=128, S=S, lens=(1200, 1200, 1200))
    q, w, pages, bt = put(c.q, "cuda", "fp8"), put(c.weights, "cuda"), put(c.pages, "cuda"), put(c.block_table, "cuda")
    torch._dynamo.reset()
    counters.clear()
    step = torch.compile(lambda q, w, pages, bt, lens: ops.paged_mqa_topk(q, w, pages, bt, lens, S, k),
                         mode="reduce-overhead", fullgraph=True)
    for new_lens in ((1200, 64, 700), (5, 1200, 129), (1200, 0, 1000), (300, 301, 302)):
        lens_np = np.array(new_lens, np.int32)
        got = host(step(q, w, pages, bt, put(lens_np, "cuda")))
        want = ref.paged_mqa_logits(c.q, c.weights, c.pages, S, 128, c.block_table, lens_np)
        ref.topk_is_valid(got, want, k, None, lens_np, atol=topk_tol(want))
    assert counters["inductor"]["cudagraph_skips"] == 0, "inductor skipped the CUDA graph"
