"""Checks of a variant before anything trains: its slots' contracts on a probe batch, the
causality probe that proves the zoo, finite outputs and gradients, the parameter count against
the baseline, and whether ``torch.compile`` traces the model as one graph.

The probe is the zoo's own proof (tests/models/test_models_model.py runs it on every variant)
and the gate every user component passes (``harness zoo check``, and the check a study naming
a user component runs before any trial starts, at each of its context lengths):

    for every split point t: change every token at positions >= t (each to another token) and run
    the model;   causal  <=>  max_{s < t} |out_s(changed) - out_s(original)| <= atol  for every t

- **at the length that trains.** Code whose reach into the future depends on the length (a
  statistic taken only beyond some length, a window wider than a short probe, a pad to a fixed
  size) is invisible to a shorter probe: a study probes at each of its context lengths, and
  ``harness zoo check --length`` says when it probes shorter than a spec beside it trains.
- **in both modes.** In eval mode, and in train mode with dropout active (:data:`PROBE_DROPOUT`
  on embeddings, residual branches and attention weights) and gradients enabled, as a training
  step runs: code that branches on ``self.training`` or on gradients (a checkpointed path) is
  probed as it trains. The original and the changed rows of a chunk are run from one random
  state, so they draw the same dropout masks: only the changed tokens differ between them.
- **on several inputs.** For each seed of :data:`PROBE_SEEDS`, its own random sequence and its
  own move of every parameter off its initial value (``perturb``, N(0, 0.2^2)): a component
  whose parameters start at zero (a lag weight, a gate's bias) could hide a leak at initialisation.

Changing the whole suffix from t, not the token at t alone, catches a leak from any later
token into any output before t in one row. The split points (:func:`split_points`) are every
position up to :data:`PROBE_SPLITS` tokens; beyond, the first and the last PROBE_SPLITS / 4
positions and PROBE_SPLITS / 2 spread evenly between. A leak from token u into output s < u is
seen at every split in (s, u]: always when it lies within the first or last PROBE_SPLITS / 4
positions or reaches further than the spacing (at most (T - PROBE_SPLITS / 2) / (PROBE_SPLITS / 2)
positions), which code that reads sequence statistics, rolls or windows does at every position.
The first leak is named by the earliest split that moves an earlier output, and the earliest
output it moves.

Cost: chunks of rows (one row per split, :data:`PROBE_CHUNK_TOKENS` tokens a forward); the
original of a chunk is run once per shape, so a probe costs about min(T, PROBE_SPLITS) T tokens
of forward per mode and seed: 4 x 128 x 128 tokens at T = 128 (a second or two for ``nano``).

Before the probe, each slot's output is checked against its contract on a probe batch
(:mod:`harness.models.components_contracts`): a breach names the slot, the class, the shape
expected and the shape returned, and the model is not run. Graph breaks are reported, never
enforced: they cost speed, not correctness (and tracing takes seconds on CPU, so a study checks
them only when it compiles).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.errors import InputError
from harness.models.components import resolve_component
from harness.models.components_contracts import ContractBreach, check_contracts
from harness.models.sizes import ModelSize, get_size
from harness.models.transformer import build_model
from harness.models.variants import Variant, get_variant

#: Largest change of an earlier output that still counts as unchanged (the zoo's test's tolerance).
CAUSAL_ATOL = 1e-6
#: Scale of the noise added to every parameter before the probe.
PERTURB_SCALE = 0.2
#: Most split points of one probe: every position up to this length, a schedule beyond it.
PROBE_SPLITS = 128
#: The probe's seeds: each its own random sequence and its own perturbation of the parameters.
PROBE_SEEDS: tuple[int, ...] = (0, 1)
#: The modes the probe runs the model in (train: dropout active, gradients enabled).
PROBE_MODES: tuple[str, ...] = ("eval", "train")
#: Dropout of the model the train-mode probe runs (embeddings, residual branches, attention weights).
PROBE_DROPOUT = 0.1
#: Tokens of one forward of the probe (rows of a chunk x length; at least one row).
PROBE_CHUNK_TOKENS = 8192


def split_points(length: int, budget: int = PROBE_SPLITS) -> tuple[int, ...]:
    """The probe's split points (module docstring): every position of ``length`` when it is at
    most ``budget``; else the first and last ``budget // 4`` positions and ``budget // 2``
    spread evenly between them."""
    if length <= budget:
        return tuple(range(length))
    edge, inner = budget // 4, budget - 2 * (budget // 4)
    span = length - 2 * edge - 1
    spread = {edge + round(i * span / (inner - 1)) for i in range(inner)}
    return tuple(sorted({*range(edge), *spread, *range(length - edge, length)}))


@dataclass(frozen=True)
class Leak:
    """Changing the tokens from ``split`` on moved the output at ``position`` < split by ``change``
    (the largest |change| of a logit there)."""

    split: int
    position: int
    change: float


@dataclass(frozen=True)
class ProbeRun:
    """The probe in one ``mode`` (``eval`` or ``train``) on the input and parameters of one
    ``seed``: every split that moved an earlier output (:class:`Leak`, in order of the split),
    the splits whose change did not even reach their own output (where the probe is blind),
    and the largest change before any split."""

    mode: str
    seed: int
    leaks: tuple[Leak, ...]
    unseen: tuple[int, ...]
    largest_change: float


@dataclass(frozen=True)
class CausalityResult:
    """What the probe saw over ``length`` positions at ``splits`` split points, one
    :class:`ProbeRun` per mode and seed."""

    length: int
    splits: int
    runs: tuple[ProbeRun, ...]
    atol: float = CAUSAL_ATOL
    dropout: float = PROBE_DROPOUT

    @property
    def causal(self) -> bool:
        return not any(run.leaks for run in self.runs)

    @property
    def leaking_run(self) -> ProbeRun | None:
        """The first run (eval mode first) that saw a leak."""
        return next((run for run in self.runs if run.leaks), None)

    @property
    def leaks(self) -> tuple[Leak, ...]:
        run = self.leaking_run
        return run.leaks if run is not None else ()

    @property
    def first_leak(self) -> Leak | None:
        return self.leaks[0] if self.leaks else None

    @property
    def unseen(self) -> tuple[int, ...]:
        return tuple(sorted({t for run in self.runs for t in run.unseen}))

    @property
    def largest_change(self) -> float:
        return max((run.largest_change for run in self.runs), default=0.0)

    def _modes(self, modes: Sequence[str]) -> str:
        names = [f"train mode (dropout {self.dropout:g})" if m == "train" else f"{m} mode" for m in modes]
        return " and ".join(names)

    def describe(self) -> str:
        """One sentence: the verdict and its evidence."""
        modes = list(dict.fromkeys(run.mode for run in self.runs))
        inputs = len({run.seed for run in self.runs})
        if self.causal:
            blind = f"; {len(self.unseen)} change(s) did not reach their own output" if self.unseen else ""
            return (
                f"changing the tokens from any of {self.splits} split points of {self.length} positions on never "
                f"moved an earlier output, in {self._modes(modes)}, on {inputs} random input(s) "
                f"(largest change {self.largest_change:.1e}, tolerance {self.atol:g}){blind}"
            )
        run = self.leaking_run
        first = run.leaks[0]
        clean = [m for m in modes if not any(r.leaks for r in self.runs if r.mode == m)]
        only = f" in {self._modes([run.mode])}, not in {self._modes(clean)}" if clean else ""
        return (
            f"reads the future{only}: changing the tokens from position {first.split} on moved the output at "
            f"position {first.position} by {first.change:.2e} ({self._modes([run.mode])}, seed {run.seed}'s input; "
            f"{len(run.leaks)} of {self.splits} split points of {self.length} positions reach earlier outputs)"
        )


def perturb_parameters(model: nn.Module, *, scale: float = PERTURB_SCALE, seed: int = 0) -> nn.Module:
    """Add N(0, scale^2) to every parameter in place (the probe's model: no value at its init)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float32).to(p.device, p.dtype)
            p.add_(scale * noise)
    return model


def _run(model: nn.Module, idx: Tensor, seed: int) -> Tensor:
    """``model(idx)`` from the random state of ``seed`` (the same dropout masks for equal shapes),
    leaving the caller's random state as it was; the largest |output| per row and position."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model(idx).detach().float()  # (n, T, ...)


def _probe_run(
    model: nn.Module, idx: Tensor, changed_all: Tensor, at: Tensor, *, mode: str, seed: int, atol: float, chunk: int
) -> ProbeRun:
    length = idx.numel()
    leaks, unseen, largest = [], [], 0.0
    originals: dict[int, Tensor] = {}
    positions = torch.arange(length)
    for start in range(0, len(at), chunk):
        splits = at[start : start + chunk]  # (n,): the split point of each row
        n = len(splits)
        suffix = positions[None, :] >= splits[:, None]  # (n, T): the tokens each row changes
        changed = torch.where(suffix, changed_all, idx)  # (n, T)
        if n not in originals:  # one original per shape: the same input and the same masks
            originals[n] = _run(model, idx.expand(n, length).clone(), seed)
        delta = (_run(model, changed, seed) - originals[n]).abs().flatten(2).amax(-1)  # (n, T): per output
        for row, t in enumerate(splits.tolist()):
            before = delta[row, :t]
            if t and float(before.max()) > atol:
                where = int(torch.nonzero(before > atol)[0])
                leaks.append(Leak(split=t, position=where, change=float(before[where])))
            largest = max(largest, float(before.max()) if t else 0.0)
            if float(delta[row, t]) <= atol:
                unseen.append(t)
    return ProbeRun(mode, seed, tuple(leaks), tuple(unseen), largest)


def causality_probe(
    model: nn.Module,
    *,
    vocab_size: int,
    length: int,
    splits: Sequence[int] | None = None,
    atol: float = CAUSAL_ATOL,
    seed: int = 0,
    modes: Sequence[str] = ("eval",),
    chunk_tokens: int = PROBE_CHUNK_TOKENS,
) -> CausalityResult:
    """The probe of the module docstring on ``model`` (token ids (N, T) -> outputs (N, T, ...))
    as it is, on the random sequence of ``seed``, in each of ``modes`` (``train``: dropout as the
    model has it, gradients enabled), changing the tokens from each of ``splits`` on (default
    :func:`split_points`)."""
    unknown = sorted(set(modes) - set(PROBE_MODES))
    if unknown:
        raise ValueError(f"unknown probe mode(s) {', '.join(unknown)}; modes: {', '.join(PROBE_MODES)}")
    generator = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab_size, (length,), generator=generator)
    changed_all = (idx + torch.randint(1, vocab_size, (length,), generator=generator)) % vocab_size  # every one differs
    at = torch.tensor(sorted(set(split_points(length) if splits is None else splits)))
    chunk = max(1, chunk_tokens // length)
    was_training, runs = model.training, []
    try:
        for mode in modes:
            model.train(mode == "train")
            with torch.set_grad_enabled(mode == "train"):
                runs.append(_probe_run(model, idx, changed_all, at, mode=mode, seed=seed, atol=atol, chunk=chunk))
    finally:
        model.train(was_training)
    dropout = max((m.p for m in model.modules() if isinstance(m, nn.Dropout)), default=0.0)
    return CausalityResult(length, len(at), tuple(runs), atol, dropout)


def probe_causality(
    build: Callable[[], nn.Module],
    *,
    vocab_size: int,
    length: int,
    seeds: Sequence[int] = PROBE_SEEDS,
    modes: Sequence[str] = PROBE_MODES,
    splits: Sequence[int] | None = None,
) -> CausalityResult:
    """The full probe: for each of ``seeds``, a model from ``build`` (built with dropout, for the
    train mode) with its parameters perturbed by that seed, probed on that seed's input in each
    of ``modes``; the runs of every seed in one result."""
    results = [
        causality_probe(
            perturb_parameters(build(), seed=seed),
            vocab_size=vocab_size,
            length=length,
            splits=splits,
            seed=seed,
            modes=modes,
        )
        for seed in seeds
    ]
    runs = tuple(sorted((r for res in results for r in res.runs), key=lambda r: (PROBE_MODES.index(r.mode), r.seed)))
    first = results[0]
    return CausalityResult(length, first.splits, runs, first.atol, max(r.dropout for r in results))


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
    """Every check of one variant at one size and length (:func:`check_variant`). When a
    contract is broken the model is not run: ``causality`` and ``gradients`` are None."""

    variant: Variant
    size: ModelSize
    length: int
    components: dict[str, str]
    contracts: tuple[ContractBreach, ...]
    causality: CausalityResult | None
    gradients: GradientResult | None
    parameters: int
    baseline_parameters: int
    graphs: GraphResult | None = None

    @property
    def ok(self) -> bool:
        """Its contracts kept, causal, finite outputs and gradients (what a study requires before it starts)."""
        if self.contracts or self.causality is None or self.gradients is None:
            return False
        g = self.gradients
        return self.causality.causal and g.finite_outputs and not g.non_finite

    def _contract_line(self) -> CheckLine:
        if self.contracts:
            return CheckLine("contracts", False, "; ".join(b.describe() for b in self.contracts))
        told = f"every slot's output has its shape, float32 and finite (probe batch of {self.length} tokens)"
        return CheckLine("contracts", True, told)

    def lines(self) -> list[CheckLine]:
        out = [self._contract_line()]
        if self.causality is not None:
            out.append(CheckLine("causal", self.causality.causal, self.causality.describe()))
        g = self.gradients
        if g is not None:
            unused = f"; no gradient reaches {', '.join(g.unused)}" if g.unused else ""
            finite = "every gradient of one step"
            out += [
                CheckLine(
                    "finite outputs",
                    g.finite_outputs,
                    "logits of one training step" + ("" if g.finite_outputs else ": not finite"),
                ),
                CheckLine(
                    "finite gradients",
                    not g.non_finite,
                    (f"not finite: {', '.join(g.non_finite)}" if g.non_finite else finite) + unused,
                ),
            ]
        extra = self.parameters - self.baseline_parameters
        out.append(
            CheckLine(
                "parameters",
                None,
                f"{self.parameters:,} ({extra:+,} against baseline, {100.0 * extra / self.baseline_parameters:+.3f} %; "
                f"{extra / self.size.n_layer:+,.0f} per layer)",
            )
        )
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
            f"variant {self.variant.name!r} ({self.variant.describe()}) fails its check before training at "
            f"{self.length} tokens: " + "; ".join(failed)
        )


def describe_component(slot: str, name: str, search_dir: str | Path | None) -> str:
    """``forget:ForgetGate (class forget.ForgetGate, /path/forget.py)``: where a user's component came from."""
    cls = resolve_component(name, slot=slot, search_dir=search_dir)
    module = sys.modules.get(cls.__module__)
    where = getattr(module, "__file__", None)
    return f"{name} (class {cls.__module__}.{cls.__qualname__}" + (f", {where})" if where else ")")


def _running(v: Variant, length: int, what: str, run: Callable[[], object]) -> object:
    """``run()``, an exception of the model's forward turned into an InputError naming the variant,
    its components and the step (a component that keeps its contract on the probe batch may
    still fail inside the model)."""
    try:
        return run()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a component's failure, in one message with its names
        raise InputError(
            f"variant {v.name!r} ({v.describe()}) fails before training at {length} tokens: {what} raised "
            f"{type(exc).__name__}: {exc}"
        ) from None


def check_variant(
    variant: str | Variant,
    *,
    size: str | ModelSize = "nano",
    length: int = 64,
    vocab_size: int = 13,
    component_dir: str | Path | None = None,
    graphs: bool = True,
    seed: int = 0,
    seeds: Sequence[int] = PROBE_SEEDS,
    modes: Sequence[str] = PROBE_MODES,
) -> VariantCheck:
    """Run every check on ``variant`` at ``size`` and ``length`` tokens (see the module
    docstring): the contracts, then (when they hold) the causality probe in ``modes`` on the
    inputs of ``seeds``, the finite outputs and gradients of one training step (``seed``), and
    the graphs. A user component that cannot be imported or constructed, or whose model fails
    in its forward pass, raises :class:`~harness.errors.InputError` with the reason."""
    v = variant if isinstance(variant, Variant) else get_variant(variant)  # a Variant is resolved already
    s = get_size(size)
    where = str(component_dir) if component_dir is not None else None

    def build(dropout: float = 0.0) -> nn.Module:
        torch.manual_seed(seed)
        return build_model(v, size=s, vocab_size=vocab_size, block_size=length, dropout=dropout, component_dir=where)

    fresh = build()
    with torch.device("meta"):
        baseline = build_model("baseline", size=s, vocab_size=vocab_size, block_size=length).num_parameters()
    contracts = check_contracts(fresh, length=length)
    causality = gradients = graph = None
    if not contracts:
        causality = _running(
            v,
            length,
            "the causality probe",
            lambda: probe_causality(
                lambda: build(PROBE_DROPOUT), vocab_size=vocab_size, length=length, seeds=seeds, modes=modes
            ),
        )
        gradients = _running(
            v, length, "a training step", lambda: gradient_check(fresh, vocab_size=vocab_size, length=length, seed=seed)
        )
        graph = graph_check(fresh, vocab_size=vocab_size, length=length) if graphs else None
    return VariantCheck(
        variant=v,
        size=s,
        length=length,
        components={slot: describe_component(slot, name, where) for slot, name in v.user_components.items()},
        contracts=contracts,
        causality=causality,
        gradients=gradients,
        parameters=fresh.num_parameters(),
        baseline_parameters=baseline,
        graphs=graph,
    )


__all__ = [
    "CAUSAL_ATOL",
    "PROBE_DROPOUT",
    "PROBE_MODES",
    "PROBE_SEEDS",
    "PROBE_SPLITS",
    "CausalityResult",
    "CheckLine",
    "GradientResult",
    "GraphResult",
    "Leak",
    "ProbeRun",
    "VariantCheck",
    "causality_probe",
    "check_variant",
    "describe_component",
    "gradient_check",
    "graph_check",
    "perturb_parameters",
    "probe_causality",
    "split_points",
]
