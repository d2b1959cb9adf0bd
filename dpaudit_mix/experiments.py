"""The experiments behind ``dpaudit-mix pipeline`` and ``warmsyn``: which track a spec asks for,
and a run of it from spec file to report. The command line only parses, calls this and prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .base.atomic import check_output
from .base.backend import Backend
from .base.specfile import parse_spec, read_spec_bytes, spec_table
from .data import registry
from .models.device import resolved

if TYPE_CHECKING:
    from .pipeline.rows import RowResult
    from .pipeline.spec import SpecRow

SpecT = TypeVar("SpecT")

#: the methods DP-MixMin is compared against in a pipeline's summary.
COMPARED = ("uniform", "random_search", "nonprivate_mixmin")


@dataclass(frozen=True)
class PipelineSummary:
    """What a pipeline run says on stdout: where its report is, and its headline comparisons
    (per compared method, per ε: the mean paired difference over seeds)."""

    out: str
    runs: int
    measure: str  # the name of the comparison, e.g. "dpmixmin_minus" (macro AUC differences)
    comparisons: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "runs": self.runs, self.measure: self.comparisons}


def with_device(spec: SpecT, device: str | None) -> SpecT:
    """``spec`` with ``device`` (a flag) in place of its own, made concrete: ``cuda`` without a
    GPU is an input error here, before any work."""
    return resolved(spec if device is None else replace(spec, device=device))  # type: ignore[type-var]


def _out(given: str | None, stem: str) -> Path:
    return check_output(given or Path("reports") / stem, folder=True)


def pipeline_folder(path: str, out: str | None) -> Path:
    """Where the pipeline of the spec at ``path`` writes: ``out``, else ``reports/pipeline-<stem>``
    (checked, nothing written)."""
    return _out(out, f"pipeline-{Path(path).stem}")


def pipeline_world(table: dict[str, Any]) -> str:
    """The world a pipeline spec's table names: its ``data`` manifest, else its ``world`` (else
    the default); a bad value is the spec parser's to refuse, so it is returned as text."""
    from .pipeline.spec import PipelineSpec

    return str(table.get("data", table.get("world", PipelineSpec.world)))


def is_text_world(world: Any) -> bool:
    return isinstance(world, str) and registry.is_text(world)


#: a pipeline spec whose world is built and whose every σ is calibrated (nothing written yet):
#: called with (out, cache), it runs, writes its report and mixtures.json in ``out``.
_Prepared = Callable[[Path, Path], tuple["RowResult", dict[str, dict[float, float]]]]


def _prepare(
    spec: Any,
    variant: SpecRow[Any],
    *,
    text: bool,
    secure: bool,
    progress: bool,
    backend: Backend,
    worlds: dict[str, Any],
) -> _Prepared:
    """The image or the text track of ``spec``; bad input (an unreachable ε …) raises here."""
    from .pipeline.models import write_models
    from .pipeline.rows import RowResult, mixture_entries, write_mixtures
    from .pipeline.stages import StageCache, preflight

    if text:
        from .lm.report import relative_reduction, write_text_report
        from .lm.run import TextTrack, build_text_world, run_text_pipeline, user_counts

        world = build_text_world(spec)
        preflight(TextTrack(spec, world, secure), spec.epsilons)

        def run_text(out: Path, cache: Path) -> tuple[RowResult, dict[str, dict[float, float]]]:
            runs = run_text_pipeline(
                spec, out, world=world, progress=progress, secure=secure, cache=cache, backend=backend
            )
            write_models(out, runs, "chargru")
            records = [r.to_dict() for r in runs]
            frame = write_text_report(records, spec, list(world.sources), user_counts(spec, world), out)
            write_mixtures(out, mixture_entries(records))
            scores = frame[["method", "epsilon", "seed", "perplexity"]].rename(columns={"perplexity": "value"})
            reductions = {
                other: relative_reduction(frame, "dpmixmin", other)["mean"].to_dict()
                for other in COMPARED
                if {"dpmixmin", other} <= set(spec.methods)
            }
            return RowResult(variant, records, scores, None), reductions

        return run_text

    from .base.cache import content_key
    from .pipeline.report import paired_differences, write_pipeline_report
    from .pipeline.run import build_world, image_track, proxy_report, run_pipeline, world_key

    cut = content_key(data=world_key(spec), rho=spec.rho)  # rows that differ in proxies or protocol share it
    if cut not in worlds:
        worlds[cut] = build_world(spec)
    image_world = worlds[cut]
    preflight(image_track(spec, image_world, StageCache(Path()), False, secure), spec.epsilons)

    def run_image(out: Path, cache: Path) -> tuple[RowResult, dict[str, dict[float, float]]]:
        runs = run_pipeline(
            spec, out, progress=progress, world=image_world, secure=secure, cache_root=cache, backend=backend
        )
        write_models(out, runs, spec.network)
        records = [r.to_dict() for r in runs]
        proxies = proxy_report(spec, image_world, cache)
        frame = write_pipeline_report(records, spec, proxies, out)
        write_mixtures(out, mixture_entries(records))
        macro = frame[frame["task"] == "macro"][["method", "epsilon", "seed", "value"]]
        diffs = {
            other: paired_differences(frame, "dpmixmin", other)["mean"].to_dict()
            for other in COMPARED
            if {"dpmixmin", other} <= set(spec.methods)
        }
        return RowResult(variant, records, macro.reset_index(drop=True), float(np.mean(proxies.accuracy))), diffs

    return run_image


