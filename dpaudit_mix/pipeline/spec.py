"""A pipeline spec (``pipeline/*.toml``): methods, budgets, splits and training hyper-parameters."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from .. import accounting
from ..base.errors import require
from ..base.resources import BYTES_PER_IMAGE, require_memory
from ..base.specfile import Seed, check_fields, load_spec_file
from ..data import registry
from ..data.proxies import ProxySpec
from ..learner import LearnerConfig
from ..models import DEFAULT_NETWORK, device
from .methods import mix_learner

#: every method; a spec runs DEFAULT_METHODS unless it names others.
METHODS = ("dpmixmin", "uniform", "random_search", "no_pretrain", "nonprivate_mixmin", "warm")
DEFAULT_METHODS = METHODS[:5]
COMPOSITIONS = ("parallel", "sequential")
#: Animal-MNIST's 10,000 images make this many distractor sets of DISTRACTOR_SIZE beyond mnist-shift's two.
MAX_DISTRACTORS = 8
#: multiclass: one mixture and one 10-class model; per_task: per digit (one-vs-rest) its own
#: mixture, pretraining and binary finetune, macro AUC over the digits (the paper's protocol).
PROTOCOLS = ("multiclass", "per_task")


@dataclass(frozen=True)
class PipelineSpec:
    """Every key optional in the TOML file; unknown keys are rejected."""

    world: str = "mnist-labels"  # mnist-labels (sources split by label) or mnist-shift (graded covariate shift)
    data: str | None = (
        None  # instead of world: a data manifest (.toml) of your own files, relative to the working folder
    )
    synthetic_source: bool = False  # add EDM samples of the world's small public slice as one more source
    proxy: str = "logistic"  # the per-source proxies: logistic (pooled pixels) or cnn (the SmallCNN)
    proxy_epochs: int | None = None  # cnn proxies: fixed epochs; left out = early stopping on public validation
    proxy_network: str = DEFAULT_NETWORK  # cnn proxies' network: smallcnn, or one registered (models.networks)
    network: str = DEFAULT_NETWORK  # the pretrained and DP-finetuned model: smallcnn, or one registered
    protocol: str = "multiclass"  # or per_task: a mixture, pretraining and binary finetune per digit
    epsilons: tuple[float, ...] = (1.0, 2.0, 5.0)
    delta: float = 1e-5
    methods: tuple[str, ...] = DEFAULT_METHODS
    seeds: int = 3
    seed: Seed = 0  # the data seed: public sources, proxies and the A/B split
    rho: float = 0.1  # split A (the mixing data) as a fraction of the sensitive training set
    composition: str = "parallel"  # parallel: A and B disjoint; sequential: finetune on all, budgets composed
    mix_share: float = 0.1  # sequential: the share of ε the mixture phase gets alone
    sensitive_fraction: float = 1.0  # use this fraction of the sensitive training set (smaller = faster)
    # Bad sources added to the world's pool (the premise: bad sources and scarce public data together):
    permuted_sources: int = 0  # label-permuted copies of the world's first sources (no label kept)
    distractor_sources: int = 0  # more Animal-MNIST sets (animal classes as labels), up to 8
    finetune_rows: int | None = None  # finetune on only the first this many rows (split B, or all)
    public_fraction: float = 1.0  # use this fraction of every public source's images
    mix_steps: int = 100
    mix_clip: float = LearnerConfig.clip
    mix_learning_rate: float = 1.0
    # true: DP-MixMin's C and η are chosen per job by rehearsing it at its σ on the task's public
    # validation problem (no privacy spent; dpaudit_mix.tuning); mix_clip and mix_learning_rate are then unused
    mix_tuning: bool = False
    search_candidates: int = 8  # random search: candidate λ ~ Dirichlet(1), one chosen privately
    pretrain_examples: int = 3000
    pretrain_epochs: int = 3
    pretrain_learning_rate: float = 2e-3
    finetune_epochs: int = 4
    finetune_batch: int = 256  # expected batch size: q = batch / n
    finetune_learning_rate: float = 0.1
    finetune_clip: float = 1.0
    # A fair finetune: with grids given, every method picks its learning rate and epochs by the same
    # rule, the DP finetune rehearsed on the public validation slice (no privacy spent); () = fixed.
    finetune_learning_rates: tuple[float, ...] = ()
    finetune_epochs_grid: tuple[int, ...] = ()
    # Rows (docs/concepts/pipeline.md): each list given runs the pipeline once per value (their product when
    # several are), as the paper's tables do; the single key above is then ignored.
    rhos: tuple[float, ...] | None = None  # split A fractions (paper Table 1)
    proxies: tuple[str, ...] | None = None  # proxy kinds
    proxy_epochs_grid: tuple[int, ...] | None = None  # cnn proxy epochs (paper Tables 3 and 5)
    protocols: tuple[str, ...] | None = None
    permuted_sources_grid: tuple[int, ...] | None = None  # the map's bad-source axis
    pretrain_examples_grid: tuple[int, ...] | None = None  # the map's public-data axis
    finetune_rows_grid: tuple[int, ...] | None = None  # the map's finetune-data axis
    device: str = "cpu"  # where pretraining and finetuning compute: cpu, cuda, or auto (cuda when present)

    #: the fields no stage cache key names, each with why it cannot change a stage's output
    #: (every other field is in some stage's key: tests/test_stage_keys.py perturbs each).
    UNKEYED: ClassVar[dict[str, str]] = {
        "epsilons": "which jobs run: each job's ε is in its own stage keys",
        "methods": "which jobs run: each job's method is in its own stage keys",
        "seeds": "how many jobs run: each job's seed is in its own stage keys",
        "protocol": "which tasks run: each task is in its own stage keys",
        "mix_share": "enters the mixture's key as the ε it spends (sequential composition)",
        "rhos": "rows: each row runs as a spec of its own, with rho set",
        "proxies": "rows: each row runs as a spec of its own, with proxy set",
        "proxy_epochs_grid": "rows: each row runs as a spec of its own, with proxy_epochs set",
        "protocols": "rows: each row runs as a spec of its own, with protocol set",
        "permuted_sources_grid": "rows: each row runs as a spec of its own, with permuted_sources set",
        "pretrain_examples_grid": "rows: each row runs as a spec of its own, with pretrain_examples set",
        "finetune_rows_grid": "rows: each row runs as a spec of its own, with finetune_rows set",
        "data": "names the world: it sets world (which the stages key by name, their cache entries by content)",
    }

    def __post_init__(self) -> None:
        check_fields(self)
        if self.data is not None:
            require(self.world in ("mnist-labels", self.data), "give world or data, not both")
            require(self.data.endswith(".toml"), f"data must name a data manifest (.toml), got {self.data!r}")
            object.__setattr__(self, "world", self.data)
        check_shared_keys(self, METHODS)
        if not variants(self):  # with rows, each row is a spec checked on its own (the single keys may not apply)
            self.proxy_spec  # noqa: B018  # validates proxy and proxy_epochs
            require(
                self.protocol in PROTOCOLS, f"protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}"
            )
        require(self.permuted_sources >= 0, f"permuted_sources must be >= 0, got {self.permuted_sources}")
        require(
            0 <= self.distractor_sources <= MAX_DISTRACTORS,
            f"distractor_sources must be 0 … {MAX_DISTRACTORS} (Animal-MNIST holds that many more sets), "
            f"got {self.distractor_sources}",
        )
        require(
            self.finetune_rows is None or self.finetune_rows >= 1,
            f"finetune_rows must be >= 1, got {self.finetune_rows}",
        )
        if self.network != DEFAULT_NETWORK:
            self.factory  # noqa: B018  # an unknown network is an InputError here, before any work
        for name in ("sensitive_fraction", "public_fraction"):
            value = getattr(self, name)
            require(0 < value <= 1, f"{name} must be in (0, 1], got {value}")
        for name in (
            "seeds",
            "search_candidates",
            "pretrain_examples",
            "pretrain_epochs",
            "finetune_epochs",
            "finetune_batch",
        ):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("pretrain_learning_rate", "finetune_learning_rate", "finetune_clip"):
            require(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        registry.image_world(self.world)
        require_memory(self.pretrain_examples * BYTES_PER_IMAGE, f"pretrain_examples = {self.pretrain_examples}")
        require(
            all(lr > 0 for lr in self.finetune_learning_rates),
            f"finetune_learning_rates must be > 0, got {list(self.finetune_learning_rates)}",
        )
        require(
            all(e >= 1 for e in self.finetune_epochs_grid),
            f"finetune_epochs_grid must be >= 1, got {list(self.finetune_epochs_grid)}",
        )

    @property
    def proxy_spec(self) -> ProxySpec:
        return registry.proxy_spec(self.world, self.proxy, self.proxy_epochs, self.proxy_network)

    @property
    def factory(self) -> Any:
        """The network pretrained and finetuned (torch is imported here, not before)."""
        from ..models.networks import NETWORKS

        return NETWORKS.get(self.network)

    @property
    def finetune_grid(self) -> list[tuple[float, int]]:
        """(learning rate, epochs) candidates; one (the fixed values) when no grid is given."""
        return [
            (lr, e)
            for lr in self.finetune_learning_rates or (self.finetune_learning_rate,)
            for e in self.finetune_epochs_grid or (self.finetune_epochs,)
        ]


def check_shared_keys(spec: Any, methods: tuple[str, ...], scope: str = "") -> None:
    """The keys the image and the text pipeline share: budgets, methods (from ``methods``), the
    split A fraction, the composition, the mixture learner's settings and the device."""
    device.check(spec.device)
    require(len(spec.epsilons) >= 1, "the ε grid is empty: give at least one epsilon")
    for eps in spec.epsilons:
        accounting.check_epsilon(eps)
    accounting.check_delta(spec.delta)
    unknown = [m for m in spec.methods if m not in methods]
    require(
        not unknown and spec.methods,
        f"unknown method(s) {', '.join(unknown) or '(none given)'}{scope}; choose from {', '.join(methods)}",
    )
    require(0 < spec.rho < 1, f"rho must be in (0, 1), got {spec.rho}")
    if spec.rhos is not None:
        for rho in spec.rhos:
            require(0 < rho < 1, f"every rho in rhos must be in (0, 1), got {rho}")
    require(spec.composition in COMPOSITIONS, f"composition must be one of {COMPOSITIONS}, got {spec.composition!r}")
    require(0 < spec.mix_share < 1, f"mix_share must be in (0, 1), got {spec.mix_share}")
    mix_learner(spec)


