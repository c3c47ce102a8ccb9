"""`python -m xllm_kernel.e2e --batch-invariant`: the side `invariant` (initialize(batch_invariant=True))
beside `selected`, every sequence rerun alone and compared bit for bit with its run in the batch,
on the tiny presets with prompts of different lengths; the comparison itself (a one-ulp difference
in one logit is a difference, located to the step that made it); the report's fields; and the
combinations refused as usage errors."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import ROOT
from conftest import explain_run as _explain
from conftest import run_e2e as e2e

from xllm_kernel.e2e import cli
from xllm_kernel.e2e.config import Workload, model_config
from xllm_kernel.e2e.invariance import bits, check, compare_sequence, describe, identical
from xllm_kernel.e2e.model import Runner, library_ops, load, make_weights

try:  # optional, as in test_e2e.py: the report is checked against the schema where it is installed
    import jsonschema
except ImportError:  # pragma: no cover
    jsonschema = None

SCHEMA = json.loads((ROOT / "docs" / "schemas" / "e2e-report.schema.json").read_text())


# ---- the comparison ---------------------------------------------------------------------------------

def _logits(steps: int, vocab: int, dtype=torch.float32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(vocab, generator=g).to(dtype) for _ in range(steps)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_ulp_in_one_logit_is_a_difference(dtype):
    batched = _logits(4, 512, dtype)
    alone = [t.clone() for t in batched]
    tokens = [7, 8, 9, 10]
    same = compare_sequence(batched, alone, tokens, tokens, prompt_len=6)
    assert same["identical"] and same["first_difference"] is None and same["tokens_equal"]
    assert same["steps_compared"] == 4 and same["logits_compared"] == 4 * 512
    # One logit of step 2 moved by one unit in the last place.
    before = alone[2][100].clone()
    alone[2][100] = torch.nextafter(before.float(), torch.tensor(math.inf)).to(dtype)
    if dtype == torch.bfloat16:  # float32's next value rounds back: step bfloat16's bits by one
        alone[2][100] = (bits(before) + 1).view(torch.bfloat16)
    ulp = (alone[2][100].double() - before.double()).abs().item()
    assert ulp > 0 and not identical(batched[2], alone[2])
    r = compare_sequence(batched, alone, tokens, tokens, prompt_len=6)
    assert not r["identical"] and r["tokens_equal"]
    assert r["first_difference"] == {"step": 2, "position": 6 - 1 + 2, "kind": "logits", "differing_logits": 1,
                                     "max_abs_difference": ulp, "token_batched": 9, "token_alone": 9}
    assert r["max_abs_difference"] == ulp


def test_signed_zero_nan_and_token_differences():
    batched = [torch.tensor([0.0, 1.0, float("nan")])]
    alone = [torch.tensor([-0.0, 1.0, float("nan")])]
    assert torch.equal(batched[0][:2], alone[0][:2])  # torch.equal calls them equal; their bits are not
    r = compare_sequence(batched, alone, [1], [1], prompt_len=3)
    assert not r["identical"] and r["first_difference"]["differing_logits"] == 1
    assert r["first_difference"]["max_abs_difference"] == 0.0
    # The same NaN is the same bits: identical.
    assert compare_sequence(batched, [batched[0].clone()], [1], [1], prompt_len=3)["identical"]
    # Equal logits, a different sampled token: the difference is the token's.
    r = compare_sequence(batched * 2, [batched[0].clone()] * 2, [1, 2], [1, 5], prompt_len=3)
    assert not r["identical"] and r["first_token_difference"] == 1
    assert r["first_difference"]["kind"] == "token" and r["first_difference"]["token_alone"] == 5


SEQUENCE = Workload(prompt_lens=(13,), output_len=4, block_size=8, seed=2)


def _runner_for(cpu, preset: str, work: Workload, alone_ops=None):
    """Runners over the library's default bindings; `alone_ops(ops)` changes those of the runs alone."""
    m = model_config(preset)
    loaded = load(m, make_weights(m, torch.bfloat16, seed=0), device=torch.device("cpu"), dtype=torch.bfloat16)
    ops = library_ops(cpu)

    def runner_for(rows):
        chosen = ops if rows is None or alone_ops is None else alone_ops(ops)
        return Runner(m, loaded, work, ops=chosen, device=torch.device("cpu"), dtype=torch.bfloat16, rows=rows)
    return runner_for


