"""Which accountant an audited ε comes from, said wherever the ε is printed.

Accountants disagree (Opacus' RDP puts a training dp_accounting's PLD calls ε = 3.998 at 4.009),
so a bare ε lets a user read their claim as "> 4" in one place and "< 4" in another. Every audit
result therefore carries :class:`Accounted`: the accountant its claim was checked against and the
ε it gives for the phases, and, where the user's engine is Opacus (:mod:`.gradient_canaries`),
what that engine's own accountant says of the training as run, with one line on why they differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import accounting

#: what each built-in accountant is, for the line (a user's own is named by its registered name).
LIBRARY = {"pld": "dp_accounting's PLD", "rdp": "Opacus' RDP", "prv": "Opacus' PRV"}

#: why an Opacus engine's accountant (its ``mechanism()``) reads differently from ours.
WHY_THEY_DIFFER = {
    "rdp": "RDP converts Rényi DP to (ε, δ) by an upper bound, looser than the privacy-loss distribution's "
    "near-exact ε, so it reads higher for the same σ, q and T; both bound the same training",
    "prv": "PRV and PLD both compute the privacy-loss distribution numerically, each with its own "
    "discretisation and truncation: close at moderate ε, they can part at large ε (PRV 16 where PLD "
    "puts 10.8)",
    "gdp": "Opacus' GDP accountant uses the central-limit approximation of subsampled Gaussian steps, an "
    "estimate that can fall below the true ε; it is not a bound",
}


@dataclass(frozen=True)
class Accounted:
    """The claim's ε and where it comes from: ``accountant`` checked it against the phases
    (``epsilon`` its figure for them; None without phases: the ε is as stated), and ``engine``
    the user's Opacus accountant (its ``mechanism()``) with ``engine_epsilon``, its
    ``get_epsilon(δ)`` for the training as run (None where the engine is not Opacus)."""

    claimed: float
    delta: float
    accountant: str
    epsilon: float | None
    engine: str | None = None
    engine_epsilon: float | None = None

    @classmethod
    def of(
        cls, claimed: float, delta: float, phases: Sequence[accounting.GaussianPhase] | None, accountant: str
    ) -> Accounted:
        """The claim as ``accountant`` accounts its ``phases`` (the figure :func:`.scores.check_claim`
        compared the stated ε with, asked once per process)."""
        spent = accounting.epsilon(phases, delta, accountant) if phases else None
        return cls(float(claimed), float(delta), accountant, spent)

    def line(self) -> str:
        """One line: the claimed ε, the accountant behind it, and the user's engine beside it."""
        name = LIBRARY.get(self.accountant, f"your {self.accountant!r}")
        if self.epsilon is None:
            head = (
                f"claimed ε = {self.claimed:g} at δ = {self.delta:g} as stated (no phases: no accountant computed it)"
            )
        else:
            head = (
                f"claimed ε = {self.claimed:g} at δ = {self.delta:g}, accounted by {self.accountant} ({name}): "
                f"ε = {self.epsilon:.4g} for the phases"
            )
        if self.engine is None or self.engine_epsilon is None:
            return head
        engine = f"your Opacus engine's {self.engine} accountant gives ε = {self.engine_epsilon:.4g} for the training"
        why = WHY_THEY_DIFFER.get(self.engine)
        same = self.engine == self.accountant or why is None
        return f"{head}; {engine}" + ("" if same else f" ({why})")

    def to_dict(self) -> dict[str, Any]:
        engine = {} if self.engine is None else {"engine": self.engine, "engine_epsilon": self.engine_epsilon}
        return {"accountant": self.accountant, "accounted_epsilon": self.epsilon, **engine, "line": self.line()}
