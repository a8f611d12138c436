#!/usr/bin/env python3
"""GPU time of DeepGEMM's paged-logits entry point served by dsattn.compat.deep_gemm, beside the
dsattn calls it stands for, on DeepSeek-V3.2's indexer shape (FP8, H = 64, D = 128, 64-state pages):

  op            torch.ops.dsattn.paged_mqa_logits, no schedule (the call schedules itself)
  op+schedule   the same with dsattn.schedule_metadata's schedule over every SM (made once)
  op+sched n-2  the same over num_sms - 2 partitions, the split compat's metadata holds (so that
                compat minus this is the compat layer's own cost, and this minus op+schedule the
                two idle SMs')
  compat        deep_gemm.fp8_paged_mqa_logits with get_paged_mqa_logits_metadata's schedule
                (num_sms - 2 partitions, DeepGEMM's [num_sms + 1, 2] buffer; row-padded logits)
  copy          a device-to-device copy of the cache pages the rows read (the bandwidth baseline)

Each row is a CUDA graph of `--calls` calls, replayed `--reps` times: microseconds per call
(median), and the cache bytes read per second as a % of the copy's read + write rate.
usage: python bench/compat_overhead.py [--shapes 128x32768,32x32768,1x65536] [--calls 20] [--reps 9]"""

from __future__ import annotations

import argparse
import statistics

import torch

import dsattn
from dsattn.compat import deep_gemm


def graph_us(fn, calls: int, reps: int) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    per = []
    for _ in range(reps):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        graph.replay()
        t1.record()
        t1.synchronize()
        per.append(t0.elapsed_time(t1) * 1e3 / calls)
    return statistics.median(per)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128x32768,32x32768,1x65536")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    S, H, D = 64, 64, 128
    dev = torch.device("cuda")
    num_sms = deep_gemm.get_num_sms()
    print(f"# {torch.cuda.get_device_name()}, {num_sms} SMs, torch {torch.__version__}; FP8 H={H} D={D} S={S}, "
          f"graphs of {a.calls} calls x {a.reps} replays (median)")
    print("| B x context | op us | op+schedule us | op+sched n-2 us | compat us | compat / op+schedule | "
          "compat / op+sched n-2 | copy us | op+schedule % of copy | compat % of copy |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for shape in a.shapes.split(","):
        B, ctx = (int(x) for x in shape.split("x"))
        ppr = -(-ctx // S)
        g = torch.Generator(device=dev).manual_seed(0)
        pages = torch.randint(0, 120, (B * ppr, S * (D + 4)), dtype=torch.uint8, device=dev, generator=g)
        pages.view(B * ppr, S * (D + 4))[:, S * D:] = 0x3c  # scales: finite positive floats
        kv_cache = pages.view(B * ppr, S, 1, D + 4)
        bt = torch.randperm(B * ppr, device=dev, generator=g).to(torch.int32).view(B, ppr)
        q = torch.randn(B, 1, H, D, device=dev, generator=g).to(torch.float8_e4m3fn)
        w = torch.randn(B, H, device=dev, generator=g)
        lens = torch.full((B, 1), ctx, dtype=torch.int32, device=dev)
        own = dsattn.schedule_metadata(lens, states_per_page=S, stream=torch.cuda.current_stream())
        own2 = dsattn.schedule_metadata(lens, states_per_page=S, num_sms=num_sms - 2,
                                        stream=torch.cuda.current_stream())
        meta = deep_gemm.get_paged_mqa_logits_metadata(lens, S, num_sms)
        width = ppr * S
        ops = torch.ops.dsattn
        rows = {
            "op": lambda: ops.paged_mqa_logits(q, w, pages, bt, lens, S, max_context=width),
            "op+schedule": lambda: ops.paged_mqa_logits(q, w, pages, bt, lens, S, schedule=own, max_context=width),
            "op+sched n-2": lambda: ops.paged_mqa_logits(q, w, pages, bt, lens, S, schedule=own2, max_context=width),
            "compat": lambda: deep_gemm.fp8_paged_mqa_logits(q, kv_cache, w, lens, bt, meta, width),
        }
        got = {name: graph_us(fn, a.calls, a.reps) for name, fn in rows.items()}
        dst = torch.empty_like(pages)
        copy = graph_us(lambda: dst.copy_(pages), a.calls, a.reps)
        nbytes = pages.numel()
        copy_rate = 2 * nbytes / copy  # read + write, bytes per us
        pct = {k: 100.0 * (nbytes / v) / copy_rate for k, v in got.items()}
        print(f"| {B} x {ctx} | {got['op']:.1f} | {got['op+schedule']:.1f} | {got['op+sched n-2']:.1f} | "
              f"{got['compat']:.1f} | {got['compat'] / got['op+schedule']:.3f} | "
              f"{got['compat'] / got['op+sched n-2']:.3f} | {copy:.1f} | {pct['op+schedule']:.1f} | "
              f"{pct['compat']:.1f} |")


if __name__ == "__main__":
    main()
