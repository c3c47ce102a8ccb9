"""The batch invariance check of `--batch-invariant`: every sequence of the workload run alone
against the same sequence inside the batch, greedy tokens and logits compared bit for bit at every
step, and the first operation whose rows differ where they do.

    result = check(lambda rows: Runner(model, loaded, greedy_work, ops=ops, ..., rows=rows), greedy_work)
    result["status"]        # "identical" or "differs"
    result["sequences"][s]  # identical, steps compared, first difference (step, position, max |delta|)

A sequence alone is `Runner(rows=(s,))`: the prompt, the sampling seed and the cache block ids it
has in the batch, one row in every call. Bit for bit means the bit patterns (torch.equal on the
tensors viewed as integers: -0.0 and 0.0 differ, a NaN equals the same NaN). With a synthetic
prefill the first token is drawn, not computed: the decode steps are compared.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import torch

from xllm_kernel.e2e.config import Workload
from xllm_kernel.e2e.model import ROLE_OPERATIONS, Ops, Runner

_INTEGER_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

COMPARED = ("each sequence alone (its prompt, sampling seed and cache blocks) against the same sequence in the "
            "batch: greedy tokens and the logits of every step, bit for bit")


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of `t`, as integers of its element size (on the CPU)."""
    t = t.detach().cpu().contiguous()
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return t.view(_INTEGER_VIEW[t.element_size()])
    return t


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, same shape, same bits."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def _difference(a: torch.Tensor, b: torch.Tensor) -> dict:
    """How two tensors of the same shape differ: the elements whose bits differ, and the largest
    |a - b| among them (None where a NaN or an infinity is involved: `non_finite` says so)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return {"differing": None, "elements": a.numel(), "max_abs_difference": None, "non_finite": False,
                "shapes": [list(a.shape), list(b.shape)], "dtypes": [str(a.dtype), str(b.dtype)]}
    differ = bits(a) != bits(b)
    x, y = a.detach().cpu().double()[differ], b.detach().cpu().double()[differ]
    finite = torch.isfinite(x) & torch.isfinite(y)
    delta = (x[finite] - y[finite]).abs()
    worst = delta.max().item() if delta.numel() else 0.0
    return {"differing": int(differ.sum().item()), "elements": a.numel(),
            "max_abs_difference": worst if bool(finite.all()) else None, "non_finite": not bool(finite.all())}


def compare_sequence(batched_logits: Sequence[torch.Tensor], alone_logits: Sequence[torch.Tensor],
                     batched_tokens: Sequence[int], alone_tokens: Sequence[int], *, prompt_len: int,
                     first_step: int = 0) -> dict:
    """One sequence's logits ([vocab] per step, from step `first_step` on) and greedy tokens (one
    per step, from step 0) in the batch and alone. Step j's logits are those of position
    prompt_len - 1 + j (the prefill's last row at step 0), which predict token j.

    Returns identical (every logit and token the same bits), what was compared, and the first
    difference: its step and position, how many logits differ there and their max |delta|.
    """
    batched_tokens, alone_tokens = [int(t) for t in batched_tokens], [int(t) for t in alone_tokens]
    first = None
    worst = 0.0
    non_finite = False
    for k, (a, b) in enumerate(zip(batched_logits, alone_logits)):
        if identical(a, b):
            continue
        d = _difference(a, b)
        step = first_step + k
        if first is None:
            first = {"step": step, "position": prompt_len - 1 + step, "kind": "logits",
                     "differing_logits": d["differing"], "max_abs_difference": d["max_abs_difference"]}
            if d.get("shapes"):
                first["shapes"] = d["shapes"]
        if d["max_abs_difference"] is None:
            non_finite = True
        else:
            worst = max(worst, d["max_abs_difference"])
    steps = min(len(batched_logits), len(alone_logits))
    counts_differ = len(batched_logits) != len(alone_logits) or len(batched_tokens) != len(alone_tokens)
    token_step = next((j for j, (a, b) in enumerate(zip(batched_tokens, alone_tokens)) if a != b), None)
    if token_step is None and len(batched_tokens) != len(alone_tokens):
        token_step = min(len(batched_tokens), len(alone_tokens))
    if token_step is not None and (first is None or token_step < first["step"]):
        # The logits agree up to here and the sampled token does not (or there is none to compare).
        first = {"step": token_step, "position": prompt_len - 1 + token_step, "kind": "token",
                 "differing_logits": 0, "max_abs_difference": 0.0}
    if first is not None:  # the tokens sampled at that step: did the difference change the choice?
        j = first["step"]
        first.update(token_batched=batched_tokens[j] if j < len(batched_tokens) else None,
                     token_alone=alone_tokens[j] if j < len(alone_tokens) else None)
    vocab = batched_logits[0].numel() if len(batched_logits) else 0
    return {"identical": first is None and not counts_differ, "steps_compared": steps,
            "first_logit_step": first_step, "logits_compared": steps * vocab,
            "tokens_equal": token_step is None, "first_token_difference": token_step,
            "first_difference": first,
            "max_abs_difference": None if non_finite else worst, "batched_tokens": batched_tokens,
            "alone_tokens": alone_tokens}


@dataclasses.dataclass
class Run:
    tokens: torch.Tensor  # int64 [S, output_len]
    logits: list[torch.Tensor]  # per step from first_step: [S, vocab] float32 on the CPU
    first_step: int  # 0; 1 with a synthetic prefill (its first token is drawn)


class _Stop(Exception):
    """Ends a traced generation once the traced step has run."""


def generate(runner: Runner, ops: Ops | None = None, after_step: Callable[[], None] | None = None) -> Run:
    """Greedy tokens and every step's logits of `runner` (with a synthetic prefill: the cache
    filled, then the decode steps, whose logits start at step 1)."""
    if runner.work.synthetic_prefill:
        first = runner.fill_cache()
        rest, logits, _ = runner.decode(first, ops, record_logits=True, after_step=after_step)
        return Run(torch.stack([first.cpu(), *rest], dim=1), logits, 1)
    gen = runner.generate(ops, record_logits=True, after_step=after_step)
    return Run(gen.tokens, gen.logits, 0)


# ---- where the first difference comes from -----------------------------------------------------------

# What each step of the forward writes: its result (each tensor of a tuple: a quantizing producer's
# q and scale), and (in place) the arguments at these positions.
_IN_PLACE = {"fused_add_rms_norm": ((0, "hidden"), (1, "residual")), "rotary_embedding": ((1, "query"), (2, "key")),
             "fused_add_rms_norm_per_token_quant": ((1, "residual"),)}
_TUPLE_OUTPUTS = ("quantized", "scale")
_LIBRARY = {"rms_norm", "fused_add_rms_norm", "rotary_embedding", "reshape_and_cache", "paged_attention",
            "reshape_and_cache_quant", "paged_attention_quant", "silu_and_mul", "sample", "linear",
            "rms_norm_per_token_quant", "fused_add_rms_norm_per_token_quant", "silu_and_mul_per_token_quant",
            "scaled_mm", "linear_dynamic_quant"}


class Tracer:
    """Wraps a forward's Ops: while `active`, keeps a copy of the rows of one sequence of every
    step's output (token rows: `token_rows` of a call over `tokens` rows; sequence rows: row
    `sequence` of a call over `sequences` rows), in call order, labelled with its layer."""

    def __init__(self, layers: int, token_rows: tuple[int, int], tokens: int, sequence: int, sequences: int):
        self.layers, self.token_rows, self.tokens = layers, token_rows, tokens
        self.sequence, self.sequences = sequence, sequences
        self.active = False
        self.records: list[dict] = []
        self._downs = 0  # down projections of this forward so far: the layer being run

    def _rows(self, t: torch.Tensor) -> torch.Tensor:
        if t.dim() and t.shape[0] == self.tokens:
            return t[self.token_rows[0]:self.token_rows[1]]
        if t.dim() and t.shape[0] == self.sequences:
            return t[self.sequence:self.sequence + 1]
        return t

    def _where(self) -> str:
        return "after the layers" if self._downs >= self.layers else f"layer {self._downs}"

    def _keep(self, step: str, what: str, t: torch.Tensor, library: bool) -> None:
        self.records.append({"operation": step, "tensor": what, "where": self._where(), "library": library,
                             "value": self._rows(t).detach().cpu().clone()})

    def wrap(self, name: str, fn: Callable) -> Callable:
        def traced(*args, **kwargs):
            if name == "embedding":  # a forward begins
                self._downs = 0
            out = fn(*args, **kwargs)
            if self.active:
                library = name in _LIBRARY
                if name in ("reshape_and_cache", "reshape_and_cache_quant"):  # the rows it wrote, at their slots
                    key, value, key_cache, value_cache, slots = args[:5]
                    for what, cache, new in (("key cache rows", key_cache, key), ("value cache rows", value_cache,
                                                                                    value)):
                        self._keep(name, what, cache.view(-1, *new.shape[1:]).index_select(0, slots), library)
                    for what, scale in zip(("key scale rows", "value scale rows"), args[5:7]):
                        if scale.dim() == 3:  # int8: the scale of each written (slot, KV head) row
                            self._keep(name, what, scale.view(-1, scale.shape[-1]).index_select(0, slots), library)
                else:
                    for i, what in _IN_PLACE.get(name, ()):
                        self._keep(name, what, args[i], library)
                    if isinstance(out, tuple):
                        for what, t in zip(_TUPLE_OUTPUTS, out):
                            self._keep(name, what, t, library)
                    elif isinstance(out, torch.Tensor) and name not in _IN_PLACE:
                        self._keep(name, "output", out, library)
            return out
        return traced

    def ops(self, ops: Ops) -> Ops:
        fields = {f.name: getattr(ops, f.name) for f in dataclasses.fields(ops)}
        wrapped = {k: (self.wrap(k, v) if callable(v) and k not in ROLE_OPERATIONS else v) for k, v in fields.items()}

        def traced_gemm(fn: Callable, step: str, library: bool) -> Callable:
            def traced(*args, role="gemm"):
                out = fn(*args, role=role)
                if self.active:
                    self._keep(f"{step}.{role}", "output", out, library)
                if role == "down":
                    self._downs += 1
                return out
            return traced

        wrapped["linear"] = traced_gemm(ops.linear, ops.linear_step, ops.linear_step == "linear")
        for op in ("scaled_mm", "linear_dynamic_quant"):
            if fields[op] is not None:
                wrapped[op] = traced_gemm(fields[op], op, True)
        return Ops(**wrapped)


def _traced(runner: Runner, sequence: int, step: int, first_step: int) -> list[dict]:
    """The records of `sequence` (a row of `runner`) at `step`: the steps before run untraced."""
    work = runner.work
    lens = list(work.prompt_lens)
    if step == 0:  # the prefill: every prompt's rows
        begin = sum(lens[:sequence])
        token_rows, tokens = (begin, begin + lens[sequence]), sum(lens)
    else:  # a decode step: one row per sequence
        token_rows, tokens = (sequence, sequence + 1), len(lens)
    counted = [first_step]

    def after_step():
        counted[0] += 1
        tracer.active = counted[0] == step
        if counted[0] > step:
            raise _Stop

    tracer = Tracer(runner.m.num_layers, token_rows, tokens, sequence, len(lens))
    tracer.active = step == first_step
    try:
        generate(runner, tracer.ops(runner.ops), after_step=after_step)
    except _Stop:
        pass
    return tracer.records


def locate(runner_for: Callable[[tuple[int, ...] | None], Runner], sequence: int, step: int,
           first_step: int = 0) -> dict:
    """Reruns `sequence` in the batch and alone up to `step` (its first difference), keeping that
    step's rows of the sequence from every operation, and returns the first whose rows differ."""
    batched = _traced(runner_for(None), sequence, step, first_step)
    alone = _traced(runner_for((sequence,)), 0, step, first_step)
    if [(r["operation"], r["tensor"]) for r in batched] != [(r["operation"], r["tensor"]) for r in alone]:
        return {"status": "not_found", "reason": "the batched and the lone forward called different steps"}
    for i, (a, b) in enumerate(zip(batched, alone)):
        if identical(a["value"], b["value"]):
            continue
        d = _difference(a["value"], b["value"])
        return {"status": "found", "step": step, "call": i, "operation": a["operation"], "tensor": a["tensor"],
                "where": a["where"], "library_operation": a["library"],
                "differing_elements": d["differing"], "elements": d["elements"],
                "max_abs_difference": d["max_abs_difference"]}
    return {"status": "not_found", "step": step, "calls_compared": len(batched),
            "reason": "every traced output of the step has the same bits on the rerun (the difference did not recur)"}


