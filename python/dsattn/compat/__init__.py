"""Drop-in entry points with the signatures of the public kernels that serving engines call today.

  dsattn.compat.deep_gemm  DeepGEMM's lightning-indexer API: get_paged_mqa_logits_metadata,
                           fp8_paged_mqa_logits, fp8_fp4_paged_mqa_logits, fp8_mqa_logits,
                           fp8_fp4_mqa_logits, get_num_sms
  dsattn.compat.flash_mla  FlashMLA's sparse API: get_mla_metadata, flash_mla_with_kvcache (sparse
                           decode), flash_mla_sparse_fwd (sparse prefill)

An engine that calls those libraries switches with an import, e.g.
    from dsattn.compat import deep_gemm, flash_mla
and its caches, block tables and index tensors stay as they are: the byte layouts are the same
(SPEC 2.1-2.3). What dsattn adds behind the same calls: any page size (DeepGEMM takes 64 on SM90,
32 / 64 on SM100), 8 to 64 indexer heads, sm_80 to sm_120, and the CPU.

Each module's docstring lists where its results or accepted arguments differ from the original.
These are torch APIs (both originals are): importing them imports torch and registers
torch.ops.dsattn (dsattn.torch_ops); the calls run on torch's current stream, and a scratch
workspace comes from torch's allocator. Bad arguments raise ValueError / TypeError naming the
function and the argument (the originals assert)."""
