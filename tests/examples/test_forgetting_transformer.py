"""The worked example (examples/forgetting-transformer): the forget gate against the paper's
formula written out with its T x T matrix, the leaky variant refused, and the claims file in
step with its study spec and with the paper's perplexities."""

from __future__ import annotations

import math
import re

import pytest
import torch
import yaml
from harness_support import REPO

from harness.models.attention import key_biased_attention
from harness.models.checks import check_variant
from harness.models.components import resolve_component
from harness.models.variants import make_variant
from harness.studies.spec.components import user_variants
from harness.studies.spec.study_spec import load_spec

EXAMPLE = REPO / "examples" / "forgetting-transformer"


def _paper_attention(q, k, v, log_f):
    """Forgetting Attention as the paper writes it, in float64: D_ij = sum_{l=j+1}^{i} log f_l
    as a T x T matrix, o_i = sum_j F_ij exp(q_i.k_j / sqrt(hd)) v_j / sum_j F_ij exp(...)."""
    B, H, T, hd = q.shape
    D = torch.zeros(B, H, T, T, dtype=torch.float64)
    for i in range(T):
        for j in range(i + 1):
            D[..., i, j] = log_f[..., j + 1 : i + 1].sum(-1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + D
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    weights = torch.exp(scores.masked_fill(~causal, float("-inf")))  # F_ij exp(q_i.k_j / sqrt(hd))
    return (weights / weights.sum(-1, keepdim=True)) @ v


def test_the_forget_gate_folded_as_a_key_bias_is_the_papers_attention() -> None:
    """The per-key bias b_j = -c_j (the query's c_i cancels in the softmax), folded into one SDPA
    call, against the paper's formula: outputs and the gradients of x, q and the gate's weights."""
    gate_class = resolve_component("forget_gate:ForgetGate", slot="gate", search_dir=EXAMPLE)
    torch.manual_seed(0)
    B, H, T, hd, d = 2, 3, 12, 8, 16
    gate = gate_class(d_model=d, n_head=H)
    with torch.no_grad():
        gate.proj.weight.normal_(std=0.5)
        gate.proj.bias.normal_(std=1.0)
    x = torch.randn(B, T, d, requires_grad=True)
    q, k, v = (torch.randn(B, H, T, hd, requires_grad=True) for _ in range(3))
    folded = key_biased_attention(q, k, v, gate(x, k))  # fp32, as the harness runs it
    x64, q64, k64, v64 = (t.detach().double().requires_grad_() for t in (x, q, k, v))
    w64, b64 = (p.detach().double().requires_grad_() for p in (gate.proj.weight, gate.proj.bias))
    log_f = torch.nn.functional.logsigmoid(x64 @ w64.T + b64).transpose(1, 2)  # (B, H, T)
    paper = _paper_attention(q64, k64, v64, log_f)
    torch.testing.assert_close(folded.double(), paper, rtol=1e-5, atol=1e-5)
    cotangent = torch.randn(B, H, T, hd, dtype=torch.float64)
    (folded.double() * cotangent).sum().backward()
    (paper * cotangent).sum().backward()
    for ours, theirs in ((x, x64), (q, q64), (gate.proj.weight, w64), (gate.proj.bias, b64)):
        torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=1e-4, atol=1e-5)


def test_the_leaky_forget_gate_is_refused_naming_the_first_leak() -> None:
    variant = make_variant("leaky-fox", position="none", gate="leaky_forget_gate:StandardisedForgetGate")
    result = check_variant(variant, length=24, component_dir=EXAMPLE, graphs=False, seeds=(0,))
    assert not result.ok
    assert (result.causality.first_leak.split, result.causality.first_leak.position) == (2, 1)
    fox = check_variant(
        make_variant("fox", position="none", gate="forget_gate:ForgetGate"),
        length=24,
        component_dir=EXAMPLE,
        graphs=False,
        seeds=(0,),
    )
    assert fox.ok and fox.parameters - fox.baseline_parameters == 2 * 2 * (64 + 1)  # H (d + 1) per layer


#: The perplexities of the paper's Table 3 each claim compares: (control, treatment).
TABLE_3 = {
    "fox-beats-rope": (7.49, 7.25),
    "forget-gate-replaces-position": (29.30, 7.25),
    "forget-gate-on-rope": (7.49, 7.19),
}


def test_the_claims_are_the_papers_numbers_and_name_the_studys_variants() -> None:
    claims = yaml.safe_load((EXAMPLE / "claims.yaml").read_text())
    spec = load_spec(EXAMPLE / "study.yaml")
    assert {v.name for v in user_variants(spec)} == {"fox", "rope-fox"}
    assert {c["id"] for c in claims["claims"]} == set(TABLE_3)
    for claim in claims["claims"]:
        control, treatment = TABLE_3[claim["id"]]
        assert claim["paper_value"] == pytest.approx(math.log(control / treatment), abs=5e-4), claim["id"]
        assert re.search(rf"\b{control:.2f}\b", claim["claim"]) and re.search(rf"\b{treatment:.2f}\b", claim["claim"])
        for measure in claim["measures"]:
            assert measure["study"] == spec.name
            assert {measure["treatment"], measure["control"]} <= set(spec.variant_names)
