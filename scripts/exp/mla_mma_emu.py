#!/usr/bin/env python3
"""CPU emulation of the tensor-core sparse-MLA decode kernel (src/cuda/common/mla_mma_kernel.cuh),
written while no GPU was lent (2026-12-05) to check its index logic before it first runs:

a phase-by-phase transliteration of the kernel and of sparse_mla_combine_kernel, with ldmatrix,
ldmatrix.trans and mma.m16n8k16 emulated from the PTX ISA's fragment layouts (the chunks staged
by cp.async, the token-reference ring, the split over the indices, online softmax, the bf16 rounding of P, the
epilogues) for 16 / 32 / 64 heads per CTA and both cache formats, on caches written by
dsattn.reference (decode) and on bf16 kv rows (prefill), checked against
dsattn.reference.sparse_mla_decode / sparse_mla_prefill with the error model of
tests/gpu/test_gpu_sparse_mla.cpp.

It checks the arithmetic of indices and phases against the documented layouts, not the hardware:
races, alignment and the instructions themselves are what the GPU tests are for. It mirrors the
kernel by hand, so a change to the kernel needs the same change here. Needs numpy; ~45 s.
Usage: python3 scripts/exp/mla_mma_emu.py
"""
import importlib.util
import math
import pathlib

import numpy as np

_REF = pathlib.Path(__file__).resolve().parents[2] / "python" / "dsattn" / "reference.py"
_spec = importlib.util.spec_from_file_location("dsattn_reference", _REF)
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)