def _nudge(step_of_call, op: str, at_step: int, change):
    """Ops whose `op` (a field of Ops, or linear's role) has `change` applied to its result on the
    forward `at_step` (counted by calls of `step_of_call`)."""
    import dataclasses

    def make(ops):
        count = {"forwards": -1}

        def counted(fn, name):
            def call(*args, **kwargs):
                if name == step_of_call:
                    count["forwards"] += 1
                out = fn(*args, **kwargs)
                return change(out) if name == op and count["forwards"] == at_step else out
            return call

        def linear(x, w, b=None, role=""):
            out = ops.linear(x, w, b, role=role)
            return change(out) if role == op and count["forwards"] == at_step else out

        fields = {f.name: getattr(ops, f.name) for f in dataclasses.fields(ops)}
        wrapped = {k: counted(v, k) if callable(v) and k != "linear" else v for k, v in fields.items()}
        wrapped["linear"] = linear
        return dataclasses.replace(ops, **wrapped)
    return make


def test_a_sequence_alone_is_compared_bit_for_bit(cpu):
    # One sequence: alone and "batched" are the same computation, whatever the selection declares.
    runner_for = _runner_for(cpu, "tiny", SEQUENCE)
    result = check(runner_for, SEQUENCE)
    assert result["status"] == "identical" and result["logits_compared"] == 4 * 512, result
    (seq,) = result["sequences"]
    assert seq["identical"] and seq["steps_compared"] == 4 and seq["batched_tokens"] == seq["alone_tokens"]

    def one_ulp(logits):  # the first logit of the row one unit in the last place up
        out = logits.clone()
        out.view(torch.int16)[0, 0] += 1
        return out

    # One ulp in one logit of step 2 of the run alone (the embedding starts each forward).
    runner_for = _runner_for(cpu, "tiny", SEQUENCE, alone_ops=_nudge("embedding", "lm_head", 2, one_ulp))
    result = check(runner_for, SEQUENCE)
    assert result["status"] == "differs" and result["identical_sequences"] == 0
    d = result["first_difference"]
    assert d["sequence"] == 0 and d["step"] == 2 and d["position"] == 13 + 1 and d["differing_logits"] == 1
    assert d["max_abs_difference"] > 0
    where = d["operation"]
    assert where["status"] == "found" and where["operation"] == "gemm.lm_head" and not where["library_operation"]
    assert where["where"] == "after the layers" and where["differing_elements"] == 1
    assert "gemm.lm_head (torch's, not a library operation)" in describe(result)


def test_the_first_differing_operation_is_named_with_its_layer(cpu):
    def bump(out):
        out = out.clone()
        out[..., 3] += 1.0
        return out

    work = Workload(prompt_lens=(13,), output_len=4, block_size=8, seed=2, synthetic_prefill=True)
    # silu_and_mul of the second layer on decode step 2 (calls counted per forward by rms_norm, the
    # first layer's norm), in the run alone; with a synthetic prefill the logits start at step 1.
    calls = {"n": 0}

    def second_layer(out):
        calls["n"] += 1
        return bump(out) if calls["n"] % 2 == 0 else out

    runner_for = _runner_for(cpu, "tiny", work, alone_ops=_nudge("rms_norm", "silu_and_mul", 1, second_layer))
    result = check(runner_for, work)
    assert result["first_logit_step"] == 1 and result["sequences"][0]["steps_compared"] == 3
    d = result["first_difference"]
    assert result["status"] == "differs" and d["step"] == 2, d
    where = d["operation"]
    assert where["status"] == "found" and where["operation"] == "silu_and_mul" and where["library_operation"]
    assert where["where"] == "layer 1" and where["differing_elements"] == 1


