"""torch.compile(fullgraph=True) traces the ops through their Meta fakes (no graph break) and the
compiled model matches eager."""

from __future__ import annotations

import torch

from xllm_kernel.ops import fused_add_rms_norm, layer_norm, rms_norm

from conftest import needs_compiler


class Block(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.norm_weight = torch.nn.Parameter(torch.rand(hidden, generator=g) + 0.5)
        self.ln_weight = torch.nn.Parameter(torch.rand(hidden, generator=g) + 0.5)
        self.ln_bias = torch.nn.Parameter(torch.randn(hidden, generator=g))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        h = self.proj(x)
        fused_add_rms_norm(h, residual, self.norm_weight, 1e-6)  # h, residual written in place
        y = rms_norm(h * 2, self.norm_weight, 1e-6)
        return layer_norm(y + 1, self.ln_weight, self.ln_bias, 1e-5), residual


def inputs(tokens: int, hidden: int):
    g = torch.Generator().manual_seed(1)
    return torch.randn(tokens, hidden, generator=g), torch.randn(tokens, hidden, generator=g)


def test_traced_graph_holds_the_ops(cpu):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    model = Block(64).eval()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    with torch.no_grad():
        x, r = inputs(5, 64)
        out, res = compiled(x, r.clone())
        ref, ref_res = model(x, r.clone())
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert {"xllm_kernel.rms_norm.default", "xllm_kernel.fused_add_rms_norm.default",
            "xllm_kernel.layer_norm.default"} <= targets
    assert torch.equal(out, ref) and torch.equal(res, ref_res)


@needs_compiler  # inductor compiles C++
def test_inductor_fullgraph_matches_eager(cpu):
    model = Block(64).eval()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for tokens in (3, 7):  # a second shape reuses the dynamic graph
            x, r = inputs(tokens, 64)
            ref, ref_res = model(x, r.clone())
            out, res = compiled(x, r.clone())
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(res, ref_res, atol=1e-6, rtol=1e-6)
