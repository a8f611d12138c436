"""dsattn.reference against values computed by hand from SPEC.md (no C++ involved): the tests of
the oracle the other tests lean on."""

import math

import numpy as np
import pytest

from dsattn import reference as ref


def test_e4m3_decode_known_codes():
    got = ref.e4m3_to_f32(np.array([0x00, 0x01, 0x07, 0x08, 0x38, 0x39, 0x40, 0x7E, 0xB8, 0x80], np.uint8))
    want = [0.0, 2.0 ** -9, 7 * 2.0 ** -9, 2.0 ** -6, 1.0, 1.125, 2.0, 448.0, -1.0, -0.0]
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert np.isnan(ref.e4m3_to_f32(np.array([0x7F, 0xFF], np.uint8))).all()


def test_e4m3_encode_rounding_and_saturation():
    x = np.array([1.0, 1.0625, 1.1875, 448.0, 460.0, 1e9, np.inf, -1.0, 2.0 ** -10, 1.5 * 2.0 ** -10,
                  7.5 * 2.0 ** -9, 0.0, -0.0], np.float32)
    # 1.0625 is halfway 1.0 (0x38) / 1.125 (0x39): even 0x38; 1.1875 halfway 0x39 / 0x3A: 0x3A;
    # 2^-10 is halfway 0 / 2^-9: even 0; 7.5 * 2^-9 halfway 0x07 / 0x08: 0x08.
    want = [0x38, 0x38, 0x3A, 0x7E, 0x7E, 0x7E, 0x7E, 0xB8, 0x00, 0x01, 0x08, 0x00, 0x80]
    np.testing.assert_array_equal(ref.f32_to_e4m3(x), np.array(want, np.uint8))
    assert ref.f32_to_e4m3(np.array([np.nan], np.float32))[0] & 0x7F == 0x7F


def test_e4m3_roundtrip_every_finite_code():
    codes = np.array([c for c in range(256) if (c & 0x7F) != 0x7F], np.uint8)
    np.testing.assert_array_equal(ref.f32_to_e4m3(ref.e4m3_to_f32(codes)), codes)


def test_ue8m0():
    np.testing.assert_array_equal(ref.ue8m0_to_f32(np.array([127, 128, 120], np.uint8)), [1.0, 2.0, 2.0 ** -7])
    assert np.isnan(ref.ue8m0_to_f32(np.array([255], np.uint8))[0])
    x = np.array([1.0, 1.5, 2.0, 0.0, -3.0, 2.0 ** -130, 2.0 ** 127, 0.75, np.inf, np.nan], np.float32)
    np.testing.assert_array_equal(ref.ue8m0_ceil(x), np.array([127, 128, 128, 127, 127, 0, 254, 127, 254, 255], np.uint8))


def test_e2m1():
    np.testing.assert_array_equal(ref.e2m1_to_f32(np.arange(8)), [0, 0.5, 1, 1.5, 2, 3, 4, 6])
    np.testing.assert_array_equal(ref.e2m1_to_f32(np.array([9, 15])), [-0.5, -6])
    x = np.array([0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 100.0, -1.0], np.float32)
    np.testing.assert_array_equal(ref.f32_to_e2m1(x), np.array([0, 1, 2, 2, 4, 4, 6, 6, 7, 0xA], np.uint8))


def test_bf16():
    np.testing.assert_array_equal(ref.f32_to_bf16(np.array([1.0, -2.0, 0.0], np.float32)), [0x3F80, 0xC000, 0])
    # 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: even (1.0); 1 + 3 * 2^-8 rounds up.
    np.testing.assert_array_equal(ref.f32_to_bf16(np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8], np.float32)),
                                  [0x3F80, 0x3F82])
    np.testing.assert_array_equal(ref.bf16_to_f32(np.array([0x3F80, 0x4040], np.uint16)), [1.0, 3.0])


def test_mxfp4_quant_dequant_by_hand():
    x = np.zeros(64, np.float32)
    x[0], x[1], x[33] = 3.0, -1.5, 12.0
    packed, sc = ref.mxfp4_quant(x, 64)
    # block 0: amax 3 -> scale 2^ceil(log2(0.5)) = 0.5 (e = 126): 3 / 0.5 = 6 (code 7), -3 (code 0xD)
    # block 1: amax 12 -> scale 2 (e = 128): 12 / 2 = 6 (code 7) at element 33 (high nibble of byte 16)
    assert packed[0] == 0xD7 and packed[16] == 0x70
    assert int(sc) & 0xFFFF == 126 | (128 << 8) and (int(sc) >> 16) == 0
    np.testing.assert_array_equal(ref.mxfp4_dequant(packed, sc, 64), x)


def _fp8_page(S, D, stride, vals, scales):
    page = np.zeros(stride, np.uint8)
    page[: S * D] = ref.f32_to_e4m3(np.asarray(vals, np.float32)).reshape(-1)
    page[S * D : S * D + 4 * S] = np.asarray(scales, "<f4").view(np.uint8)
    return page