def test_a_runner_of_some_rows_has_their_prompts_seeds_and_blocks(cpu):
    work = Workload(prompt_lens=(5, 19, 11), output_len=3, block_size=8, seed=4)
    runner_for = _runner_for(cpu, "tiny", work)
    whole = runner_for(None)
    for s, p in enumerate(work.prompt_lens):
        one = runner_for((s,))
        blocks = -(-(p + 3) // 8)
        assert torch.equal(one.prompts()[0], whole.prompts()[s])
        assert one.block_tables[0, :blocks].tolist() == whole.block_tables[s, :blocks].tolist()
        assert one.sampling["seeds"].tolist() == [4 + s]
        assert one.key_caches[0].shape == whole.key_caches[0].shape
    with pytest.raises(ValueError, match="rows must be distinct sequences"):
        runner_for((3,))


# ---- the command --------------------------------------------------------------------------------

# Short: two layers, four output tokens, one small validation, no warm-up. The prompts differ in
# length and cross blocks of 8 (and tiny-mistral's window of 16).
FAST = ["--batch", "4", "--prompt-len", "5,19,11,30", "--output-len", "4", "--block-size", "8", "--warmup", "0",
        "--validate-batch", "1", "--validate-prompt-len", "9", "--validate-output-len", "2", "--sides", "selected",
        "--batch-invariant"]


def _invariant_report(tmp_path, *args: str) -> tuple[dict, str]:
    out, md = tmp_path / "bi.json", tmp_path / "bi.md"
    result = e2e(*args, "--output", str(out), "--markdown", str(md))
    assert result.returncode == 0, _explain(result)
    report = json.loads(out.read_text())
    if jsonschema is not None:
        jsonschema.validate(report, SCHEMA)
        # The schema describes the block: a status it does not know is rejected.
        broken = json.loads(json.dumps(report))
        broken["batch_invariance"]["status"] = "mostly"
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)
    text = md.read_text()
    assert text in result.stdout
    return report, text


@pytest.mark.parametrize("preset, extra", [("tiny", []), ("tiny-qwen2", ["--weights", "bf16"]),
                                           ("tiny-mistral", [])])
def test_every_sequence_is_the_same_alone_and_in_the_batch(tmp_path, preset, extra):
    report, text = _invariant_report(tmp_path, "--preset", preset, *FAST, *extra)
    assert [s["name"] for s in report["sides"]] == ["selected", "invariant"]
    selected, invariant = report["sides"]
    assert invariant["batch_invariant"] is True and "batch_invariant" not in selected
    assert selected["status"] == invariant["status"] == "timed"
    assert invariant["implementations"]["paged_attention"] == "cpu.native.paged_attention.batch_invariant"
    assert selected["implementations"]["paged_attention"] == "cpu.native.paged_attention"
    if "implementations_batch_invariant" in invariant:  # what each selected implementation declares
        assert all(invariant["implementations_batch_invariant"].values())
    b = report["batch_invariance"]
    assert b["side"] == "invariant" and b["against"] == "selected" and b["status"] == "identical", b
    assert b["identical_sequences"] == 4 and b["first_difference"] is None and b["first_logit_step"] == 0
    assert [q["prompt_len"] for q in b["sequences"]] == [5, 19, 11, 30]
    for q in b["sequences"]:
        assert q["identical"] and q["tokens_equal"] and q["steps_compared"] == 4 and q["logits_compared"] == 4 * 512
        # Greedy: the timed pass's tokens too.
        assert q["batched_tokens"] == q["alone_tokens"] == invariant["tokens"][q["sequence"]]
    assert b["logits_compared"] == 4 * 4 * 512
    ratio = b["tokens_per_s_ratio"]
    for k in ("prefill", "decode"):
        expected = invariant["timing"][f"{k}_tokens_per_s"] / selected["timing"][f"{k}_tokens_per_s"]
        assert ratio[k] == pytest.approx(expected) and ratio[k] > 0
    assert b["implementations_changed"]["paged_attention"] == {
        "selected": "cpu.native.paged_attention", "invariant": "cpu.native.paged_attention.batch_invariant"}
    assert "invariance" not in invariant  # moved to the report's batch_invariance
    assert "Batch invariance (side invariant" in text and "every sequence identical" in text
    assert "| 3 | 30 | 4 | identical | — | — |" in text and "decode " in text and "×" in text