def run_pipeline_file(
    path: str,
    out: str | None = None,
    *,
    secure: bool = False,
    progress: bool = True,
    backend: Backend | None = None,
    device: str | None = None,
) -> PipelineSummary:
    """The pipeline of the spec at ``path`` on its world's track (image or text), then its report.

    A spec with list keys (``rhos`` …) runs once per row into ``OUT/rows/<row>/``, sharing one
    stage cache, and ``OUT`` gets the rows' report.

    Args:
      path: the pipeline spec.
      out: the report's folder (default: under ``reports/``).
      secure: draw every private value from the OS CSPRNG (not the named streams).
      progress: show progress bars.
      backend: runs the seeds side by side (the same results).
      device: replaces the spec's ``device``.

    Returns:
      The ``PipelineSummary`` of the run.

    Raises:
      InputError: any input error, of any row, before anything is written."""
    from .lm.spec import TextPipelineSpec
    from .pipeline.rows import write_rows_report
    from .pipeline.spec import PipelineSpec, SpecRow, variants

    content = read_spec_bytes(Path(path))
    text = is_text_world(pipeline_world(spec_table(Path(path), content)))
    spec = with_device(parse_spec(TextPipelineSpec if text else PipelineSpec, Path(path), content), device)
    rows = variants(spec) or [SpecRow((), spec)]
    worlds: dict[str, Any] = {}
    prepared = [
        _prepare(
            row.spec, row, text=text, secure=secure, progress=progress, backend=backend or Backend(), worlds=worlds
        )
        for row in rows
    ]
    folder = pipeline_folder(path, out)
    measure = "dpmixmin_perplexity_reduction_vs" if text else "dpmixmin_minus"
    if len(rows) == 1 and not rows[0].settings:
        result, comparisons = prepared[0](folder, folder / "cache")
        return PipelineSummary(str(folder), len(result.records), measure, comparisons)
    results = [
        step(folder / "rows" / row.folder, folder / "cache")[0] for row, step in zip(rows, prepared, strict=True)
    ]
    metric = "test perplexity (lower is better)" if text else "macro AUC (higher is better)"
    endpoints = write_rows_report(results, metric, folder, f"dpaudit-mix pipeline rows ({Path(path).stem})")
    return PipelineSummary(str(folder), sum(len(r.records) for r in results), "endpoints", endpoints)


@dataclass(frozen=True)
class WarmSynSummary:
    """Where the ablation's report is, and each row's effect (here) per ε."""

    out: str
    runs: int
    effects: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "runs": self.runs, "effects": self.effects}


def run_warmsyn_file(
    path: str, out: str | None = None, progress: bool = True, device: str | None = None
) -> WarmSynSummary:
    """The WarmSyn ablation of the spec at ``path`` (on ``device`` if given), then its report."""
    from .synth.report import write_warmsyn_report
    from .synth.run import run_warmsyn
    from .synth.spec import load_warmsyn_spec

    spec = with_device(load_warmsyn_spec(path), device)
    folder = _out(out, f"warmsyn-{Path(path).stem}")
    result = run_warmsyn(spec, folder, progress)
    write_warmsyn_report(result, folder)
    return WarmSynSummary(
        str(folder), len(result["records"]), {f"{e['row']}@{e['epsilon']:g}": e["here"] for e in result["effects"]}
    )
