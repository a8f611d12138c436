#!/usr/bin/env python3
"""Host cost per call of the Python entry points of paged_mqa_topk, on one small decode shape where
the GPU work is short, so eager calls are bound by the host:

  api+ws      dsattn.paged_mqa_topk(..., stream=, workspace=, indices=)   (the baseline: nothing allocated)
  api         dsattn.paged_mqa_topk(..., stream=)      (workspace and outputs allocated per call)
  torch op    torch.ops.dsattn.paged_mqa_topk(...)     (current stream, torch allocations)
  compiled    the torch op inside torch.compile(fullgraph=True)
  graph       torch.cuda.graph replay of the torch op  (the GPU time per call, launch included)

Each row: `--calls` calls back to back, one synchronize, wall time / calls (median of `--reps`).
usage: python bench/torch_ops_overhead.py [--batch B] [--context N] [--calls N] [--reps N] [--api-only]
(--api-only: the first two rows, for a build without dsattn.torch_ops)"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import torch

import dsattn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--api-only", action="store_true")
    a = ap.parse_args()
    if not a.api_only:
        importlib.import_module("dsattn.torch_ops")  # registers torch.ops.dsattn.*
    B, ctx, S, H, D, k = a.batch, a.context, 64, 64, 128, 2048
    pages_per_req = -(-ctx // S)
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    pages = torch.zeros(dsattn.indexer_cache_shape(B * pages_per_req, S, D), dtype=torch.uint8, device=dev)
    slots = torch.arange(B * pages_per_req * S, dtype=torch.int32, device=dev)
    dsattn.write_indexer_cache(torch.randn(slots.numel(), D, device=dev, generator=g), slots,
                               dsattn.IndexerCache(pages, S, D), stream=torch.cuda.current_stream())
    q = torch.randn(B, 1, H, D, device=dev, generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(B, H, device=dev, generator=g)
    bt = torch.randperm(B * pages_per_req, device=dev, generator=g).to(torch.int32).view(B, pages_per_req)
    lens = torch.full((B,), ctx, dtype=torch.int32, device=dev)
    cache = dsattn.IndexerCache(pages, S, D)
    stream = torch.cuda.current_stream()
    idx = torch.empty(B, k, dtype=torch.int32, device=dev)
    ws = torch.empty(max(dsattn.paged_mqa_topk_workspace_size(q, w, cache, bt, lens, k, indices=idx, stream=stream), 1),
                     dtype=torch.uint8, device=dev)

    def api_ws():
        dsattn.paged_mqa_topk(q, w, cache, bt, lens, k, indices=idx, workspace=ws, stream=stream)

    def api():
        dsattn.paged_mqa_topk(q, w, cache, bt, lens, k, stream=stream)

    def op():
        torch.ops.dsattn.paged_mqa_topk(q, w, pages, bt, lens, S, k)

    rows = [("api+ws", api_ws), ("api", api)]
    if not a.api_only:
        compiled_fn = torch.compile(lambda: torch.ops.dsattn.paged_mqa_topk(q, w, pages, bt, lens, S, k),
                                    fullgraph=True)

        def compiled():
            compiled_fn()

        for f in (op, compiled):
            f()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            op()

        def replay():
            graph.replay()

        rows += [("torch op", op), ("compiled", compiled), ("graph", replay)]
    times = {}
    for name, f in rows:
        per = []
        for _ in range(a.reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(a.calls):
                f()
            torch.cuda.synchronize()
            per.append((time.perf_counter() - t0) * 1e6 / a.calls)
        times[name] = statistics.median(per)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, paged_mqa_topk B={B} ctx={ctx} S={S} "
          f"H={H} D={D} k={k}, {a.calls} calls x {a.reps} reps (median), route "
          f"{dsattn.paged_mqa_topk_route(q, w, cache, bt, lens, k, stream=stream)}")
    print("| entry point | us per call | vs api+ws |")
    print("|---|--:|--:|")
    for name, _ in rows:
        print(f"| {name} | {times[name]:.1f} | {times[name] / times['api+ws']:.2f}x |")


if __name__ == "__main__":
    main()