def check(runner_for: Callable[[tuple[int, ...] | None], Runner], work: Workload, *,
          log: Callable[[str], None] | None = None, locate_first: bool = True) -> dict:
    """The batch once, then each sequence alone, on runners from `runner_for(rows)` (None: the
    whole batch) over `work` (greedy). With locate_first, the first sequence that differs is rerun
    traced to name the operation where it starts."""
    log = log or (lambda message: None)
    log(f"batch invariance: the batch of {len(work.prompt_lens)}")
    batch = generate(runner_for(None))
    sequences = []
    for s, p in enumerate(work.prompt_lens):
        alone = generate(runner_for((s,)))
        result = compare_sequence([step[s] for step in batch.logits], [step[0] for step in alone.logits],
                                  batch.tokens[s].tolist(), alone.tokens[0].tolist(), prompt_len=p,
                                  first_step=batch.first_step)
        sequences.append({"sequence": s, "prompt_len": p, **result})
        d = result["first_difference"]
        log(f"batch invariance: sequence {s} (prompt {p}) alone: " + (
            "identical" if result["identical"] else "differs" if d is None else
            f"differs from step {d['step']} (position {d['position']}, max |delta| {_num(d['max_abs_difference'])})"))
    differing = [r for r in sequences if not r["identical"]]
    out = {"status": "differs" if differing else "identical", "compared": COMPARED,
           "sequences": sequences, "identical_sequences": len(sequences) - len(differing),
           "logits_compared": sum(r["logits_compared"] for r in sequences),
           "steps_per_sequence": work.output_len - batch.first_step, "first_logit_step": batch.first_step,
           "first_difference": None}
    if differing:
        first = differing[0]
        out["first_difference"] = dict(first["first_difference"] or {"reason": "a different number of steps"},
                                       sequence=first["sequence"])
        if locate_first and first["first_difference"] is not None:
            step = first["first_difference"]["step"]
            log(f"batch invariance: locating the difference of sequence {first['sequence']} at step {step}")
            out["first_difference"]["operation"] = locate(runner_for, first["sequence"], step, batch.first_step)
    return out


def describe(result: dict) -> str:
    """One line: what differs first (for the side's reason and the log)."""
    d = result.get("first_difference")
    if not d:
        return f"every sequence identical alone and in the batch ({result.get('identical_sequences')})"
    if "step" not in d:
        return f"sequence {d['sequence']} differs alone: {d.get('reason')}"
    where = d.get("operation") or {}
    text = (f"sequence {d['sequence']} differs alone from step {d['step']} (position {d['position']}"
            + (f", max |delta logit| {_num(d['max_abs_difference'])}" if d.get("kind") == "logits" else
               ", the sampled token") + ")")
    if where.get("status") == "found":
        owner = "" if where["library_operation"] else " (torch's, not a library operation)"
        text += (f": first in {where['operation']}{owner} {where['tensor']}, {where['where']} "
                 f"({where['differing_elements']} of {where['elements']} elements, max |delta| "
                 f"{_num(where['max_abs_difference'])})")
    return text


def _num(x) -> str:
    return "non-finite" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3g}"
