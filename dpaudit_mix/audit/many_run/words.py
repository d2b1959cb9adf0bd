"""What a many-run result says in words: its verdict, naming the test that fired and what it does
not show, and its power."""

from __future__ import annotations

from .scores import AuditResult


def verdict_line(result: AuditResult, epsilon: float) -> str:
    """The verdict in words: what the test that fired shows, and what it does not."""
    if result.epsilon_violation:
        return (
            f"VIOLATION (ε violated): the strict lower bound ε_LB = {result.epsilon_lower_bound:.3f} exceeds the "
            "claimed "
            f"ε = {epsilon:g}; no (ε, δ)-DP mechanism produces these counts."
        )
    if result.profile_violation:
        return (
            "VIOLATION (curve violated): a CP point lies below the claimed mechanism's trade-off curve, so the "
            "mechanism is "
            f"not the claimed one (its σ-scaled family's ε_LB is {result.epsilon_lower_bound_profile:.3f}); the "
            f"(ε, δ) claim itself is not shown violated (strict ε_LB {result.epsilon_lower_bound:.3f} ≤ {epsilon:g})."
        )
    if result.curve == "none":
        compared = (
            "; beside it, a CP point lies below the μ-GDP curve of that ε — a comparison with an assumed Gaussian "
            "shape, not a violation (a pure-ε mechanism lies there too)"
            if result.gdp_comparison
            else ""
        )
        return (
            f"No violation: the strict ε_LB {result.epsilon_lower_bound:.3f} is at most the claimed ε (the claim is "
            f"(ε, δ) alone: give phases, or curve='gdp', to test a trade-off curve){compared}."
        )
    return (
        "No violation: every CP point lies on or above the claimed trade-off curve, and the strict ε_LB "
        f"{result.epsilon_lower_bound:.3f} is at most the claimed ε."
    )


def power_line(result: AuditResult) -> str:
    """What this many runs could show at best (an attack with no error at all)."""
    bound = (
        f"Power: from {result.runs} runs an attack with no error at all certifies a strict ε_LB of at most "
        f"{result.epsilon_lower_bound_max:.3f}"
    )
    simulated = (
        f" No power was simulated: {result.power_unsimulated}."
        if result.power is None
        else f" At this size, {result.power.line(str(result.runs) + ' runs')}."
    )
    if result.curve == "none":
        return bound + " (no curve was claimed)." + simulated
    curve = "could" if result.curve_detectable else "could NOT"
    return f"{bound}, and {curve} fall below the claimed curve." + simulated
