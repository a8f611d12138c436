"""Random test problems built with dsattn.reference only (numpy, host), and the two helpers that move
them to torch and back (torch is imported only by those)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dsattn import reference as ref


@dataclass
class IndexerCase:
    q: np.ndarray             # uint8 E4M3 [B, N, H, D] (varlen [R, H, D]) or packed E2M1 [.., H, D/2]
    q_scales: object          # int32 [.., H] (mxfp4) or None
    weights: np.ndarray       # float32 [R, H]
    pages: np.ndarray         # uint8 [num_pages, stride]
    block_table: np.ndarray   # int32 [B, max_pages]
    context_lens: np.ndarray  # int32 [B], [B, N] or varlen [R]
    row_request: object       # int32 [R] or None
    S: int
    D: int
    fmt: str
    next_n: int
    keys: np.ndarray = field(repr=False, default=None)    # float32 [B, max_states, D]
    slots: np.ndarray = field(repr=False, default=None)   # int32 [B * max_states]

    def ref_logits(self, max_context=None):
        return ref.paged_mqa_logits(self.q, self.weights, self.pages, self.S, self.D, self.block_table,
                                    self.context_lens, format=self.fmt, q_scales=self.q_scales,
                                    row_request=self.row_request, max_context=max_context)

    def row_ctx(self):
        rows = self.weights.shape[0]
        return np.array([c for _, c in ref.row_contexts(self.context_lens, rows, self.next_n, self.row_request)],
                        np.int32)


def indexer_case(seed=0, B=2, N=1, H=16, D=128, S=64, lens=(70, 130), fmt="fp8", mode="per_request", pad=0,
                 spare_pages=2) -> IndexerCase:
    """Keys written by the reference writer into shuffled physical pages (page stride padded by
    `pad` bytes), unwritten bytes random (NaN codes included) so a read past a row's context shows.
    mode: "per_request" ([B] lengths with the N rule), "per_row" ([B, N]) or "varlen" (R = B * N
    flattened rows with row_request, rows of one request in reverse order)."""
    rng = np.random.default_rng(seed)
    lens = np.array(lens, np.int64)
    max_states = int(max(lens.max(), 1))
    ppr = -(-max_states // S)
    num_pages = B * ppr + spare_pages
    state_bytes = D + 4 if fmt == "fp8" else D // 2 + 4
    stride = S * state_bytes + pad
    pages = rng.integers(0, 256, (num_pages, stride), dtype=np.uint8)
    block_table = rng.permutation(num_pages)[: B * ppr].reshape(B, ppr).astype(np.int32)
    keys = (rng.standard_normal((B, max_states, D)) * rng.uniform(0.1, 4.0, (B, max_states, 1))).astype(np.float32)
    t = np.arange(max_states)
    slots = np.concatenate([np.where(t < lens[b], block_table[b, t // S] * S + t % S, -1) for b in range(B)])
    pages = ref.write_indexer_cache(keys.reshape(-1, D), slots, pages, S, D, fmt)
    qf = rng.standard_normal((B, N, H, D)).astype(np.float32)
    if fmt == "fp8":
        q, q_scales = ref.f32_to_e4m3(qf), None
    else:
        q, q_scales = ref.mxfp4_quant(qf, D)
    weights = rng.standard_normal((B * N, H)).astype(np.float32)
    row_request = None
    if mode == "per_request":
        context_lens = lens.astype(np.int32)
    elif mode == "per_row":
        context_lens = np.array([[max(int(lens[b]) - N + j + 1, 0) for j in range(N)] for b in range(B)], np.int32)
    else:
        order = np.array([b * N + j for b in range(B) for j in reversed(range(N))])
        q = q.reshape((B * N,) + q.shape[2:])[order]
        q_scales = None if q_scales is None else q_scales.reshape(B * N, H)[order]
        weights = weights[order]
        row_request = (order // N).astype(np.int32)
        context_lens = np.array([max(int(lens[r // N]) - N + r % N + 1, 0) for r in order], np.int32)
        N = 1
    return IndexerCase(np.ascontiguousarray(q), q_scales, weights, pages, block_table, context_lens, row_request,
                       S, D, fmt, N, keys, slots.astype(np.int32))


@dataclass
class MlaCase:
    q: np.ndarray            # uint16 bf16 [B, Sq, Hq, d_qk]
    pages: np.ndarray        # uint8 [num_pages, stride]
    P: int
    fmt: str
    indices: np.ndarray      # int32 [B, Sq, topk] slot ids, -1 holes
    topk_length: object      # int32 [B] or None
    extra_pages: object = None
    extra_P: int = 0
    extra_indices: object = None
    attn_sink: object = None
    sm_scale: float = 0.0

    def ref(self):
        extra = None
        if self.extra_pages is not None:
            extra = dict(pages=self.extra_pages, tokens_per_page=self.extra_P, indices=self.extra_indices,
                         format=self.fmt)
        return ref.sparse_mla_decode(self.q, self.pages, self.P, self.indices, sm_scale=self.sm_scale,
                                     format=self.fmt, topk_length=self.topk_length, extra=extra,
                                     attn_sink=self.attn_sink)


def _latent_pages(rng, num_pages, P, fmt, pad=0):
    stride = (((P * 584 + 575) // 576) * 576 if fmt == "v4_fp8" else P * 656) + pad
    dqk = 512 if fmt == "v4_fp8" else 576
    pages = np.zeros((num_pages, stride), np.uint8)
    kv = rng.standard_normal((num_pages * P, dqk)).astype(np.float32)
    return ref.write_latent_cache(kv, np.arange(num_pages * P), pages, P, fmt)


def mla_case(seed=0, B=2, Sq=1, Hq=16, topk=24, P=16, num_pages=6, fmt="v4_fp8", extra=False, sink=False,
             lengths=True) -> MlaCase:
    rng = np.random.default_rng(seed)
    dqk = 512 if fmt == "v4_fp8" else 576
    pages = _latent_pages(rng, num_pages, P, fmt)
    q = ref.f32_to_bf16(rng.standard_normal((B, Sq, Hq, dqk)).astype(np.float32))
    indices = rng.integers(0, num_pages * P, (B, Sq, topk)).astype(np.int32)
    indices[rng.random(indices.shape) < 0.2] = -1
    if B > 1:
        indices[1, 0, :] = -1  # a row with no valid index: zeros and lse -inf
    topk_length = rng.integers(topk // 2, topk + 1, B).astype(np.int32) if lengths else None
    c = MlaCase(q, pages, P, fmt, indices, topk_length, sm_scale=float(dqk) ** -0.5)
    if extra:
        c.extra_P = 8
        c.extra_pages = _latent_pages(rng, 3, 8, fmt)
        c.extra_indices = rng.integers(-1, 3 * 8, (B, Sq, 8)).astype(np.int32)
    if sink:
        c.attn_sink = rng.standard_normal(Hq).astype(np.float32)
    return c


@dataclass
class MqaCase:
    q: np.ndarray             # uint8 E4M3 [M, H, D] or packed E2M1 [M, H, D/2]
    q_scales: object          # int32 [M, H] (mxfp4) or None
    weights: np.ndarray       # float32 [M, H]
    k: np.ndarray             # uint8 E4M3 [Nk, D] or packed E2M1 [Nk, D/2]
    k_scales: np.ndarray      # float32 [Nk] (fp8) or int32 [Nk] (mxfp4)
    rng: np.random.Generator  # the generator, for the caller's further draws (e.g. its windows)


def mqa_case(seed, M, H, D, Nk, fmt="fp8") -> MqaCase:
    """A prefill-logits problem (SPEC 3.2): queries, weights and keys quantized by the reference
    codecs (fp8: per-key scales in [0.5, 2)); the caller picks the row windows ks / ke."""
    rng = np.random.default_rng(seed)
    qf = rng.standard_normal((M, H, D)).astype(np.float32)
    kf = rng.standard_normal((Nk, D)).astype(np.float32)
    if fmt == "fp8":
        q, qs = ref.f32_to_e4m3(qf), None
        k, kscale = ref.f32_to_e4m3(kf), rng.uniform(0.5, 2, Nk).astype(np.float32)
    else:
        q, qs = ref.mxfp4_quant(qf, D)
        k, kscale = ref.mxfp4_quant(kf, D)
    w = rng.standard_normal((M, H)).astype(np.float32)
    return MqaCase(q, qs, w, k, kscale, rng)


def prefill_case(seed=9, M=3, Hq=16, dqk=576, Nk=40, topk=12):
    """(q bf16 bits [M, Hq, dqk], kv bf16 bits [Nk, dqk], indices int32 [M, topk] with -1 holes,
    topk_length int32 [M]: a full row, a short one, an empty one (M = 3))."""
    rng = np.random.default_rng(seed)
    q = ref.f32_to_bf16(rng.standard_normal((M, Hq, dqk)).astype(np.float32))
    kv = ref.f32_to_bf16(rng.standard_normal((Nk, dqk)).astype(np.float32))
    ind = rng.integers(-1, Nk, (M, topk)).astype(np.int32)
    tl = np.array([topk, topk // 2 - 1, 0], np.int32)
    return q, kv, ind, tl


def topk_tol(want) -> float:
    """The top-k checks' bound (as in test_gpu.py): 1e-4 of the largest finite magnitude of the
    reference scores `want` (numpy or torch), at least 1e-4."""
    fin = np.abs(np.asarray(want)[np.isfinite(np.asarray(want))])
    return 1e-4 * max(float(fin.max(initial=1.0)), 1.0)


def logits_atol(want) -> float:
    """The logits' bound of test_gpu.py (with rtol 1e-4): 1e-3 of the largest finite magnitude; the
    GPU kernels sum the FP8 products in fp32 in another order than the reference's doubles."""
    return 10.0 * topk_tol(want)


def to_torch(x: np.ndarray, device: str, kind: str = ""):
    """Host numpy -> torch on `device`; kind "fp8" / "bf16": x holds E4M3 / bf16 bit patterns, viewed
    as torch.float8_e4m3fn / torch.bfloat16."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(x.view(np.int16) if kind == "bf16" else x)).to(device)
    if kind == "fp8":
        return t.view(torch.float8_e4m3fn)
    if kind == "bf16":
        return t.view(torch.bfloat16)
    return t


def to_host(t) -> np.ndarray:
    """torch -> host numpy; bf16 comes back as uint16 bit patterns."""
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(np.uint16)
    return t.cpu().numpy()


def capture_graph(step):
    """torch.cuda.graph capture of `step()` the way torch documents it: one warm-up run on a side
    stream, then the capture. Returns (graph, what the captured step returned)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out