#: a list key → the single key each of its rows sets (in this order in a row's label).
ROW_KEYS = {
    "proxies": "proxy",
    "proxy_epochs_grid": "proxy_epochs",
    "protocols": "protocol",
    "rhos": "rho",
    # the map of when DP-MixMin wins (image track): bad sources × pretraining examples × finetune rows
    "permuted_sources_grid": "permuted_sources",
    "pretrain_examples_grid": "pretrain_examples",
    "finetune_rows_grid": "finetune_rows",
}
#: the row keys of the map, in the order its heat map lays them out (columns, rows, panels).
MAP_KEYS = ("permuted_sources", "pretrain_examples", "finetune_rows")

SpecT = TypeVar("SpecT")


@dataclass(frozen=True)
class SpecRow(Generic[SpecT]):
    """One row of a spec with list keys: the values it sets and the spec that runs it."""

    settings: tuple[tuple[str, Any], ...]
    spec: SpecT

    @property
    def label(self) -> str:
        return ", ".join(f"{key} = {value}" for key, value in self.settings)

    @property
    def folder(self) -> str:
        return "_".join(f"{key}-{value}" for key, value in self.settings)


def variants(spec: SpecT) -> list[SpecRow[SpecT]]:
    """The rows of ``spec``: one per combination of its given list keys ([] when none is given).
    A row is the spec with those single keys set and no list keys, validated like any spec;
    ``proxy_epochs`` belongs to the CNN rows of ``proxies`` (a logistic row leaves it out)."""
    given = [(key, single) for key, single in ROW_KEYS.items() if getattr(spec, key, None) is not None]
    for key, _ in given:
        require(len(getattr(spec, key)) >= 1, f"{key} is empty: give at least one value, or leave the key out")
    if not given:
        return []
    cleared = {key: None for key, _ in given}
    epochs_vary = any(key == "proxy_epochs_grid" for key, _ in given)  # a logistic row of it is refused
    rows = []
    for values in itertools.product(*(getattr(spec, key) for key, _ in given)):
        settings = tuple((single, value) for (_, single), value in zip(given, values, strict=True))
        implied = {"proxy_epochs": None} if dict(settings).get("proxy") == "logistic" and not epochs_vary else {}
        rows.append(SpecRow(settings, replace(spec, **cleared, **dict(settings), **implied)))  # type: ignore[type-var]
    return rows


def load_pipeline_spec(path: str | Path, **overrides: Any) -> PipelineSpec:
    return load_spec_file(PipelineSpec, path, **overrides)
