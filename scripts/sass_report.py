#!/usr/bin/env python3
"""What the compiler made of a kernel, without a GPU: registers, stack, spills and instruction mix.

For the architectures we cannot run (sm_100, sm_120) and for refactors that must not change device
code. The CUDA toolkit here has nvcc and ptxas but neither cuobjdump nor nvdisasm; this script takes
them from PATH, the toolkit, or NVIDIA's PyPI wheels (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm,
unpacked once into $DSATTN_NVTOOLS, default ~/.cache/dsattn-nvtools).

  scripts/sass_report.py build src/cuda/sm80/indexer_inst_fp8.cu --arch 120f -o /tmp/a.cubin [--lineinfo]
  scripts/sass_report.py kernels /tmp/a.cubin [--filter LogitsEpilogue]
  scripts/sass_report.py diff /tmp/old.cubin /tmp/new.cubin [--filter Staged]
  scripts/sass_report.py spills /tmp/a.cubin KERNEL_SUBSTRING      (a --lineinfo build names the source)

`build` compiles one translation unit the way CMakeLists.txt does (-O3, the arch's defines, the
headers of the checkout the unit is in), without -lineinfo unless asked, so that two builds of the
same device code give byte-identical cubins: `diff` then says IDENTICAL per kernel. `kernels` prints, per kernel, the registers and stack frame
(cuobjdump -res-usage) and counts of instructions, local loads / stores (STL / LDL: spills and
saves around calls), calls, barriers and MMAs in its SASS.
"""
import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEELS = {"nvdisasm": "nvidia-cuda-nvdisasm", "cuobjdump": "nvidia-cuda-cuobjdump"}


def tool(name):
    """Path of nvdisasm / cuobjdump: PATH, the CUDA toolkit, else NVIDIA's wheel from PyPI."""
    found = shutil.which(name)
    if found:
        return found
    nvcc = shutil.which("nvcc")
    if nvcc:
        cand = os.path.join(os.path.dirname(nvcc), name)
        if os.path.exists(cand):
            return cand
    cache = os.environ.get("DSATTN_NVTOOLS", os.path.expanduser("~/.cache/dsattn-nvtools"))
    for dirpath, _, files in os.walk(cache):
        if name in files:
            return os.path.join(dirpath, name)
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, WHEELS[name]],
                           capture_output=True, text=True)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if r.returncode != 0 or not wheels:
            sys.exit(f"sass_report: no {name} on PATH or in the toolkit, and `pip download {WHEELS[name]}` "
                     f"failed: {r.stderr.strip()[-300:]}")
        zipfile.ZipFile(os.path.join(tmp, wheels[0])).extractall(cache)
    for dirpath, _, files in os.walk(cache):
        if name in files:
            path = os.path.join(dirpath, name)
            os.chmod(path, 0o755)
            return path
    sys.exit(f"sass_report: {WHEELS[name]}'s wheel holds no {name}")


def tree_of(tu):
    """The source tree a translation unit belongs to (the nearest directory above it with
    include/dsattn and src), so that a TU of another checkout, an old revision's say, is built
    against that checkout's headers and not this one's; ROOT where none is found."""
    d = os.path.dirname(os.path.abspath(tu))
    while d != os.path.dirname(d):
        if os.path.isdir(os.path.join(d, "include", "dsattn")) and os.path.isdir(os.path.join(d, "src")):
            return d
        d = os.path.dirname(d)
    return ROOT


def build(args):
    arch = args.arch
    defs = [f'-DDSATTN_CUDA_ARCH_LIST="{arch}"', "-DDSATTN_WITH_CUDA=1"]
    if arch == "90a":
        defs.append("-DDSATTN_HAS_SM90A=1")
    root = tree_of(args.tu)
    cmd = (["nvcc"] + defs + [f"-I{root}/include", f"-I{root}/src", "-O3", "-DNDEBUG", "-std=c++17",
                              "--expt-relaxed-constexpr", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-cubin",
                              "-o", args.out, args.tu] + (["-lineinfo"] if args.lineinfo else []))
    print("+ " + " ".join(cmd), file=sys.stderr)
    sys.exit(subprocess.run(cmd).returncode)


