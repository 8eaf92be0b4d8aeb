"""Checks of a variant before anything trains: the causality probe that proves the zoo,
finite outputs and gradients, the parameter count against the baseline, and whether
``torch.compile`` traces the model as one graph.

The probe is the zoo's own proof (tests/models/test_models_model.py runs it on every variant)
and the gate every user component passes (``harness zoo check``, and the check a study naming
a user component runs before any trial starts):

    for every position t: change the token at t (x_t -> x_t + 1 mod V) and run the model;
    causal  <=>  max_{s < t} |logits_s(changed) - logits_s(original)| <= atol  for every t

with every parameter moved off its initial value first (``perturb``): a component whose
parameters start at zero (a lag weight, a gate's bias) could hide a leak at initialisation.
One forward per chunk of positions (one row per changed token, batched), so a model of
length T costs about T / chunk pairs of forwards. The first leak is named by the changed
token t and the earliest output before it that moved.

Graph breaks are reported, never enforced: they cost speed, not correctness (and tracing
takes seconds on CPU, so a study checks them only when it compiles).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from harness.models.components import resolve_component
from harness.models.sizes import ModelSize, get_size
from harness.models.transformer import build_model
from harness.models.variants import Variant, get_variant

#: Largest change of an earlier output that still counts as unchanged (the zoo's test's tolerance).
CAUSAL_ATOL = 1e-6
#: Scale of the noise added to every parameter before the probe.
PERTURB_SCALE = 0.2


@dataclass(frozen=True)
class Leak:
    """Changing the token at ``token`` moved the output at ``position`` < token by ``change``
    (the largest |change| of a logit there)."""

    token: int
    position: int
    change: float


@dataclass(frozen=True)
class CausalityResult:
    """What the probe saw over ``length`` positions: every changed token that moved an earlier
    output (:class:`Leak`, in order of the token), the tokens whose change did not even reach
    their own output (where the probe is blind), and the largest change before any token."""

    length: int
    leaks: tuple[Leak, ...]
    unseen: tuple[int, ...]
    largest_change: float
    atol: float = CAUSAL_ATOL

    @property
    def causal(self) -> bool:
        return not self.leaks

    @property
    def first_leak(self) -> Leak | None:
        return self.leaks[0] if self.leaks else None

    def describe(self) -> str:
        """One sentence: the verdict and its evidence."""
        if self.causal:
            blind = f"; {len(self.unseen)} changed token(s) did not reach their own output" if self.unseen else ""
            return (
                f"changing the token at any t of {self.length} positions never moved an output before t "
                f"(largest change {self.largest_change:.1e}, tolerance {self.atol:g}){blind}"
            )
        first = self.leaks[0]
        return (
            f"reads the future: changing the token at position {first.token} moved the output at position "
            f"{first.position} by {first.change:.2e} (first of {len(self.leaks)} of {self.length} positions whose "
            "token reaches earlier outputs)"
        )


def perturb_parameters(model: nn.Module, *, scale: float = PERTURB_SCALE, seed: int = 0) -> nn.Module:
    """Add N(0, scale^2) to every parameter in place (the probe's model: no value at its init)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float32).to(p.device, p.dtype)
            p.add_(scale * noise)
    return model


@torch.no_grad()
def causality_probe(
    model: nn.Module,
    *,
    vocab_size: int,
    length: int,
    positions: Sequence[int] | None = None,
    atol: float = CAUSAL_ATOL,
    seed: int = 0,
    chunk: int = 32,
) -> CausalityResult:
    """The probe of the module docstring on ``model`` (token ids (N, T) -> outputs (N, T, ...)),
    run in eval mode on one random sequence of ``length`` tokens, changing the token at each
    of ``positions`` (default: every position)."""
    was_training = model.training
    model.eval()
    try:
        generator = torch.Generator().manual_seed(seed)
        idx = torch.randint(0, vocab_size, (length,), generator=generator)
        changed_at = torch.arange(length) if positions is None else torch.tensor(sorted(set(positions)))
        leaks, unseen, largest = [], [], 0.0
        for start in range(0, len(changed_at), chunk):
            tokens = changed_at[start : start + chunk]  # (n,): the changed position of each row
            original = idx.expand(len(tokens), length).clone()  # (n, T)
            changed = original.clone()
            changed[torch.arange(len(tokens)), tokens] = (idx[tokens] + 1) % vocab_size
            delta = (model(changed) - model(original)).abs().flatten(2).amax(-1)  # (n, T): per output position
            for row, t in enumerate(tokens.tolist()):
                before = delta[row, :t]
                if t and float(before.max()) > atol:
                    where = int(torch.nonzero(before > atol)[0])
                    leaks.append(Leak(token=t, position=where, change=float(before[where])))
                largest = max(largest, float(before.max()) if t else 0.0)
                if float(delta[row, t]) <= atol:
                    unseen.append(t)
        return CausalityResult(length, tuple(leaks), tuple(unseen), largest, atol)
    finally:
        model.train(was_training)


@dataclass(frozen=True)
class GradientResult:
    """One training step's forward and backward: whether the logits and every gradient are
    finite, and the parameters that got no gradient (unused by the loss)."""

    finite_outputs: bool
    non_finite: tuple[str, ...]
    unused: tuple[str, ...]


def gradient_check(model: nn.Module, *, vocab_size: int, length: int, seed: int = 0) -> GradientResult:
    """Cross-entropy of next-token prediction on random tokens (batch 2), backward, in train mode."""
    generator = torch.Generator().manual_seed(seed + 1)
    idx = torch.randint(0, vocab_size, (2, length + 1), generator=generator)
    model.train()
    model.zero_grad(set_to_none=True)
    logits = model(idx[:, :-1])  # (2, T, V)
    F.cross_entropy(logits.float().flatten(0, 1), idx[:, 1:].flatten()).backward()
    named = list(model.named_parameters())
    result = GradientResult(
        finite_outputs=bool(torch.isfinite(logits).all()),
        non_finite=tuple(n for n, p in named if p.grad is not None and not bool(torch.isfinite(p.grad).all())),
        unused=tuple(n for n, p in named if p.requires_grad and p.grad is None),
    )
    model.zero_grad(set_to_none=True)
    return result


@dataclass(frozen=True)
class GraphResult:
    """How ``torch._dynamo`` traces the model's forward: graphs, breaks and the first reasons."""

    graphs: int
    breaks: int
    reasons: tuple[str, ...] = ()

    @property
    def one_graph(self) -> bool:
        return self.graphs == 1 and self.breaks == 0


def graph_check(model: nn.Module, *, vocab_size: int, length: int) -> GraphResult:
    """``torch._dynamo.explain`` of one forward (tracing only, no code generation)."""
    import torch._dynamo as dynamo

    dynamo.reset()
    try:
        explained = dynamo.explain(model.eval())(torch.randint(0, vocab_size, (2, length)))
    finally:
        dynamo.reset()
    reasons = tuple(str(r.reason).splitlines()[0] for r in explained.break_reasons[:3])
    return GraphResult(explained.graph_count, explained.graph_break_count, reasons)


@dataclass(frozen=True)
class CheckLine:
    """One line of a check's report; ``passed`` None: reported, not enforced."""

    check: str
    passed: bool | None
    detail: str


@dataclass(frozen=True)
class VariantCheck:
    """Every check of one variant at one size (:func:`check_variant`)."""

    variant: Variant
    size: ModelSize
    components: dict[str, str]
    causality: CausalityResult
    gradients: GradientResult
    parameters: int
    baseline_parameters: int
    graphs: GraphResult | None = None

    @property
    def ok(self) -> bool:
        """Causal with finite outputs and gradients (what a study requires before it starts)."""
        g = self.gradients
        return self.causality.causal and g.finite_outputs and not g.non_finite

    def lines(self) -> list[CheckLine]:
        g, extra = self.gradients, self.parameters - self.baseline_parameters
        unused = f"; no gradient reaches {', '.join(g.unused)}" if g.unused else ""
        out = [
            CheckLine("causal", self.causality.causal, self.causality.describe()),
            CheckLine(
                "finite outputs",
                g.finite_outputs,
                "logits of one training step" + ("" if g.finite_outputs else ": not finite"),
            ),
            CheckLine(
                "finite gradients",
                not g.non_finite,
                (f"not finite: {', '.join(g.non_finite)}" if g.non_finite else "every gradient of one step") + unused,
            ),
            CheckLine(
                "parameters",
                None,
                f"{self.parameters:,} ({extra:+,} against baseline, {100.0 * extra / self.baseline_parameters:+.3f} %; "
                f"{extra / self.size.n_layer:+,.0f} per layer)",
            ),
        ]
        if self.graphs is not None:
            gr = self.graphs
            why = f": {'; '.join(gr.reasons)}" if gr.reasons else ""
            out.append(
                CheckLine("one graph", None, f"torch.compile traces {gr.graphs} graph(s), {gr.breaks} break(s){why}")
            )
        return out

    def refusal(self) -> str:
        """Why a study refuses this variant (only when not :attr:`ok`)."""
        failed = [f"{line.check}: {line.detail}" for line in self.lines() if line.passed is False]
        return (
            f"variant {self.variant.name!r} ({self.variant.describe()}) fails its check before training: "
            + "; ".join(failed)
        )


def describe_component(slot: str, name: str, search_dir: str | Path | None) -> str:
    """``forget:ForgetGate (class forget.ForgetGate, /path/forget.py)``: where a user's component came from."""
    cls = resolve_component(name, slot=slot, search_dir=search_dir)
    module = sys.modules.get(cls.__module__)
    where = getattr(module, "__file__", None)
    return f"{name} (class {cls.__module__}.{cls.__qualname__}" + (f", {where})" if where else ")")


def check_variant(
    variant: str | Variant,
    *,
    size: str | ModelSize = "nano",
    length: int = 64,
    vocab_size: int = 13,
    component_dir: str | Path | None = None,
    graphs: bool = True,
    seed: int = 0,
) -> VariantCheck:
    """Run every check on ``variant`` at ``size`` and ``length`` tokens (see the module
    docstring). A user component that cannot be imported or constructed raises
    :class:`~harness.errors.InputError` with the reason."""
    v, s = get_variant(variant), get_size(size)
    where = str(component_dir) if component_dir is not None else None

    def build() -> nn.Module:
        torch.manual_seed(seed)
        return build_model(v, size=s, vocab_size=vocab_size, block_size=length, component_dir=where)

    model = perturb_parameters(build(), seed=seed)
    causality = causality_probe(model, vocab_size=vocab_size, length=length, seed=seed)
    fresh = build()
    gradients = gradient_check(fresh, vocab_size=vocab_size, length=length, seed=seed)
    with torch.device("meta"):
        baseline = build_model("baseline", size=s, vocab_size=vocab_size, block_size=length).num_parameters()
    return VariantCheck(
        variant=v,
        size=s,
        components={slot: describe_component(slot, name, where) for slot, name in v.user_components.items()},
        causality=causality,
        gradients=gradients,
        parameters=fresh.num_parameters(),
        baseline_parameters=baseline,
        graphs=graph_check(fresh, vocab_size=vocab_size, length=length) if graphs else None,
    )


__all__ = [
    "CAUSAL_ATOL",
    "CausalityResult",
    "CheckLine",
    "GradientResult",
    "GraphResult",
    "Leak",
    "VariantCheck",
    "causality_probe",
    "check_variant",
    "describe_component",
    "gradient_check",
    "graph_check",
    "perturb_parameters",
]
