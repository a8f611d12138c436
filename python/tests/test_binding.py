"""The binding layer itself: error mapping, the bit-pattern rule, zero-copy views, output
allocation, stream parsing, workspace queries."""

import numpy as np
import pytest

import dsattn
from dsattn import _arrays
from dsattn import reference as ref

from cases import indexer_case


@pytest.fixture(scope="module")
def case():
    return indexer_case(seed=1, B=2, N=1, H=8, D=64, S=16, lens=(20, 35))


def _call(c, **kw):
    args = dict(q=c.q, weights=c.weights, cache=dsattn.IndexerCache(c.pages, c.S, c.D), block_table=c.block_table,
                context_lens=c.context_lens)
    args.update(kw)
    return dsattn.paged_mqa_logits(args.pop("q"), args.pop("weights"), args.pop("cache"), args.pop("block_table"),
                                   args.pop("context_lens"), **args)


def test_wrong_dtype_is_value_error_naming_op_and_argument(case):
    with pytest.raises(ValueError, match=r"paged_mqa_logits: q dtype expected f8_e4m3, got f32"):
        _call(case, q=case.q.astype(np.float32))
    with pytest.raises(ValueError, match=r"paged_mqa_logits: weights dtype expected f32, got u8"):
        _call(case, weights=case.weights.view(np.uint8)[:, :8])  # uint8 is FP8 bits only for FP8 args
    with pytest.raises(ValueError, match=r"paged_mqa_logits: weights dtype .*float64"):
        _call(case, weights=case.weights.astype(np.float64))
    with pytest.raises(ValueError, match=r"paged_mqa_logits: weights dtype .*uint16 .*bf16"):
        _call(case, weights=case.weights.view(np.uint16))


def test_wrong_shape_and_backend(case):
    with pytest.raises(ValueError, match=r"paged_mqa_logits: .*block_table"):
        _call(case, block_table=case.block_table[:1])
    with pytest.raises(ValueError, match=r"paged_mqa_logits: backend cuda expected CUDA tensors"):
        _call(case, backend="cuda")
    with pytest.raises(ValueError, match=r"paged_mqa_logits: backend expected one of auto, cpu, cuda"):
        _call(case, backend="gpu")


def test_not_an_array_and_wrong_cache_type(case):
    with pytest.raises(TypeError, match=r"paged_mqa_logits: block_table expected an array"):
        _call(case, block_table=[[0, 1]])
    with pytest.raises(TypeError, match=r"cache expected dsattn.IndexerCache"):
        _call(case, cache=case.pages)
    with pytest.raises(ValueError, match=r"cache.format expected one of fp8, mxfp4"):
        _call(case, cache=dsattn.IndexerCache(case.pages, case.S, case.D, "fp4"))


def test_strided_views_are_used_in_place(case):
    want = _call(case)
    # block_table as a column slice of a wider array (row stride 7): used through its strides
    wide = np.full((2, 7), 12345, np.int32)
    wide[:, : case.block_table.shape[1]] = case.block_table
    got = _call(case, block_table=wide[:, : case.block_table.shape[1]])
    for r, n in enumerate(case.row_ctx()):
        np.testing.assert_array_equal(got[r, :n], want[r, :n])


def test_preallocated_output_is_returned_and_numpy_allocation(case):
    out = np.empty((2, 48), np.float32)
    assert _call(case, logits=out) is out
    got = _call(case, logits_dtype="bfloat16")
    assert isinstance(got, np.ndarray) and got.dtype == np.uint16 and got.shape == (2, 48)  # block_table.shape[1] * S
    with pytest.raises(ValueError, match="logits_dtype"):
        _call(case, logits_dtype="float16")


def test_workspace_size_queries_are_ints(case):
    cache = dsattn.IndexerCache(case.pages, case.S, case.D)
    n = dsattn.paged_mqa_logits_workspace_size(case.q, case.weights, cache, case.block_table, case.context_lens)
    assert isinstance(n, int) and n >= 0
    n = dsattn.paged_mqa_topk_workspace_size(case.q, case.weights, cache, case.block_table, case.context_lens, 8)
    assert isinstance(n, int) and n >= 0
    logits = np.zeros((4, 100), np.float32)
    assert dsattn.topk_workspace_size(logits, 8) >= 0
    with pytest.raises(ValueError, match=r"paged_mqa_logits_?.*q dtype"):
        dsattn.paged_mqa_logits_workspace_size(case.q.astype(np.float32), case.weights, cache, case.block_table,
                                               case.context_lens)


