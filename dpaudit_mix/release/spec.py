"""A release spec (``releases/*.toml``): what is released, under which claim, audited how."""

from __future__ import annotations

from dataclasses import dataclass

from .. import accounting
from ..audit.attack import THRESHOLDS
from ..audit.mixmin_canaries import CANARY_KINDS, NATURAL_POLICIES, check_canary_kinds
from ..audit.plan import check_detect
from ..base.errors import require
from ..base.specfile import Seed, check_fields
from ..data import registry
from ..learner import LearnerConfig, learner_config

#: the fewest runs per canary a release's audit may take (check-release holds a manifest to it).
MIN_AUDIT_RUNS = 1000


def check_no_ledger(ledger: str) -> None:
    """A release spec's ``ledger`` key is refused: one budget per data set holds only where every
    release on the data charges the ledger the machine or the team keeps, never one a spec names."""
    require(
        ledger == "",
        f"the spec key ledger = {ledger!r} is refused: a release charges the ledger the machine or team keeps; "
        "name it with $DPAUDIT_MIX_LEDGER or --ledger",
    )


@dataclass(frozen=True)
class ReleaseSpec:
    """Every key optional in the TOML file; unknown keys are rejected."""

    problem: str = "mnist"  # an embedded problem name, or a path to a problem file
    task: str = registry.DEFAULT_TASK
    epsilon: float = 1.0
    delta: float = 1e-5
    steps: int = 100
    clip: float = LearnerConfig.clip
    sample_rate: float = 1.0
    learning_rate: float = 1.0
    user_level: bool = False
    accountant: str = accounting.DEFAULT_ACCOUNTANT  # the one that calibrates σ
    # the audit: the leak it must catch (σ/detect flagged with 90 %), and its runs per canary
    # (default: the fewest that catch it, planned from the claim; a given count that does not is refused)
    detect: float = 2.0
    audit_runs: int | None = None
    audit_canaries: tuple[str, ...] = CANARY_KINDS
    natural_policy: str = "most_influential"
    threshold: str = "bonferroni"
    confidence: float = 0.95
    seed: Seed = 0  # the audit's seed (the released λ's noise comes from the OS CSPRNG)
    chunk_size: int = 4096
    budget_epsilon: float | None = (
        None  # the data's cap, fixed in the ledger by its first release (then: that or unset)
    )
    ledger: str = ""  # refused: the budget lives where the machine or team keeps it, not where a spec points
    # "rows": key a problem file by its rows (said on the card), where it carries no signed identity
    identity: str = ""

    def __post_init__(self) -> None:
        check_fields(self)
        check_no_ledger(self.ledger)
        require(self.identity in ("", "rows"), f'identity must be "rows" or left out, got {self.identity!r}')
        accounting.check_epsilon(self.epsilon)
        accounting.check_delta(self.delta)
        self.learner()
        accounting.check_accountant(self.accountant)
        check_detect(self.detect)
        require(
            self.audit_runs is None or self.audit_runs >= MIN_AUDIT_RUNS,
            f"audit_runs must be >= {MIN_AUDIT_RUNS}, got {self.audit_runs}",
        )
        check_canary_kinds(self.audit_canaries, "audit_canaries")
        require(
            self.natural_policy in NATURAL_POLICIES,
            f"natural_policy must be one of {NATURAL_POLICIES}, got {self.natural_policy!r}",
        )
        THRESHOLDS.get(self.threshold)
        require(0 < self.confidence < 1, f"confidence must be in (0, 1), got {self.confidence}")
        if self.budget_epsilon is not None:
            require(
                self.budget_epsilon >= self.epsilon,
                f"budget_epsilon must be at least this release's epsilon {self.epsilon:g}, got {self.budget_epsilon}",
            )

    def learner(self, noise_multiplier: float = 0.0, *, secure: bool = False) -> LearnerConfig:
        """The released learner at σ = ``noise_multiplier`` (:func:`..learner.learner_config`)."""
        return learner_config(self, noise_multiplier=noise_multiplier, secure=secure)