def test_decode_past_the_invariant_key_chunk_with_a_synthetic_prefill(tmp_path):
    # Contexts past 1024 keys: the invariant attention splits them into fixed chunks and merges.
    report, text = _invariant_report(tmp_path, "--preset", "tiny", "--batch", "3", "--prompt-len", "1100,40,1500",
                                     "--output-len", "3", "--synthetic-prefill", "--warmup", "0",
                                     "--validate-batch", "1", "--validate-prompt-len", "9", "--validate-output-len",
                                     "2", "--sides", "selected", "--batch-invariant")
    b = report["batch_invariance"]
    assert b["status"] == "identical" and b["first_logit_step"] == 1 and b["steps_per_sequence"] == 2, b
    assert all(q["identical"] and q["steps_compared"] == 2 for q in b["sequences"])
    assert b["tokens_per_s_ratio"]["prefill"] is None and b["tokens_per_s_ratio"]["decode"] > 0
    assert "from step 1" in text


def _torch_gemm_depends_on_rows() -> bool:
    """Whether torch's float32 F.linear gives a row other bits alone than among others here (the
    BLAS's choice: it is not a library operation, and nothing selects it under the property)."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn((9, 128), generator=g), torch.randn((384, 128), generator=g)
    return not torch.equal(torch.nn.functional.linear(x[:1], w), torch.nn.functional.linear(x, w)[:1])


@pytest.mark.skipif(not _torch_gemm_depends_on_rows(), reason="torch's float32 GEMM gives a row the same bits "
                    "alone and in a batch on this machine: no real difference to detect")
def test_a_real_difference_fails_the_run_and_names_the_step(tmp_path):
    # Without --weights the GEMMs are torch's F.linear: in float32 its bits depend on the rows here,
    # and the check must say so (exit 1), naming a gemm step as not the library's. With --weights f32
    # the same model runs every GEMM through the library's linear, selected under the property.
    out, md = tmp_path / "bi.json", tmp_path / "bi.md"
    result = e2e("--preset", "tiny", "--dtype", "float32", *FAST, "--output", str(out), "--markdown", str(md))
    assert result.returncode == 1, _explain(result)
    report = json.loads(out.read_text())
    if jsonschema is not None:
        jsonschema.validate(report, SCHEMA)
    invariant = report["sides"][1]
    assert invariant["status"] == "failed" and invariant["reason"].startswith("batch invariance: sequence ")
    assert "timing" in invariant  # the figures are still reported
    b = report["batch_invariance"]
    assert b["status"] == "differs" and b["identical_sequences"] < 4
    d = b["first_difference"]
    q = b["sequences"][d["sequence"]]
    assert not q["identical"] and q["first_difference"]["step"] == d["step"]
    assert d["position"] == q["prompt_len"] - 1 + d["step"] and d["differing_logits"] > 0
    assert d["max_abs_difference"] > 0
    where = d["operation"]
    assert where["status"] == "found" and where["operation"].startswith("gemm.") and not where["library_operation"]
    assert report["summary"]["exit_code"] == 1
    text = md.read_text()
    assert "sequences differ**" in text and "(torch's, not a library operation)" in text
    result = e2e("--preset", "tiny", "--dtype", "float32", "--weights", "f32", *FAST, "--output", str(out))
    assert result.returncode == 0, _explain(result)
    assert json.loads(out.read_text())["batch_invariance"]["status"] == "identical"


@pytest.mark.parametrize("args, message", [
    (["--sides", "torch"], "include selected in --sides"),
    (["--sides", "selected,invariant=paged_attention:torch"], "give another name to the side"),
    (["--distributed"], "--batch-invariant runs on one rank"),
    (["--synthetic-prefill", "--output-len", "1"], "give --output-len 2 or more"),
])
def test_combinations_that_cannot_be_checked_are_usage_errors(capsys, args, message):
    assert cli.main(["--preset", "tiny", "--batch-invariant", *args]) == 2
    assert message in capsys.readouterr().err


def test_the_invariant_side_follows_selected():
    work = Workload(prompt_lens=(4,), output_len=2)
    names = [s["name"] for s in cli.with_invariant_side(cli.sides("torch,selected,compile"), work, False)]
    assert names == ["torch", "selected", "invariant", "compile"]