def test_cpu_op_accepts_stream_objects(case):
    class TorchLike:
        cuda_stream = 0

    want = _call(case)
    got = _call(case, stream=TorchLike(), num_threads=1)
    for r, n in enumerate(case.row_ctx()):
        np.testing.assert_array_equal(got[r, :n], want[r, :n])


def test_stream_handle_forms():
    class Proto:
        def __cuda_stream__(self):
            return (0, 1234)

    class TorchStream:
        cuda_stream = 77

    class CupyStream:
        ptr = 99

    assert _arrays.stream_handle(None) == 0
    assert _arrays.stream_handle(5) == 5
    assert _arrays.stream_handle(Proto()) == 1234
    assert _arrays.stream_handle(TorchStream()) == 77
    assert _arrays.stream_handle(CupyStream()) == 99
    with pytest.raises(TypeError):
        _arrays.stream_handle("default")
    with pytest.raises(TypeError):
        _arrays.stream_handle(True)
    with pytest.raises(ValueError):
        _arrays.stream_handle(-1)


def test_cuda_architectures():
    """The build's DSATTN_CUDA_ARCHS entries ([] without CUDA), each "NN" / "NNN" with an optional
    'a' or 'f'; a build that runs CUDA here has at least one."""
    import re

    archs = dsattn.cuda_architectures()
    assert isinstance(archs, list)
    assert all(re.fullmatch(r"\d{2,3}[af]?", a) for a in archs), archs
    if dsattn.cuda_available():
        assert archs, "a build that runs CUDA has code for some architecture"


def test_stream_num_sms():
    # Without a green context or an MPS SM limit a stream gets the whole device (0 without CUDA).
    assert dsattn.cuda_stream_num_sms() == dsattn.cuda_num_sms()
    with pytest.raises(TypeError):
        dsattn.cuda_stream_num_sms("default")


def test_workspace_size_queries_take_the_stream(case):
    # The CUDA plans size their grids by the stream's SMs, so the size queries take stream= like the
    # ops (the CPU backend ignores it); a bad stream is refused as in the ops.
    cache = dsattn.IndexerCache(case.pages, case.S, case.D)
    args = (case.q, case.weights, cache, case.block_table, case.context_lens)

    class TorchLike:
        cuda_stream = 0

    assert dsattn.paged_mqa_topk_workspace_size(*args, 8, stream=TorchLike()) == \
        dsattn.paged_mqa_topk_workspace_size(*args, 8)
    assert dsattn.paged_mqa_logits_workspace_size(*args, stream=0) == dsattn.paged_mqa_logits_workspace_size(*args)
    logits = np.zeros((4, 100), np.float32)
    assert dsattn.topk_workspace_size(logits, 8, stream=0) == dsattn.topk_workspace_size(logits, 8)
    with pytest.raises(TypeError):
        dsattn.topk_workspace_size(logits, 8, stream="default")


def test_workspace_of_another_device_is_refused(case):
    # The extension sees only a workspace's address and size, so the Python side checks its device
    # against the inputs' (a host workspace for CUDA kernels, or the reverse, would crash). A stand-in
    # array that reports a CUDA device is enough: the check comes before anything reads it.
    class CudaArray:
        def __dlpack__(self, **kw):
            raise BufferError("not a real array")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(ValueError, match=r"topk: workspace device expected cpu, got cuda:0"):
        dsattn.topk(np.zeros((4, 100), np.float32), 8, workspace=CudaArray())
    with pytest.raises(ValueError, match=r"paged_mqa_logits: workspace device expected cpu, got cuda:0"):
        _call(case, workspace=CudaArray())
    # A host workspace for host inputs is taken.
    assert dsattn.topk(np.zeros((4, 100), np.float32), 8, workspace=np.zeros(1 << 16, np.uint8)).indices.shape == (4, 8)


def test_bf16_uint16_rule_for_topk():
    x = np.array([[1.0, 3.0, 2.0, -1.0]], np.float32)
    res = dsattn.topk(ref.f32_to_bf16(x), 2, sorted=True)
    np.testing.assert_array_equal(res.indices, [[1, 2]])
    with pytest.raises(ValueError, match=r"topk: logits dtype"):
        dsattn.topk(x.astype(np.int32), 2)


def test_read_only_output_is_type_error_naming_op(case):
    out = np.empty((2, 48), np.float32)
    out.setflags(write=False)
    with pytest.raises(TypeError, match=r"^paged_mqa_logits: "):
        _call(case, logits=out)
