"""Randomized bad arguments through dsattn.compat (CPU): one tensor argument of a valid DeepGEMM- or
FlashMLA-style call replaced by another dtype, rank, view (transposed, strided, empty, reversed),
a Python list, a string or None. Every call must succeed or raise TypeError / ValueError /
NotImplementedError whose message names the compat function ("deep_gemm.<fn>: ...",
"flash_mla.<fn>: ...") or the dsattn op it calls ("paged_mqa_logits: ..."); never another
exception type (a torch error from inside the wrapper would be one), never a crash."""

import pytest

from cases import mla_case, to_torch

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"dsattn.compat needs torch >= 2.4, this is {torch.__version__}", allow_module_level=True)

from dsattn.compat import deep_gemm, flash_mla  # noqa: E402

from test_compat import PagedFp8  # noqa: E402


def _variants(x):
    """Replacements for tensor x: (name, value)."""
    out = [("list", x.tolist() if x.dtype not in (torch.float8_e4m3fn, torch.bfloat16) else [1, 2]),
           ("string", "abc"), ("none", None), ("empty", x[:0]), ("extra dim", x[None]),
           ("flat", x.reshape(-1)), ("0-d", x.reshape(-1)[0].clone())]
    for dt in (torch.float64, torch.float16, torch.int64, torch.int8, torch.bool):
        out.append((f"as {dt}", x.view(torch.uint8).to(dt) if x.dtype == torch.float8_e4m3fn else x.to(dt)))
    if x.dim() >= 2:
        out += [("transposed", x.transpose(0, 1)), ("strided", x[..., ::2]), ("first row", x[0]),
                ("reversed", x.flip(0))]
    return out


def _calls():
    c = PagedFp8(seed=3, B=2, N=1, H=16, D=128, block_kv=16, lens=(40, 20), pad=0)
    q, kv, w, lens, bt = c.args("cpu")
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 16, 8)
    g = torch.Generator().manual_seed(1)
    pq = torch.randn((3, 16, 64), generator=g).to(torch.float8_e4m3fn)
    pk = torch.randn((30, 64), generator=g).to(torch.float8_e4m3fn)
    m = mla_case(seed=2, B=2, Sq=1, Hq=16, topk=8, P=16, num_pages=2, fmt="v32_fp8")
    mq, ind = to_torch(m.q, "cpu", "bf16"), to_torch(m.indices, "cpu")
    kcache = to_torch(m.pages, "cpu").view(2, 16, 1, 656)
    kv2 = torch.randn((20, 1, 576), generator=g).to(torch.bfloat16)
    return {
        "deep_gemm.fp8_paged_mqa_logits": (
            lambda a: deep_gemm.fp8_paged_mqa_logits(a["q"], a["kv_cache"], a["weights"], a["context_lens"],
                                                     a["block_table"], a["schedule_meta"], 48),
            dict(q=q, kv_cache=kv, weights=w, context_lens=lens, block_table=bt, schedule_meta=meta),
            ("paged_mqa_logits",)),
        "deep_gemm.fp8_paged_mqa_topk": (
            lambda a: deep_gemm.fp8_paged_mqa_topk(a["q"], a["kv_cache"], a["weights"], a["context_lens"],
                                                   a["block_table"], 8, return_slot_ids=True),
            dict(q=q, kv_cache=kv, weights=w, context_lens=lens, block_table=bt), ("paged_mqa_topk",)),
        "deep_gemm.get_paged_mqa_logits_metadata": (
            lambda a: deep_gemm.get_paged_mqa_logits_metadata(a["context_lens"], 16, 8),
            dict(context_lens=lens), ("schedule_metadata",)),
        "deep_gemm.fp8_mqa_logits": (
            lambda a: deep_gemm.fp8_mqa_logits(a["q"], (a["k"], a["k_scales"]), a["weights"], a["ks"], a["ke"]),
            dict(q=pq, k=pk, k_scales=torch.ones(30), weights=torch.randn((3, 16), generator=g),
                 ks=torch.tensor([0, 3, 10], dtype=torch.int32), ke=torch.tensor([5, 30, 10], dtype=torch.int32)),
            ("mqa_logits",)),
        "flash_mla.flash_mla_with_kvcache": (
            lambda a: flash_mla.flash_mla_with_kvcache(a["q"], a["k_cache"], None, None, 512,
                                                       flash_mla.get_mla_metadata()[0], is_fp8_kvcache=True,
                                                       indices=a["indices"], topk_length=a["topk_length"]),
            dict(q=mq, k_cache=kcache, indices=ind, topk_length=torch.tensor([8, 3], dtype=torch.int32)),
            ("sparse_mla_decode",)),
        "flash_mla.flash_mla_sparse_fwd": (
            lambda a: flash_mla.flash_mla_sparse_fwd(a["q"], a["kv"], a["indices"], 0.1),
            dict(q=mq[0], kv=kv2, indices=(ind[0] % 20).view(1, 1, 8).contiguous()),
            ("sparse_mla_prefill",)),
    }


@pytest.mark.parametrize("name", list(_calls()))
def test_bad_arguments_raise_named_errors(name):
    fn, args, ops = _calls()[name]
    fn(args)  # the valid call runs
    short = name.split(".")[1]
    tried = 0
    for arg, x in args.items():
        for vname, v in _variants(x):
            bad = dict(args, **{arg: v})
            tried += 1
            try:
                fn(bad)
            except (TypeError, ValueError, NotImplementedError) as e:
                msg = str(e)
                assert msg.startswith(name) or msg.startswith(short) or any(msg.startswith(op) for op in ops), \
                    f"{arg} {vname}: {type(e).__name__} does not name the function: {msg}"
            except Exception as e:  # noqa: BLE001 (any other type is the failure under test)
                pytest.fail(f"{name}: {arg} {vname} raised {type(e).__name__}: {e}")
    assert tried >= 12 * len(args)
