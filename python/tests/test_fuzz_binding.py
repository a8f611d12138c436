"""Randomized bad arguments through the Python binding, on the CPU backend: one argument of a valid
call of paged_mqa_logits, paged_mqa_topk, topk, write_indexer_cache, sparse_mla_decode or
schedule_metadata replaced by another dtype,
order, view (transposed, reversed, strided, more or fewer dimensions, empty), a 0-d array, a list,
a string, None, a read-only array where the op writes, or a byte-swapped array. Every call must
succeed or raise TypeError / ValueError whose message starts with the op's name (byte-swapped
arrays, 0-d arrays and read-only outputs always raise, naming the argument); it must not crash the
interpreter, write into a read-only array, or write into any input."""

import numpy as np
import pytest

import dsattn
from cases import indexer_case, mla_case


def _variants(x, rng):
    """Replacements for the array x (each a (name, value) pair)."""
    out = [("list", x.tolist()), ("string", "abc"), ("none", None), ("0-d", np.array(5, x.dtype)),
           ("empty", x[:0]), ("extra dim", x[None]), ("flat", x.reshape(-1)), ("reversed", x[::-1])]
    for dt in (np.float64, np.float16, np.int8, np.int64, np.uint16, np.bool_, np.complex64):
        out.append((f"as {np.dtype(dt).name}", x.astype(dt)))
    if x.ndim >= 2:
        out += [("transposed", x.T), ("fortran", np.asfortranarray(x)), ("strided", x[..., ::2]),
                ("first row", x[0])]
    if x.dtype.itemsize > 1:
        out.append(("byte-swapped", x.astype(x.dtype.newbyteorder())))
    ro = x.copy()
    ro.setflags(write=False)
    out.append(("read-only", ro))
    return out