def test_paged_logits_by_hand():
    # D = 2, H = 2, S = 2 states per page, two pages stored in reverse order.
    S, D = 2, 2
    p0 = _fp8_page(S, D, 12, [[1, 1], [2, 0]], [2.0, 0.5])    # states 2, 3 of the request
    p1 = _fp8_page(S, D, 12, [[1, -1], [0, 4]], [1.0, 1.0])   # states 0, 1
    pages = np.stack([p0, p1])
    q = ref.f32_to_e4m3(np.array([[[1, 2], [-1, 0]]], np.float32)).reshape(1, 1, 2, 2)
    w = np.array([[0.5, 2.0]], np.float32)
    bt = np.array([[1, 0]], np.int32)
    got = ref.paged_mqa_logits(q, w, pages, S, D, bt, np.array([3], np.int32), max_context=5)
    # state 0: k=[1,-1]: h0 relu(1-2)=0, h1 relu(-1)=0 -> 0
    # state 1: k=[0,4]:  h0 8 -> 0.5*8 = 4; h1 0 -> 4
    # state 2: k=[1,1]*2: h0 3 -> 1.5, h1 relu(-1)=0 -> 2 * 1.5 = 3
    np.testing.assert_array_equal(got, np.array([[0, 4, 3, -np.inf, -np.inf]], np.float32))


def test_row_contexts_rule():
    # [B] lengths with N = 2: row j sees L - N + j + 1, clamped at 0
    assert ref.row_contexts(np.array([5, 0]), 4, 2) == [(0, 4), (0, 5), (1, 0), (1, 0)]
    assert ref.row_contexts(np.array([[1, 2]]), 2, 2) == [(0, 1), (0, 2)]
    assert ref.row_contexts(np.array([7, 3]), 2, 1, row_request=np.array([1, 0])) == [(1, 7), (0, 3)]


def test_topk_by_hand():
    nan = np.nan
    x = np.array([[1, 5, 5, nan, 3, 0],
                  [nan, nan, 2, nan, nan, nan],
                  [9, 8, 7, 6, 5, 4]], np.float32)
    idx, val = ref.topk(x, 3, starts=np.array([0, 0, 3]), ends=np.array([6, 6, 5]))
    np.testing.assert_array_equal(idx, [[1, 2, 4], [2, 0, 1], [0, 1, -1]])
    np.testing.assert_array_equal(val[0], [5, 5, 3])
    assert val[2, 2] == -np.inf
    ref.topk_is_valid(idx, x, 3, starts=np.array([0, 0, 3]), ends=np.array([6, 6, 5]))
    with pytest.raises(AssertionError):
        ref.topk_is_valid(np.array([[1, 4, 5], [2, 0, 1], [0, 1, -1]]), x, 3,
                          starts=np.array([0, 0, 3]), ends=np.array([6, 6, 5]))


def test_slot_ids_by_hand():
    bt = np.array([[7, 3], [1, 2]], np.int32)
    ind = np.array([[0, 5, -1], [4, 1, 2]], np.int32)
    np.testing.assert_array_equal(ref.slot_ids(ind, bt, 4), [[28, 13, -1], [8, 5, 6]])


def test_latent_v4_write_read_and_attention_by_hand():
    P = 2
    pages = np.zeros((2, ((P * 584 + 575) // 576) * 576), np.uint8)
    kv = np.zeros((2, 512), np.float32)
    kv[0, 0], kv[0, 448], kv[1, 1], kv[1, 100] = 1.0, 0.5, 2.0, -448.0
    pages = ref.write_latent_cache(kv, np.array([3, 0]), pages, P)  # token 0 -> page 1 slot 1
    np.testing.assert_array_equal(ref.latent_token(pages, 3, P), kv[0])
    np.testing.assert_array_equal(ref.latent_token(pages, 0, P), kv[1])
    assert pages[1, 2 * 576 + 8 + 7] == 0  # pad byte of slot 1's scale record
    q = np.zeros((1, 1, 1, 512), np.float32)
    q[..., 0] = 2.0
    out, lse = ref.sparse_mla_decode(q, pages, P, np.array([[[3, 0, -1]]]), sm_scale=0.5)
    # scores: token 3 -> 0.5 * 2 * 1 = 1, token 0 -> 0: softmax weights e/(e+1), 1/(e+1)
    e = math.e
    np.testing.assert_allclose(lse[0, 0, 0], math.log(e + 1), rtol=1e-6)
    np.testing.assert_allclose(out[0, 0, 0], (e * kv[0] + kv[1]) / (e + 1), rtol=1e-6, atol=1e-6)
    empty_out, empty_lse = ref.sparse_mla_decode(q, pages, P, np.array([[[-1, -1]]]), sm_scale=0.5)
    assert empty_lse[0, 0, 0] == -np.inf and not empty_out.any()
    sink_out, sink_lse = ref.sparse_mla_decode(q, pages, P, np.array([[[3]]]), sm_scale=0.5,
                                               attn_sink=np.array([1.0], np.float32))
    # one token with score 1 and a sink of 1: out = v * e / (e + e) = v / 2
    np.testing.assert_allclose(sink_out[0, 0, 0], kv[0] / 2, rtol=1e-6)
    np.testing.assert_allclose(sink_lse[0, 0, 0], 1.0, rtol=1e-6)


def test_latent_v32_layout_by_hand():
    pages = np.zeros((1, 2 * 656), np.uint8)
    kv = np.zeros((1, 576), np.float32)
    kv[0, 0], kv[0, 130], kv[0, 512] = 448.0, -1.0, 3.0
    pages = ref.write_latent_cache(kv, np.array([1]), pages, 2, format="v32_fp8")
    rec = pages[0, 656:]
    tiny = np.finfo(np.float32).tiny                        # zero groups: scale FLT_MIN
    assert rec[0] == 0x7E                                   # 448 / (448 / 448) = 448
    np.testing.assert_array_equal(rec[512:528].view("<f4"), np.array([1.0, 1.0 / 448, tiny, tiny], np.float32))
    assert rec[528:530].view("<u2")[0] == 0x4040            # bf16(3.0)
    np.testing.assert_allclose(ref.latent_token(pages, 1, 2, "v32_fp8"), kv[0], rtol=1e-6, atol=0)
