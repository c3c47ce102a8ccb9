"""The Python soak: many calls of every catalog operation through torch.ops.xllm_kernel.<op> and
xllm_kernel.ops.<op> (alternately), on the C++ soak's cases (xllm_kernel._C.soak_cases: each
operation's numerics suite at 1 to 8192 tokens, mostly few). Fails (exit 1) when resident memory
grows more than --max-growth percent after the warm-up, or the CPU output block cache exceeds its
bound; prints a table like xllm-kernel-soak's.

    PYTHONPATH=build/python python scripts/soak.py --calls 200000
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls in all, the warm-up included")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--max-growth", type=float, default=5.0, help="percent")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.max_tokens < 1:
        parser.error("--calls and --max-tokens must be >= 1")

    import torch

    import xllm_kernel
    from xllm_kernel import _C
    from xllm_kernel import ops as public

    if not hasattr(_C, "soak_cases"):
        print("soak.py: this build of xllm_kernel has no tools (soak_cases)", file=sys.stderr)
        return 2
    start = time.monotonic()
    xllm_kernel.initialize(device="cpu")
    cases = _C.soak_cases(args.max_tokens, args.seed)
    # Two public paths per case: the torch op (dispatcher) and the package's function.
    paths = []
    for operation, case_id, tokens, weight, arguments in cases:
        paths.append((operation, getattr(torch.ops.xllm_kernel, operation), getattr(public, operation), arguments))
    weights = [c[3] for c in cases]
    rng = random.Random(args.seed + 1)
    per_operation: collections.Counter[str] = collections.Counter()
    bound = _C.cpu_cache_limit()
    cache_max = 0
    done = 0

    def call(i: int) -> None:
        operation, torch_op, function, arguments = paths[i]
        (torch_op if done % 2 else function)(*arguments)
        per_operation[operation] += 1

    for _ in range(2):  # warm-up: every case twice (both paths), then a tenth of the calls
        for i in range(len(paths)):
            call(i)
            done += 1
    warmup = max(done, args.calls // 10)
    picks = iter(())
    while done < warmup:
        picks = iter(rng.choices(range(len(paths)), weights, k=4096))
        for i in picks:
            if done >= warmup:
                break
            call(i)
            done += 1
    rss_warm = resident_bytes()
    warm_seconds = time.monotonic() - start
    while done < args.calls:
        for i in rng.choices(range(len(paths)), weights, k=min(4096, args.calls - done)):
            call(i)
            done += 1
        cache_max = max(cache_max, _C.cpu_cache_bytes())
    cache_max = max(cache_max, _C.cpu_cache_bytes())
    rss_end = resident_bytes()
    seconds = time.monotonic() - start

    growth = 100.0 * (rss_end - rss_warm) / rss_warm
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    print(f"# Soak (Python): {done} calls, {len(per_operation)} operations, {len(cases)} cases, "
          f"tokens 1..{args.max_tokens}, {torch.get_num_threads()} threads\n")
    print("| calls | seconds | warm-up calls | warm-up s | RSS after warm-up MiB | RSS at end MiB | growth % | "
          "cache max MiB | cache bound MiB |\n|---|---|---|---|---|---|---|---|---|")
    print(f"| {done} | {seconds:.1f} | {warmup} | {warm_seconds:.1f} | {mib(rss_warm)} | {mib(rss_end)} | "
          f"{growth:+.2f} | {mib(cache_max)} | {mib(bound)} |\n")
    print("| operation | calls |\n|---|---|")
    for name in sorted(per_operation):
        print(f"| {name} | {per_operation[name]} |")
    failed = False
    if growth > args.max_growth:
        print(f"soak.py: resident memory grew {growth:+.2f}% after the warm-up (limit {args.max_growth}%)",
              file=sys.stderr)
        failed = True
    if cache_max > bound:
        print(f"soak.py: the CPU output block cache held {cache_max} bytes, above its bound {bound}", file=sys.stderr)
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