def _calls(c):
    """The ops' valid calls on case c: name -> (function of a dict of arrays, the arrays, the
    arguments it writes)."""
    rows = c.weights.shape[0]
    width = c.block_table.shape[1] * c.S
    logits = np.random.default_rng(5).standard_normal((rows, width)).astype(np.float32)
    k_new = np.random.default_rng(6).standard_normal((3, c.D)).astype(np.float32)

    def cache(a):
        return dsattn.IndexerCache(a["pages"], c.S, c.D)

    def paged_logits(a):
        return dsattn.paged_mqa_logits(a["q"], a["weights"], cache(a), a["block_table"], a["context_lens"],
                                       logits=a["logits"], max_context=width, backend="cpu")

    def paged_topk(a):
        return dsattn.paged_mqa_topk(a["q"], a["weights"], cache(a), a["block_table"], a["context_lens"], 8,
                                     indices=a["indices"], backend="cpu")

    def topk(a):
        return dsattn.topk(a["logits"], 8, starts=a["starts"], ends=a["ends"], indices=a["indices"],
                           values=a["values"], backend="cpu")

    def writer(a):
        return dsattn.write_indexer_cache(a["k"], a["slot_mapping"], cache(a), backend="cpu")

    m = mla_case(seed=4, B=2, Sq=1, Hq=16, topk=8, P=4, num_pages=4, sink=True)
    b, sq, hq = m.q.shape[:3]

    def mla_decode(a):
        return dsattn.sparse_mla_decode(a["q"], dsattn.LatentCache(a["pages"], m.P, m.fmt), a["indices"],
                                        sm_scale=m.sm_scale, topk_length=a["topk_length"], attn_sink=a["attn_sink"],
                                        out=a["out"], lse=a["lse"], backend="cpu")

    def schedule(a):
        return dsattn.schedule_metadata(a["context_lens"], states_per_page=c.S, num_sms=4, metadata=a["metadata"],
                                        backend="cpu")

    # Prefill: the paged case's first request as the key array, rows' windows into it.
    rng = np.random.default_rng(7)
    nk = 30
    pq = c.q.reshape(-1, c.q.shape[-2], c.q.shape[-1])
    pk = rng.integers(0, 120, (nk, c.D)).astype(np.uint8)  # small E4M3 codes
    ks = rng.integers(0, nk // 2, rows).astype(np.int32)
    ke = (ks + rng.integers(0, nk // 2, rows)).astype(np.int32)

    def mqa(a):
        # compressed, width left to the binding (it reads max(ke - ks) back itself)
        return dsattn.mqa_logits(a["q"], a["weights"], a["k"], a["k_scales"], a["ks"], a["ke"], compressed=True,
                                 backend="cpu")

    def mla_prefill(a):
        return dsattn.sparse_mla_prefill(a["q"], a["kv"], a["indices"], sm_scale=0.05, out=a["out"], lse=a["lse"],
                                         backend="cpu")

    mq = np.random.default_rng(8).integers(0, 0x3f80, (2, 16, 512)).astype(np.uint16)  # bf16 bits, |x| < 1
    mkv = np.random.default_rng(9).integers(0, 0x3f80, (5, 512)).astype(np.uint16)
    midx = np.array([[0, 4, -1], [2, 2, 1]], np.int32)

    def latent_writer(a):
        return dsattn.write_latent_cache(a["kv"], a["slot_mapping"], dsattn.LatentCache(a["pages"], m.P, m.fmt),
                                         backend="cpu")

    paged = dict(q=c.q, weights=c.weights, pages=c.pages, block_table=c.block_table, context_lens=c.context_lens)
    return {
        "mqa_logits": (mqa, dict(q=pq, weights=c.weights, k=pk, k_scales=np.ones(nk, np.float32), ks=ks, ke=ke),
                       set()),
        "sparse_mla_prefill": (mla_prefill, dict(q=mq, kv=mkv, indices=midx, out=np.zeros((2, 16, 512), np.uint16),
                                                 lse=np.zeros((2, 16), np.float32)), {"out", "lse"}),
        "write_latent_cache": (latent_writer, dict(kv=np.random.default_rng(10).standard_normal((2, 512))
                                                   .astype(np.float32), slot_mapping=np.array([1, -1], np.int32),
                                                   pages=m.pages.copy()), {"pages"}),
        "sparse_mla_decode": (mla_decode, dict(q=m.q, pages=m.pages, indices=m.indices, topk_length=m.topk_length,
                                               attn_sink=m.attn_sink, out=np.zeros((b, sq, hq, 512), np.uint16),
                                               lse=np.zeros((b, sq, hq), np.float32)), {"out", "lse"}),
        "schedule_metadata": (schedule, dict(context_lens=c.context_lens,
                                             metadata=np.zeros(dsattn.schedule_metadata_size(4), np.int32)),
                              {"metadata"}),
        "paged_mqa_logits": (paged_logits, dict(paged, logits=np.zeros((rows, width), np.float32)), {"logits"}),
        "paged_mqa_topk": (paged_topk, dict(paged, indices=np.zeros((rows, 8), np.int32)), {"indices"}),
        "topk": (topk, dict(logits=logits, starts=np.zeros(rows, np.int32), ends=np.full(rows, width, np.int32),
                            indices=np.zeros((rows, 8), np.int32), values=np.zeros((rows, 8), np.float32)),
                 {"indices", "values"}),
        "write_indexer_cache": (writer, dict(k=k_new, slot_mapping=np.array([0, 5, -1], np.int32), pages=c.pages.copy()),
                                {"pages"}),
    }


@pytest.mark.parametrize("op", ["paged_mqa_logits", "paged_mqa_topk", "topk", "write_indexer_cache",
                                "sparse_mla_decode", "schedule_metadata", "mqa_logits", "sparse_mla_prefill",
                                "write_latent_cache"])
def test_bad_arguments_raise_naming_the_op(op):
    c = indexer_case(seed=3, B=2, N=1, H=8, D=64, S=16, lens=(20, 35))
    fn, arrays, written = _calls(c)[op]
    fn({k: v.copy() for k, v in arrays.items()})  # the unmutated call is valid
    rng = np.random.default_rng(11)
    failed = 0
    for name in arrays:
        for what, bad in _variants(arrays[name], rng):
            a = {k: v.copy() for k, v in arrays.items()}
            a[name] = bad
            before = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in a.items()}
            arg = "cache.pages" if name == "pages" else name
            try:
                fn(a)
            except (TypeError, ValueError) as e:
                failed += 1
                assert str(e).startswith(op + ": "), f"{op}: {name} {what}: the message does not name the op: {e}"
                if what == "byte-swapped":
                    assert f"{op}: {arg} byte order expected native" in str(e), str(e)
                if what == "read-only" and name in written:
                    assert f"{op}: {arg} expected a writable array, got a read-only one" in str(e), str(e)
            else:
                assert what not in ("byte-swapped", "0-d") and not (what == "read-only" and name in written), \
                    f"{op}: {name} {what} was accepted"
            for k, v in a.items():
                if not isinstance(v, np.ndarray) or v.dtype.kind == "c":
                    continue
                if k not in written or not v.flags.writeable:
                    assert np.array_equal(v, before[k], equal_nan=v.dtype.kind == "f"), \
                        f"{op}: {name} {what}: {k} was written ({'read-only' if not v.flags.writeable else 'input'})"
    assert failed > 0
