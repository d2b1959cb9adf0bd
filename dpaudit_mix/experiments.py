"""The experiments behind ``dpaudit-mix pipeline`` and ``warmsyn``: which track a spec asks for,
and a run of it from spec file to report. The command line only parses, calls this and prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import check_output
from .data import registry
from .specfile import parse_spec, read_spec_bytes, spec_table

#: the methods DP-MixMin is compared against in a pipeline's summary.
COMPARED = ("uniform", "random_search", "nonprivate_mixmin")


@dataclass(frozen=True)
class PipelineSummary:
    """What a pipeline run says on stdout: where its report is, and its headline comparisons
    (per compared method, per ε: the mean paired difference over seeds)."""

    out: str
    runs: int
    measure: str  # the name of the comparison, e.g. "dpmixmin_minus" (macro AUC differences)
    comparisons: dict[str, dict[float, float]]

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "runs": self.runs, self.measure: self.comparisons}


def _out(given: str | None, stem: str) -> Path:
    return check_output(given or Path("reports") / stem, folder=True)


def is_text_world(world: Any) -> bool:
    return isinstance(world, str) and world in registry.PROBLEMS and registry.canonical(world) == registry.TEXT_WORLD


def run_pipeline_file(
    path: str, out: str | None = None, secure: bool = False, progress: bool = True
) -> PipelineSummary:
    """The pipeline of the spec at ``path`` on its world's track (image or text), then its report.
    Every input error is raised before anything is written."""
    content = read_spec_bytes(Path(path))
    stem = f"pipeline-{Path(path).stem}"
    if is_text_world(spec_table(Path(path), content).get("world")):
        from .lm.report import relative_reduction, write_text_report
        from .lm.run import build_text_world, run_text_pipeline, user_counts
        from .lm.spec import TextPipelineSpec

        text_spec = parse_spec(TextPipelineSpec, Path(path), content)
        folder = _out(out, stem)
        world = build_text_world(text_spec)
        runs = run_text_pipeline(text_spec, folder, world=world, progress=progress, secure=secure)
        users = user_counts(text_spec, world)
        frame = write_text_report([r.to_dict() for r in runs], text_spec, list(world.sources), users, folder)
        reductions = {
            other: relative_reduction(frame, "dpmixmin", other)["mean"].to_dict()
            for other in COMPARED
            if {"dpmixmin", other} <= set(text_spec.methods)
        }
        return PipelineSummary(str(folder), len(runs), "dpmixmin_perplexity_reduction_vs", reductions)
    from .pipeline.report import paired_differences, write_pipeline_report
    from .pipeline.run import build_world, run_pipeline
    from .pipeline.spec import PipelineSpec

    spec = parse_spec(PipelineSpec, Path(path), content)
    folder = _out(out, stem)
    image_world = build_world(spec)
    image_runs = run_pipeline(spec, folder, progress=progress, world=image_world, secure=secure)
    frame = write_pipeline_report(
        [r.to_dict() for r in image_runs], spec, [s.name for s in image_world.sources], folder
    )
    diffs = {
        other: paired_differences(frame, "dpmixmin", other)["mean"].to_dict()
        for other in COMPARED
        if {"dpmixmin", other} <= set(spec.methods)
    }
    return PipelineSummary(str(folder), len(image_runs), "dpmixmin_minus", diffs)


@dataclass(frozen=True)
class WarmSynSummary:
    """Where the ablation's report is, and each row's effect (here) per ε."""

    out: str
    runs: int
    effects: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "runs": self.runs, "effects": self.effects}


def run_warmsyn_file(path: str, out: str | None = None, progress: bool = True) -> WarmSynSummary:
    """The WarmSyn ablation of the spec at ``path``, then its report."""
    from .synth.report import write_warmsyn_report
    from .synth.run import run_warmsyn
    from .synth.spec import load_warmsyn_spec

    spec = load_warmsyn_spec(path)
    folder = _out(out, f"warmsyn-{Path(path).stem}")
    result = run_warmsyn(spec, folder, progress)
    write_warmsyn_report(result, folder)
    return WarmSynSummary(
        str(folder), len(result["records"]), {f"{e['row']}@{e['epsilon']:g}": e["here"] for e in result["effects"]}
    )
