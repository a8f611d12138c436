#!/usr/bin/env python3
"""One decode step of DeepSeek-V4.1-Flash sparse attention (one ratio-2 layer), driven the way a
vLLM attention backend drives dsattn:

  1. allocate the layer's caches from the preset geometry: indexer keys and compressed latent
     (32 states per 64-token page at r = 2) plus the sliding-window latent (64 tokens per page);
  2. write this step's keys with the cache writers (slot mappings, -1 = nothing to write);
  3. schedule metadata once per step (shared by every indexer layer of the step);
  4. fused indexer + top-k: [B, 512] slot ids without materializing [B, max_context] logits;
  5. sparse MLA over the selected compressed states plus the sliding window, with attention sinks.

  python examples/decode_step.py                  # CPU backend, numpy arrays
  python examples/decode_step.py --device cuda    # GPU, torch tensors (fp8 / bf16 torch dtypes)
  add --check to compare every stage with dsattn.reference (pure numpy)
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

import dsattn
from dsattn import reference as ref


class Arrays:
    """numpy on the host, torch on the GPU: the only framework-specific code of the example."""

    def __init__(self, device: str):
        self.device = device
        if device != "cpu":
            import torch

            self.torch = torch

    def put(self, x: np.ndarray, kind: str = ""):
        """Host data -> this device. kind "fp8" / "bf16": x holds E4M3 / bf16 bit patterns, which
        numpy keeps as uint8 / uint16 (the documented bit-pattern rule) and torch views as
        float8_e4m3fn / bfloat16."""
        if self.device == "cpu":
            return x
        t = self.torch.from_numpy(np.ascontiguousarray(x.view(np.int16) if kind == "bf16" else x)).to(self.device)
        if kind == "fp8":
            return t.view(self.torch.float8_e4m3fn)
        if kind == "bf16":
            return t.view(self.torch.bfloat16)
        return t

    def host(self, x) -> np.ndarray:
        if self.device == "cpu":
            return x
        if x.dtype == self.torch.bfloat16:
            return x.view(self.torch.int16).cpu().numpy().view(np.uint16)
        return x.cpu().numpy()

    def stream(self):
        # Engines pass the stream they run on; inside torch.cuda.graph() this is the capture stream.
        return None if self.device == "cpu" else self.torch.cuda.current_stream()


def decode_step(device: str = "cpu", check: bool = False, seed: int = 0, verbose: bool = True) -> dict:
    xp = Arrays(device)
    rng = np.random.default_rng(seed)
    stream = xp.stream()

    # ---- 1. geometry and caches ------------------------------------------------------------
    preset = dsattn.get_preset("deepseek-v4.1-flash")
    layer = next(g for g in dsattn.plan(preset) if g.compress_ratio == 2 and g.has_indexer)
    r, S, D, H = layer.compress_ratio, layer.states_per_page, preset.index_head_dim, preset.index_heads
    k_top, Hq, window, block = layer.topk, preset.attn_heads, preset.window, preset.block_tokens
    dqk = dsattn.latent_dqk("v4_fp8")

    positions = np.array([1500, 700, 2101])   # 0-based position of each request's new token
    B = positions.shape[0]
    states = (positions + 1) // r             # compressed states visible after this step
    pages_per_req = -(-int(states.max()) // S)
    num_pages = B * pages_per_req + 4
    like = xp.put(np.zeros(1, np.uint8))      # allocate caches with the inputs' framework / device
    idx_cache = dsattn.empty_indexer_cache(num_pages, S, D, like=like)
    kv_cache = dsattn.empty_latent_cache(num_pages, layer.latent_tokens_per_page, like=like)
    win_pages_per_req = -(-(window + 1) // block) + 1
    win_cache = dsattn.empty_latent_cache(B * win_pages_per_req, block, like=like)

    # Block tables (the engine's page allocator): shuffled physical pages.
    block_table = rng.permutation(num_pages)[: B * pages_per_req].reshape(B, pages_per_req).astype(np.int32)
    win_table = rng.permutation(B * win_pages_per_req).reshape(B, win_pages_per_req).astype(np.int32)

    def state_slots(b, t):        # compressed state t of request b -> slot id (page * S + offset)
        return np.where(t >= 0, block_table[b, np.maximum(t, 0) // S] * S + np.maximum(t, 0) % S, -1)

    def window_slots(b, pos):     # window token at position pos (ring of win_pages_per_req pages)
        ring = pos % (win_pages_per_req * block)
        return np.where(pos >= 0, win_table[b, ring // block] * block + ring % block, -1)

    # ---- 2. write keys -----------------------------------------------------------------------
    # Earlier steps wrote states 0 .. states-2 and window tokens up to pos-1 (done here in one call
    # per cache); this step writes the new token's window entry, and a compressed state for the
    # requests whose new token completes one ((pos + 1) % r == 0), -1 for the others.
    hist = [np.arange(states[b] - (1 if (positions[b] + 1) % r == 0 else 0)) for b in range(B)]
    new_state = np.array([states[b] - 1 if (positions[b] + 1) % r == 0 else -1 for b in range(B)])
    idx_keys = [rng.standard_normal((states[b], D)).astype(np.float32) for b in range(B)]
    latents = [rng.standard_normal((states[b], dqk)).astype(np.float32) for b in range(B)]
    win_pos = [np.arange(max(positions[b] - window + 1, 0), positions[b] + 1) for b in range(B)]
    win_lat = [rng.standard_normal((len(win_pos[b]), dqk)).astype(np.float32) for b in range(B)]

    def write(slots, idx_rows, lat_rows):
        slots = xp.put(np.concatenate(slots).astype(np.int64))
        dsattn.write_indexer_cache(xp.put(np.concatenate(idx_rows)), slots, idx_cache, stream=stream)
        dsattn.write_latent_cache(xp.put(np.concatenate(lat_rows)), slots, kv_cache, stream=stream)

    write([state_slots(b, hist[b]) for b in range(B)], [idx_keys[b][hist[b]] for b in range(B)],
          [latents[b][hist[b]] for b in range(B)])
    dsattn.write_latent_cache(xp.put(np.concatenate([w[:-1] for w in win_lat])),
                              xp.put(np.concatenate([window_slots(b, win_pos[b][:-1]) for b in range(B)])),
                              win_cache, stream=stream)
    # this step: one row per request (a real engine writes one row per new token)
    write([state_slots(b, np.array([new_state[b]])) for b in range(B)],
          [idx_keys[b][max(new_state[b], 0)][None] for b in range(B)],
          [latents[b][max(new_state[b], 0)][None] for b in range(B)])
    dsattn.write_latent_cache(xp.put(np.stack([w[-1] for w in win_lat])),
                              xp.put(np.array([window_slots(b, positions[b]) for b in range(B)], np.int32)),
                              win_cache, stream=stream)

    # ---- this step's queries (what the model's projections would produce) ---------------------
    q_idx = ref.f32_to_e4m3(rng.standard_normal((B, 1, H, D)).astype(np.float32))   # FP8 [B, N=1, H, D]
    weights = (rng.standard_normal((B, H)) / H).astype(np.float32)                    # [B*N, H]
    q_mla = ref.f32_to_bf16(rng.standard_normal((B, 1, Hq, dqk)).astype(np.float32))  # bf16 [B, 1, Hq, 512]
    sink = rng.standard_normal(Hq).astype(np.float32)
    context_lens = states.astype(np.int32)                                            # [B] states
    win_idx = np.full((B, 1, window), -1, np.int32)
    for b in range(B):
        win_idx[b, 0, : len(win_pos[b])] = window_slots(b, win_pos[b])

    d_q_idx, d_w, d_q_mla = xp.put(q_idx, "fp8"), xp.put(weights), xp.put(q_mla, "bf16")
    d_bt, d_lens, d_win_idx, d_sink = xp.put(block_table), xp.put(context_lens), xp.put(win_idx), xp.put(sink)

    # ---- 3. schedule metadata (once per step) -----------------------------------------------
    # num_sms: the GPU's multiprocessor count (0 picks it); on the CPU backend any partition count.
    num_sms = dsattn.cuda_num_sms() if device != "cpu" else 16
    meta = dsattn.schedule_metadata(d_lens, states_per_page=S, next_n=1, num_sms=num_sms, stream=stream)

    # ---- 4. fused indexer + top-k --------------------------------------------------------------
    # Engines preallocate the workspace once (here sized for this batch) so the step is graph-safe.
    ws_bytes = dsattn.paged_mqa_topk_workspace_size(d_q_idx, d_w, idx_cache, d_bt, d_lens, k_top, schedule=meta,
                                                    return_slot_ids=True)
    ws = xp.put(np.zeros(max(ws_bytes, 1), np.uint8))
    top = dsattn.paged_mqa_topk(d_q_idx, d_w, idx_cache, d_bt, d_lens, k_top, schedule=meta, return_slot_ids=True,
                                return_values=True, workspace=ws, stream=stream)

    # ---- 5. sparse MLA over the top-k states + the sliding window ------------------------------
    indices = top.slot_ids.reshape(B, 1, k_top)
    out, lse = dsattn.sparse_mla_decode(d_q_mla, kv_cache, indices, extra_cache=win_cache, extra_indices=d_win_idx,
                                        attn_sink=d_sink, sm_scale=1.0 / math.sqrt(dqk), stream=stream)
    if device != "cpu":
        xp.torch.cuda.synchronize()

    result = dict(indices=xp.host(top.indices), slot_ids=xp.host(top.slot_ids), out=xp.host(out), lse=xp.host(lse),
                  states=states, layer=layer.layer)
    if verbose:
        print(f"deepseek-v4.1-flash layer {layer.layer} (r={r}, {S} states/page), device={device}: "
              f"B={B}, states={states.tolist()}, top-{k_top} -> out {tuple(out.shape)}")

    if check:
        host_idx = xp.host(idx_cache.pages)
        want_logits = ref.paged_mqa_logits(q_idx, weights, host_idx, S, D, block_table, context_lens)
        finite = np.abs(want_logits[np.isfinite(want_logits)])
        ref.topk_is_valid(result["indices"], want_logits, k_top, None, states, atol=1e-4 * finite.max())
        np.testing.assert_array_equal(result["slot_ids"], ref.slot_ids(result["indices"], block_table, S))
        want_out, want_lse = ref.sparse_mla_decode(
            q_mla, xp.host(kv_cache.pages), S, result["slot_ids"].reshape(B, 1, k_top), sm_scale=1.0 / math.sqrt(dqk),
            extra=dict(pages=xp.host(win_cache.pages), tokens_per_page=block, indices=win_idx), attn_sink=sink)
        np.testing.assert_allclose(ref.bf16_to_f32(result["out"]), want_out, rtol=2.0 ** -7, atol=2e-3)
        np.testing.assert_allclose(result["lse"], want_lse, rtol=1e-5, atol=1e-5)
        if verbose:
            print("check: top-k, slot ids, sparse MLA out and lse match dsattn.reference")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu (numpy) or cuda / cuda:N (torch)")
    ap.add_argument("--check", action="store_true", help="compare with dsattn.reference")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    decode_step(a.device, a.check, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
