"""End-to-end measurement of a Llama-family decoder on the published bindings:
`python -m xllm_kernel.e2e --help`. Offline, like the numerics and benchmark tools, not a runtime:
one static batch, prefill then decode into a paged cache that lives for one run.

    python -m xllm_kernel.e2e --preset tiny --batch 2 --prompt-len 16 --output-len 8 --output e2e.json

Modules: config (presets, workload, usage checks, --weights' schemes and bytes), model (the runner's
decoder), quantize (--weights: the quantized linears and the reference's W), reference (the float64
model it is validated against, quantizing its activations where the runner's linears do), worker
(one side in its own process), invariance (--batch-invariant: each sequence alone against the
batch, bit for bit), report (JSON, Markdown, plot), cli (the command, the sides, --distributed).
"""