def run_tool(name, args):
    r = subprocess.run([tool(name)] + args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sass_report: {name} {' '.join(args)} failed: {r.stderr.strip()[-300:]}")
    return r.stdout


def sass(cubin, lineinfo=False):
    """{kernel: [(instruction, source chain)]} from nvdisasm (chain: innermost file:line first)."""
    out = run_tool("nvdisasm", ["-c"] + (["-gi"] if lineinfo else []) + [cubin])
    funcs, cur, chain, fresh = {}, None, [], True
    for line in out.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)', line)
        if m:
            if fresh:
                chain, fresh = [], False
            chain.append(f"{os.path.basename(m.group(1))}:{m.group(2)}")
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if cur and m:
            fresh = True
            funcs[cur].append((re.sub(r"/\*.*?\*/", "", m.group(1)).strip(), " <- ".join(chain[:4])))
    return funcs


def resources(cubin):
    out = run_tool("cuobjdump", ["-res-usage", cubin])
    res, name = {}, None
    for line in out.splitlines():
        m = re.search(r"Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"REG:(\d+) STACK:(\d+)", line)
        if m and name:
            res[name] = (int(m.group(1)), int(m.group(2)))
    return res


def opcode(ins):
    parts = ins.split()
    return parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]


COUNTS = [("STL", r"^STL"), ("LDL", r"^LDL"), ("CALL", r"^CALL"), ("BAR", r"^BAR"), ("MMA", r"MMA")]


def short(name, width=88):
    return name if len(name) <= width else "..." + name[-(width - 3):]


def kernels(args):
    funcs, res = sass(args.cubin), resources(args.cubin)
    print(f"{'kernel':<88} {'regs':>4} {'stack':>5} {'instrs':>6} " + " ".join(f"{k:>4}" for k, _ in COUNTS))
    for name in sorted(funcs):
        if args.filter and args.filter not in name:
            continue
        ops = [opcode(i) for i, _ in funcs[name]]
        reg, stack = res.get(name, (-1, -1))
        cnt = [sum(1 for o in ops if re.search(rx, o)) for _, rx in COUNTS]
        print(f"{short(name):<88} {reg:>4} {stack:>5} {len(ops):>6} " + " ".join(f"{c:>4}" for c in cnt))


def diff(args):
    fa, fb = sass(args.a), sass(args.b)
    ra, rb = resources(args.a), resources(args.b)
    for name in sorted(set(fa) | set(fb)):
        if args.filter and args.filter not in name:
            continue
        a, b = [i for i, _ in fa.get(name, [])], [i for i, _ in fb.get(name, [])]
        if a == b and ra.get(name) == rb.get(name):
            print(f"{short(name)}  IDENTICAL")
            continue
        oa, ob = collections.Counter(map(opcode, a)), collections.Counter(map(opcode, b))
        changed = sum(((oa - ob) + (ob - oa)).values())
        print(f"{short(name)}  instrs {len(a)} -> {len(b)}, opcodes changed {changed}, "
              f"regs/stack {ra.get(name)} -> {rb.get(name)}")


def spills(args):
    funcs = sass(args.cubin, lineinfo=True)
    for name, ins in funcs.items():
        if args.kernel not in name:
            continue
        print(name)
        where = collections.Counter(chain or "(no line info)" for i, chain in ins if re.match(r"(STL|LDL)", opcode(i)))
        for chain, n in where.most_common():
            print(f"  {n:4d}  {chain}")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile one .cu to a cubin for one architecture")
    b.add_argument("tu")
    b.add_argument("--arch", required=True, help="80, 89, 90a, 100f, 120f, ...")
    b.add_argument("-o", "--out", required=True)
    b.add_argument("--lineinfo", action="store_true")
    b.set_defaults(fn=build)
    k = sub.add_parser("kernels", help="registers, stack and instruction counts per kernel")
    k.add_argument("cubin")
    k.add_argument("--filter", default="")
    k.set_defaults(fn=kernels)
    d = sub.add_parser("diff", help="per kernel: identical SASS, or how it changed")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--filter", default="")
    d.set_defaults(fn=diff)
    s = sub.add_parser("spills", help="local loads / stores of a kernel by source line (a --lineinfo cubin)")
    s.add_argument("cubin")
    s.add_argument("kernel")
    s.set_defaults(fn=spills)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
