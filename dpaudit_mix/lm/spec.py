"""A text pipeline spec (``pipeline/shakespeare-users.toml``): methods, budgets, the user split
and the character LM's training; every privacy unit is a user (a speaker)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..base.alphabet import WINDOW
from ..base.errors import require
from ..base.resources import BYTES_PER_WINDOW, require_memory
from ..base.specfile import Seed, check_fields, load_spec_file
from ..data import registry
from ..data.text import GENRES, REHEARSAL_GENRE, SENSITIVE_GENRE
from ..learner import LearnerConfig
from ..pipeline.spec import DEFAULT_METHODS, check_shared_keys, variants


@dataclass(frozen=True)
class TextPipelineSpec:
    """Every key optional in the TOML file; unknown keys are rejected."""

    world: str = registry.TEXT_WORLD
    data: str | None = None  # instead of world: a text data manifest (.toml), relative to the working folder
    epsilons: tuple[float, ...] = (1.0, 2.0, 5.0)
    delta: float = 1e-5
    methods: tuple[str, ...] = DEFAULT_METHODS
    seeds: int = 3
    seed: Seed = 0  # the data seed: the speaker split and the A/B split of training speakers
    rho: float = 0.2  # split A (the mixing users) as a fraction of the training speakers
    composition: str = "parallel"  # parallel: A and B disjoint users; sequential: finetune on all, composed
    mix_share: float = 0.1  # sequential: the share of ε the mixture phase gets alone
    mix_steps: int = 100
    mix_clip: float = LearnerConfig.clip
    mix_learning_rate: float = 1.0
    search_candidates: int = 8
    pretrain_windows: int = 24000  # public windows sampled by λ
    # One pass at 3e-2, its last fifth at a tenth of that, on sequences of 24 characters, 128 a
    # step (chosen on the public rehearsal speakers' perplexity): a fifth less CPU than whole
    # windows, 64 a step at 1.5e-2, and two fifths of the two constant-rate passes at 3e-3 that 0.2
    # used (README, the text track).
    pretrain_epochs: int = 1
    pretrain_learning_rate: float = 3e-2
    pretrain_cooldown: float = 0.2  # the last share of the pretraining's steps, at a tenth of its rate
    pretrain_batch: int = 128  # sequences per Adam step of the non-private pretraining
    # characters per pretraining sequence: each drawn window is cut into WINDOW / pretrain_length
    # sequences (a shorter backpropagation through time; the finetune and the test read whole windows)
    pretrain_length: int = 24
    finetune_steps: int = 40
    finetune_users: float = 32.0  # expected users per step: q = finetune_users / users
    finetune_clip: float = 1.0  # C on each user's summed gradient
    finetune_learning_rate: float = 1e-3
    windows_per_user: int = 8  # a user's windows per step, at most
    # A fair finetune: with a grid given, every run picks its learning rate by one rule, the same
    # user-level DP finetune (same q, T, σ) rehearsed on half the speakers of a public genre and
    # scored by perplexity on the other half (no privacy spent); () = the fixed rate above.
    finetune_learning_rates: tuple[float, ...] = ()
    rehearsal_genre: str = REHEARSAL_GENRE  # the embedded world's; a text manifest rehearses on its validation
    protocol: str = "multiclass"  # the text world has one task (lm): per_task has nothing to split
    rhos: tuple[float, ...] | None = None  # rows: the pipeline once per split A fraction (paper Table 1)
    device: str = "cpu"  # where pretraining and the user-level finetune compute: cpu, cuda, or auto

    #: the fields no stage cache key names, each with why (see PipelineSpec.UNKEYED).
    UNKEYED: ClassVar[dict[str, str]] = {
        "epsilons": "which jobs run: each job's ε is in its own stage keys",
        "methods": "which jobs run: each job's method is in its own stage keys",
        "seeds": "how many jobs run: each job's seed is in its own stage keys",
        "protocol": "always multiclass: the text world has one task",
        "mix_share": "enters the mixture's key as the ε it spends (sequential composition)",
        "data": "names the world: it sets world",
        "rhos": "rows: each row runs as a spec of its own, with rho set",
    }

    def __post_init__(self) -> None:
        check_fields(self)
        if self.data is not None:
            require(self.world in (registry.TEXT_WORLD, self.data), "give world or data, not both")
            require(self.data.endswith(".toml"), f"data must name a data manifest (.toml), got {self.data!r}")
            object.__setattr__(self, "world", self.data)
        require(
            registry.is_text(self.world),
            f"the text pipeline runs the {registry.TEXT_WORLD} world or a text data manifest, not {self.world}",
        )
        check_shared_keys(self, DEFAULT_METHODS, " for the text pipeline")
        require(
            self.protocol == "multiclass",
            f"protocol = {self.protocol!r}: the text world has one task (lm), so its protocol is multiclass",
        )
        variants(self)
        for name in (
            "seeds",
            "search_candidates",
            "pretrain_windows",
            "pretrain_epochs",
            "pretrain_batch",
            "pretrain_length",
            "finetune_steps",
            "windows_per_user",
        ):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        require(
            WINDOW % self.pretrain_length == 0,
            f"pretrain_length must divide the {WINDOW}-character window, got {self.pretrain_length}",
        )
        require(0 <= self.pretrain_cooldown < 1, f"pretrain_cooldown must be in [0, 1), got {self.pretrain_cooldown}")
        for name in ("pretrain_learning_rate", "finetune_learning_rate", "finetune_clip", "finetune_users"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        require_memory(self.pretrain_windows * BYTES_PER_WINDOW, f"pretrain_windows = {self.pretrain_windows}")
        require(
            all(lr > 0 for lr in self.finetune_learning_rates),
            f"finetune_learning_rates must be > 0, got {list(self.finetune_learning_rates)}",
        )
        public = [g for g in GENRES if g != SENSITIVE_GENRE]
        require(
            self.rehearsal_genre in public,
            f"rehearsal_genre must be a public genre ({', '.join(public)}), got {self.rehearsal_genre!r}",
        )


def load_text_pipeline_spec(path: str | Path, **overrides: Any) -> TextPipelineSpec:
    return load_spec_file(TextPipelineSpec, path, **overrides)