def ldsm_x4(mem, addr_fn, trans=False):
    # mem: 2D array [rows][cols] of values; addr_fn(lane)->(row,col) start of 8-elem line
    regs=[[None]*4 for _ in range(32)]
    lines=[addr_fn(l) for l in range(32)]
    for j in range(4):
        mat=np.array([[mem[lines[8*j+r][0], lines[8*j+r][1]+c] for c in range(8)] for r in range(8)])
        for l in range(32):
            if not trans: regs[l][j]=(mat[l//4,2*(l%4)], mat[l//4,2*(l%4)+1])
            else: regs[l][j]=(mat[2*(l%4),l//4], mat[2*(l%4)+1,l//4])
    return regs
def mma(C,A,B0,B1):
    # C: list per lane of 4 floats; A: per lane 4 pairs; B0,B1 per lane pairs
    Am=np.zeros((16,16));Bm=np.zeros((16,8))
    for l in range(32):
        g,t=l//4,l%4
        Am[g,2*t:2*t+2]=A[l][0];Am[g+8,2*t:2*t+2]=A[l][1];Am[g,2*t+8:2*t+10]=A[l][2];Am[g+8,2*t+8:2*t+10]=A[l][3]
        Bm[2*t:2*t+2,g]=B0[l];Bm[2*t+8:2*t+10,g]=B1[l]
    R=Am@Bm
    for l in range(32):
        g,t=l//4,l%4
        C[l][0]+=R[g,2*t];C[l][1]+=R[g,2*t+1];C[l][2]+=R[g+8,2*t];C[l][3]+=R[g+8,2*t+1]


def out_cells(NW, HM, DW):
    """Each P V accumulator of the kernel: (warp, m-tile, n-tile, lane, accumulator c) and the head
    (within the CTA's group) and output dim it holds (the m16n8 C fragment layout)."""
    for w in range(NW):
        for mt in range(HM):
            for n in range(DW // 8):
                for l in range(32):
                    for c in range(4):
                        yield w, mt, n, l, c, 16 * mt + (l >> 2) + 8 * (c >> 1), w * DW + 8 * n + 2 * (l & 3) + (c & 1)


def bf16r(x):  # round float32 -> bf16 value (scalar or array)
    a = ref.bf16_to_f32(ref.f32_to_bf16(np.atleast_1d(np.asarray(x, np.float32))))
    return float(a[0]) if np.ndim(x) == 0 else a
f32 = np.float32

def run(fmt, P, pages, idx, lens, epages, eP, eidx, elens, q, sink, sm_scale, HM, splits_forced, num_sms=132, T=32):
    V4 = fmt == "v4_fp8"
    BF = fmt.startswith("bf16")  # prefill: pages = a bf16 kv [Nk, D] as bytes, P = 1 (MlaSrc::kBf16D*)
    if BF:
        D = int(fmt[4:]); nope = D - 64; blockd = 64; nb = nope // blockd
        nopeCh = 0; CH = D // 8; scaleCh = -1; rope0 = 0; rawdim0 = 0; recB = 2 * D
    else:
        nope = 448 if V4 else 512; D = nope + 64; blockd = 64 if V4 else 128; nb = nope // blockd
        nopeCh = nope // 16; CH = nopeCh + 9; scaleCh = nopeCh + 8 if V4 else nopeCh; rope0 = nopeCh if V4 else nopeCh + 1
        rawdim0 = nope; recB = 576 if V4 else 656
    HG = 16 * HM; NW = 4 * HM; NT = 32 * NW; SR = T + 8; NL = (T * CH + NT - 1) // NT; TW = T // 4; NTW = TW // 8
    B, Sq, Hq, _ = q.shape
    rows = B * Sq
    topk = idx.shape[2]; etopk = eidx.shape[2] if eidx is not None else 0
    # plan (mla_plan.h)
    ntiles_max = (topk + etopk + T - 1) // T
    splits = splits_forced
    if splits == 0:
        ctas = max(1, rows * (Hq // HG)); per = {1: 3, 2: 2, 4: 1}[HM]
        splits = min(num_sms * per // ctas, ntiles_max // (128 // T), 64)
    tps = 1 << 30; nsplit = 1
    if splits > 1 and ntiles_max > 1:
        tps = (ntiles_max + splits - 1) // splits; nsplit = (ntiles_max + tps - 1) // tps
    out = np.full((B, Sq, Hq, 512), np.nan, np.float32); lse = np.full((B, Sq, Hq), np.nan, np.float32)
    part_o = np.zeros((rows * Hq, nsplit, 512), np.float32); part_ml = np.zeros((rows * Hq, nsplit, 2), np.float32)
    caches = [(pages.reshape(pages.shape[0], -1), P), (None if epages is None else epages.reshape(epages.shape[0], -1), eP)]
    def used_length(L, tk, b):
        if L is None: return tk
        v = int(L[b]); return 0 if v < 0 else min(v, tk)
    def load_index(b, s, lm, tot, j):
        if j < lm: return 0, int(idx[b, s, j])
        if j < tot: return 1, int(eidx[b, s, j - lm])
        return -1, -1
    def make_ref(which, i):
        if which < 0: return None
        pg, PP = caches[which]
        if i < 0 or i >= pg.shape[0] * PP: return None
        page, off = divmod(i, PP)
        rec = (which, page, off * recB)
        scl = (which, page, PP * 576 + off * 8) if V4 else (which, page, off * recB + 512)
        return rec, scl
    def read(loc, n):
        which, page, off = loc
        return caches[which][0][page, off:off + n]
    for row in range(rows):
        b, s = divmod(row, Sq)
        lm = used_length(lens, topk, b); le = used_length(elens, etopk, b) if etopk > 0 else 0
        tot = lm + le; ntiles = (tot + T - 1) // T
        for gy in range(Hq // HG):
            h0 = gy * HG
            for z in range(nsplit):
                tb = z * tps if nsplit > 1 else 0
                te = min(ntiles, tb + tps) if nsplit > 1 else ntiles
                q_s = np.zeros((HG, D + 8)); q_s[:, :D] = ref.bf16_to_f32(q[b, s, h0:h0 + HG])
                k_s = np.full((T, D + 8), np.nan); s_s = np.full((HG, SR), np.nan); sc_s = np.full((T, 8), 1.0 if BF else np.nan)
                alpha_s = np.full(HG, np.nan)
                ref_s = [[None] * T, [None] * T]
                pend = [None] * T
                for lane in range(T):  # lane + 32 r
                    ref_s[0][lane] = make_ref(*load_index(b, s, lm, tot, tb * T + lane))
                    pend[lane] = load_index(b, s, lm, tot, (tb + 1) * T + lane)
                # the staging area (cp.async): stale bytes (0xFF: E4M3 NaN) where nothing is copied
                raw = np.full(T * CH * 16, 0xFF, np.uint8)
                def issue(slot):
                    for tid in range(NT):
                        for i in range(NL):
                            c = tid + i * NT
                            if c < T * CH:
                                tok, part = divmod(c, CH); r = ref_s[slot][tok]
                                if r is not None:
                                    if V4 and part == scaleCh: raw[16 * c:16 * c + 8] = read(r[1], 8)
                                    else:
                                        which, page, off = r[0]; raw[16 * c:16 * c + 16] = read((which, page, off + 16 * part), 16)
                def store(slot):
                    for tid in range(NT):
                        for i in range(NL):
                            c = tid + i * NT
                            if c < T * CH:
                                tok, part = divmod(c, CH); v = np.zeros(16, np.uint8)
                                if ref_s[slot][tok] is not None:
                                    if V4 and part == scaleCh: v[:8] = raw[16 * c:16 * c + 8]
                                    else: v = raw[16 * c:16 * c + 16].copy()
                                if part < nopeCh: k_s[tok, 16 * part:16 * part + 16] = ref.e4m3_to_f32(v)
                                elif part == scaleCh:
                                    if V4:
                                        sc_s[tok, :7] = ref.ue8m0_to_f32(v[:7]); sc_s[tok, 7] = 1.0
                                    else: sc_s[tok, :4] = v.view("<f4")
                                else:
                                    d = rawdim0 + 8 * (part - rope0)
                                    k_s[tok, d:d + 8] = ref.bf16_to_f32(v.view("<u2"))
                if tb < te: issue(0)
                o = np.zeros((NW, HM, 512 // NW // 8, 32, 4))
                m_run = np.full(NT, -np.inf, np.float32); l_run = np.zeros(NT, np.float32)
                for j in range(tb, te):
                    slot = (j - tb) & 1
                    store(slot)
                    if j + 1 < te:
                        for lane in range(T):
                            ref_s[slot ^ 1][lane] = make_ref(*pend[lane])
                            pend[lane] = load_index(b, s, lm, tot, (j + 2) * T + lane)
                    # --- sync1
                    if j + 1 < te: issue(slot ^ 1)
                    for w in range(NW):
                        mt, tg = w >> 2, w & 3
                        def ksteps(acc, k0):
                            a0 = ldsm_x4(q_s, lambda l: (16 * mt + (l & 15), (l >> 4) * 8 + k0))
                            a1 = ldsm_x4(q_s, lambda l: (16 * mt + (l & 15), (l >> 4) * 8 + k0 + 16))
                            for n in range(NTW):
                                bb = ldsm_x4(k_s, lambda l: (TW * tg + 8 * n + (l & 7), (l >> 3) * 8 + k0))
                                mma(acc[n], a0, [x[0] for x in bb], [x[1] for x in bb]); mma(acc[n], a1, [x[2] for x in bb], [x[3] for x in bb])
                        sacc = [[[0.0] * 4 for _ in range(32)] for _ in range(NTW)]
                        for blk in range(nb):
                            cc = [[[0.0] * 4 for _ in range(32)] for _ in range(NTW)]
                            for kk in range(blockd // 32): ksteps(cc, blk * blockd + 32 * kk)
                            for n in range(NTW):
                                for l in range(32):
                                    tok0 = TW * tg + 8 * n + 2 * (l & 3)
                                    sc0, sc1 = sc_s[tok0, blk], sc_s[tok0 + 1, blk]
                                    sa, cn = sacc[n][l], cc[n][l]
                                    sa[0] += cn[0] * sc0; sa[1] += cn[1] * sc1; sa[2] += cn[2] * sc0; sa[3] += cn[3] * sc1
                        ksteps(sacc, nope); ksteps(sacc, nope + 32)
                        for n, l in ((n, l) for n in range(NTW) for l in range(32)):
                            g, t4 = l >> 2, l & 3; tok0 = TW * tg + 8 * n + 2 * t4
                            u0 = ref_s[slot][tok0] is not None; u1 = ref_s[slot][tok0 + 1] is not None
                            qk = sm_scale * 1.4426950408889634
                            sa = sacc[n][l]
                            s_s[16 * mt + g, tok0] = sa[0] * qk if u0 else -np.inf
                            s_s[16 * mt + g, tok0 + 1] = sa[1] * qk if u1 else -np.inf
                            s_s[16 * mt + g + 8, tok0] = sa[2] * qk if u0 else -np.inf
                            s_s[16 * mt + g + 8, tok0 + 1] = sa[3] * qk if u1 else -np.inf
                    # --- sync2: softmax
                    for h in range(HG):
                        v = s_s[h, :T].copy(); tids = range(8 * h, 8 * h + 8)
                        mx = np.max(v); m_old = m_run[8 * h]
                        m_new = max(m_old, mx)
                        if m_new != -np.inf:
                            alpha = 2.0 ** (m_old - m_new); p = 2.0 ** (v - m_new)
                        else:
                            alpha = 1.0; p = np.zeros(T)
                        for t in tids:
                            l_run[t] = l_run[t] * alpha + np.sum(p); m_run[t] = m_new
                        s_s[h, :T] = p; alpha_s[h] = alpha
                    # --- sync3: PV
                    DW = 512 // NW; SUB = min(DW, blockd); NSUB = DW // SUB
                    for w in range(NW):
                        d0 = w * DW
                        for mt in range(HM):
                            for n in range(DW // 8):
                                for l in range(32):
                                    g = l >> 2
                                    o[w, mt, n, l, 0] *= alpha_s[16 * mt + g]; o[w, mt, n, l, 1] *= alpha_s[16 * mt + g]
                                    o[w, mt, n, l, 2] *= alpha_s[16 * mt + g + 8]; o[w, mt, n, l, 3] *= alpha_s[16 * mt + g + 8]
                        for ks in range(T // 16):
                            for sb in range(NSUB):
                                dsub = d0 + sb * SUB; blk = dsub // blockd
                                pa = []
                                for mt in range(HM):
                                    A = []
                                    for l in range(32):
                                        g, t4 = l >> 2, l & 3; ta = 16 * ks + 2 * t4; r0 = 16 * mt + g; r1 = r0 + 8
                                        c0, c1, c2, c3 = sc_s[ta, blk], sc_s[ta + 1, blk], sc_s[ta + 8, blk], sc_s[ta + 9, blk]
                                        A.append(((bf16r(s_s[r0, ta] * c0), bf16r(s_s[r0, ta + 1] * c1)),
                                                  (bf16r(s_s[r1, ta] * c0), bf16r(s_s[r1, ta + 1] * c1)),
                                                  (bf16r(s_s[r0, ta + 8] * c2), bf16r(s_s[r0, ta + 9] * c3)),
                                                  (bf16r(s_s[r1, ta + 8] * c2), bf16r(s_s[r1, ta + 9] * c3))))
                                    pa.append(A)
                                for np_ in range(SUB // 16):
                                    n0 = dsub + 16 * np_
                                    vb = ldsm_x4(k_s, lambda l: (16 * ks + (l & 7) + ((l >> 3) & 1) * 8, n0 + (l >> 4) * 8), trans=True)
                                    ni = (sb * SUB + 16 * np_) // 8
                                    for mt in range(HM):
                                        accA = [list(o[w, mt, ni, l]) for l in range(32)]; accB = [list(o[w, mt, ni + 1, l]) for l in range(32)]
                                        mma(accA, pa[mt], [x[0] for x in vb], [x[1] for x in vb]); mma(accB, pa[mt], [x[2] for x in vb], [x[3] for x in vb])
                                        o[w, mt, ni] = np.array(accA); o[w, mt, ni + 1] = np.array(accB)
                # epilogue
                DW = 512 // NW
                if nsplit > 1:
                    row_h = row * Hq + h0
                    for h in range(HG): part_ml[row_h + h, z] = (m_run[8 * h], l_run[8 * h])
                    for w, mt, n, l, c, h, d in out_cells(NW, HM, DW):
                        part_o[row_h + h, z, d] = o[w, mt, n, l, c]
                    continue
                for h in range(HG):
                    L = l_run[8 * h]; M = m_run[8 * h]
                    lse[b, s, h0 + h] = (M + math.log2(L)) * math.log(2) if L > 0 else -np.inf
                for w, mt, n, l, c, h, d in out_cells(NW, HM, DW):
                    L = l_run[8 * h]; f = 0.0
                    if L > 0:
                        f = 1.0 / L
                        if sink is not None: f *= 1.0 / (1.0 + math.exp(sink[h0 + h] - (m_run[8 * h] + math.log2(L)) * math.log(2)))
                    out[b, s, h0 + h, d] = bf16r(o[w, mt, n, l, c] * f) if L > 0 else 0.0
    if nsplit > 1:  # combine
        for rh in range(rows * Hq):
            row, h = divmod(rh, Hq); b, s = divmod(row, Sq)
            M = np.max(part_ml[rh, :, 0]); L = 0.0; acc = np.zeros(512)
            if M != -np.inf:
                for zz in range(nsplit):
                    w_ = 2.0 ** (part_ml[rh, zz, 0] - M); L += part_ml[rh, zz, 1] * w_
                    if w_ > 0: acc += part_o[rh, zz] * w_
            if L > 0:
                l_ = (M + math.log2(L)) * math.log(2); f = 1.0 / L
                if sink is not None: f *= 1.0 / (1.0 + math.exp(sink[h] - l_))
                out[b, s, h] = bf16r(acc * f); lse[b, s, h] = l_
            else:
                out[b, s, h] = 0.0; lse[b, s, h] = -np.inf
    return out, lse, nsplit

def case(fmt, seed, B, Sq, Hq, P, npages, topk, HM, splits, extra=False, lengths=True, sink=True, T=32):
    rng = np.random.default_rng(seed)
    dqk = 512 if fmt == "v4_fp8" else 576
    stride = (((P * 584 + 575) // 576) * 576 if fmt == "v4_fp8" else P * 656)
    pages = ref.write_latent_cache(rng.standard_normal((npages * P, dqk)).astype(np.float32) * 0.5, np.arange(npages * P),
                                   np.zeros((npages, stride), np.uint8), P, fmt)
    q = ref.f32_to_bf16(rng.standard_normal((B, Sq, Hq, dqk)).astype(np.float32) * 0.7)
    idx = rng.integers(0, npages * P, (B, Sq, topk)).astype(np.int32); idx[rng.random(idx.shape) < 0.15] = -1
    if B > 1: idx[1, 0, :] = -1
    lens = rng.integers(0, topk + 1, B).astype(np.int32) if lengths else None
    if lengths: lens[0] = topk
    ep = eidx = elens = None; eP = 8
    if extra:
        ep = ref.write_latent_cache(rng.standard_normal((3 * eP, dqk)).astype(np.float32), np.arange(3 * eP),
                                    np.zeros((3, (((eP * 584 + 575) // 576) * 576 if fmt == "v4_fp8" else eP * 656)), np.uint8), eP, fmt)
        eidx = rng.integers(-1, 3 * eP, (B, Sq, 9)).astype(np.int32)
        if B > 1: eidx[1, 0, :] = -1
        elens = rng.integers(0, 10, B).astype(np.int32) if lengths else None
    sk = rng.standard_normal(Hq).astype(np.float32) if sink else None
    sm = dqk ** -0.5
    out, lse, ns = run(fmt, P, pages, idx, lens, ep, eP, eidx, elens, q, sk, sm, HM, splits, T=T)
    want, wl = ref.sparse_mla_decode(q, pages, P, idx, sm_scale=sm, format=fmt, topk_length=lens,
                                     extra=None if not extra else dict(pages=ep, tokens_per_page=eP, indices=eidx, topk_length=elens),
                                     attn_sink=sk)
    assert not np.isnan(out).any() and not np.isnan(lse).any()
    emp = np.isinf(wl)
    assert np.array_equal(np.isinf(lse), emp) and (out[emp] == 0).all()
    assert np.allclose(lse[~emp], wl[~emp], rtol=2e-5, atol=2e-5), np.abs(lse - wl)[~emp].max()
    # A_d = sum p |v| / sum p from the reference's dequantized tokens (the C++ test's model)
    A = np.zeros_like(want, dtype=np.float64)
    qf = ref.bf16_to_f32(q).astype(np.float64)
    for b in range(q.shape[0]):
        for s_ in range(q.shape[1]):
            keys = [ref.latent_token(pages, i, P, fmt) for i in ref._valid(idx[b, s_], None if lens is None else lens[b])]
            if extra:
                keys += [ref.latent_token(ep, i, eP, fmt) for i in ref._valid(eidx[b, s_], None if elens is None else elens[b])]
            if not keys: continue
            K = np.array(keys, np.float64)
            for h in range(q.shape[2]):
                sc = sm * (K @ qf[b, s_, h]); pp = np.exp(sc - sc.max())
                A[b, s_, h] = (pp @ np.abs(K[:, :512])) / pp.sum()
    err = np.abs(out - want)[~emp]
    tol = np.maximum(np.abs(out), np.abs(want))[~emp] * 2.0 ** -8 + 1.05 * 2.0 ** -8 * A[~emp]
    print("   worst err / tol", (err / tol).max())
    print(fmt, "B", B, "Sq", Sq, "Hq", Hq, "HM", HM, "T", T, "splits", ns, "max err", err.max(), "ok" if (err <= tol).all() else "FAIL")
    assert (err <= tol).all(), "outputs outside the error model"

def prefill_case(D, seed, M, Hq, Nk, topk, HM, splits, T=32):
    rng = np.random.default_rng(seed)
    kv = ref.f32_to_bf16(rng.standard_normal((Nk, D)).astype(np.float32) * 0.6)
    q = ref.f32_to_bf16(rng.standard_normal((M, Hq, D)).astype(np.float32) * 0.6)
    idx = rng.integers(-1, Nk, (M, topk)).astype(np.int32)
    idx[2 % M, :] = -1
    lens = rng.integers(0, topk + 1, M).astype(np.int32); lens[0] = topk
    sk = rng.standard_normal(Hq).astype(np.float32)
    sm = D ** -0.5
    pages = kv.astype("<u2").view(np.uint8).reshape(Nk, 2 * D)
    out, lse, ns = run("bf16%d" % D, 1, pages, idx[:, None, :], lens, None, 1, None, None, q[:, None], sk, sm, HM, splits, T=T)
    want, wl = ref.sparse_mla_prefill(q, kv, idx, sm_scale=sm, topk_length=lens, attn_sink=sk)
    out, lse = out[:, 0], lse[:, 0]
    emp = np.isinf(wl)
    assert not np.isnan(out).any() and np.array_equal(np.isinf(lse), emp) and (out[emp] == 0).all()
    assert np.allclose(lse[~emp], wl[~emp], rtol=2e-5, atol=2e-5)
    kvf = ref.bf16_to_f32(kv).astype(np.float64); qf = ref.bf16_to_f32(q).astype(np.float64)
    A = np.zeros_like(want, dtype=np.float64)
    for m in range(M):
        K = kvf[ref._valid(idx[m], lens[m])]
        if len(K) == 0: continue
        for h in range(Hq):
            sc = sm * (K @ qf[m, h]); pp = np.exp(sc - sc.max())
            A[m, h] = (pp @ np.abs(K[:, :512])) / pp.sum()
    err = np.abs(out - want)[~emp]
    tol = np.maximum(np.abs(out), np.abs(want))[~emp] * 2.0 ** -8 + 1.05 * 2.0 ** -8 * A[~emp]
    print("   worst err / tol", (err / tol).max())
    print("prefill bf16 D", D, "M", M, "Hq", Hq, "HM", HM, "T", T, "splits", ns, "max err", err.max(), "ok" if (err <= tol).all() else "FAIL")
    assert (err <= tol).all(), "outputs outside the error model"


if __name__ == "__main__":
    case("v4_fp8", 1, 2, 1, 32, 16, 8, 70, 2, 0, extra=True)
    case("v32_fp8", 2, 2, 2, 16, 16, 8, 45, 1, 0, extra=True)
    case("v4_fp8", 3, 3, 1, 32, 16, 8, 200, 2, 3, extra=True)
    case("v32_fp8", 4, 1, 1, 64, 64, 4, 150, 4, 0)
    case("v4_fp8", 5, 1, 1, 64, 2, 64, 130, 1, 2, extra=True)
    case("v4_fp8", 6, 1, 2, 64, 16, 8, 90, 4, 0, lengths=False, sink=False)
    case("v32_fp8", 7, 2, 1, 64, 32, 4, 100, 2, 0, extra=True)
    prefill_case(576, 8, 3, 32, 300, 96, 2, 0)
    prefill_case(512, 9, 3, 16, 200, 96, 1, 2)
    prefill_case(576, 10, 2, 64, 200, 70, 4, 2)
    # 64 tokens per tile (the default at 64 heads per CTA; DSATTN_MLA_TILE=64 elsewhere)
    case("v32_fp8", 11, 2, 1, 64, 16, 8, 150, 4, 2, extra=True, T=64)
    case("v4_fp8", 12, 1, 1, 64, 64, 4, 300, 4, 0, T=64)
    case("v4_fp8", 13, 2, 2, 16, 16, 8, 100, 1, 0, extra=True, T=64)
    case("v32_fp8", 14, 1, 1, 32, 2, 64, 70, 2, 0, lengths=False, sink=False, T=64)
    prefill_case(512, 15, 2, 32, 200, 140, 2, 2, T=64)
