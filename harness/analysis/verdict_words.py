"""The words a verdict adds when its test is weaker than its interval looks: few seeds,
per-seed values of a doubtful shape, a claim that does not survive Holm's adjustment, a
study that stopped on its data. Each returns a phrase the result objects and the report
put beside the verdict, so every rendering says the same.
"""

from __future__ import annotations

import math
from typing import Any


def _fmt(x: float | None, signed: bool = True, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def format_interval(ci: Any, signed: bool = True, digits: int = 3) -> str:
    """``[low, high]`` with signs, or ``n/a`` when there is no interval."""
    if ci is None:
        return "n/a"
    low, high = ci  # a ConfidenceInterval or a (low, high) pair
    return f"[{_fmt(low, signed, digits)}, {_fmt(high, signed, digits)}]"


def format_pvalue(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


#: What every t-based verdict assumes, said in the verdict table's footer.
T_ASSUMPTION = "t-based rows assume roughly normal per-seed values (a Shapiro-Wilk check is beside any that fail it)"

#: Below this many seeds a verdict says how few it rests on (a two-sided sign-flip test
#: cannot reject at 0.05 below 6 seeds: its smallest p is 2 / 2^n).
FEW_SEEDS = 6


def smallest_sign_flip_p(n: int, alternative: str = "two-sided") -> float:
    """The smallest p-value an exact sign-flip test can give with ``n`` seeds."""
    return (2.0 if alternative == "two-sided" else 1.0) / 2.0**n


def few_seeds_words(n: int, *, alternative: str = "two-sided", alpha: float = 0.05) -> str:
    """``"at 2 seeds: 1 degree of freedom; the sign-flip test cannot reject"`` below
    :data:`FEW_SEEDS` seeds (from 2), ``""`` otherwise. With 1 degree of freedom the sd's
    95 % interval spans x0.45 to x32."""
    if not 2 <= n < FEW_SEEDS:
        return ""
    df = n - 1
    text = f"at {n} seeds: {df} degree{'s' if df != 1 else ''} of freedom"
    if smallest_sign_flip_p(n, alternative) >= alpha:
        text += "; the sign-flip test cannot reject"
    return text


def shape_words(shape: Any, pvalue: float | None, permutation_pvalue: float | None, *, claims: bool) -> str:
    """Beside a t-based verdict whose per-seed values fail the shape check
    (:class:`~harness.analysis.shape.ShapeCheck`): the check, the t p beside the sign-flip
    p, and, when the interval excludes 0, that the claim is withheld."""
    ps = f"t p={format_pvalue(pvalue)}, sign-flip p={format_pvalue(permutation_pvalue)}"
    if claims:
        return f"{shape.words}: claim withheld ({ps}; both assume symmetric per-seed values)"
    return f"{shape.words}: {ps}"


def not_after_holm(quantity: str, estimate: float, ci: Any, p_holm: float) -> str:
    """A claim that fails Holm's adjustment loses its words:
    ``"not significant after Holm (p=0.08): slope +0.012 [-0.001, +0.025] before adjustment"``."""
    est = "n/a" if estimate is None or not math.isfinite(estimate) else f"{estimate:+.3g}"
    return (
        f"not significant after Holm (p={format_pvalue(p_holm)}): {quantity} {est} "
        f"{format_interval(ci)} before adjustment"
    )


def descriptive_after_stop(verdict: str) -> str:
    """A secondary verdict of a study that stopped on its data: its fixed-n interval is
    descriptive, and so are its words."""
    return f"descriptive only (the study stopped on its data): {verdict}"


__all__ = [
    "FEW_SEEDS",
    "T_ASSUMPTION",
    "descriptive_after_stop",
    "few_seeds_words",
    "format_interval",
    "format_pvalue",
    "not_after_holm",
    "shape_words",
    "smallest_sign_flip_p",
]
