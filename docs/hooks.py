"""MkDocs hook: the reference pages that are generated, never hand-copied.

- ``reference/cli.md``: every command's description, options (with their help, defaults and
  choices) and examples, read from the argparse parsers of :func:`dpaudit_mix.cli.build_parser`;
- ``reference/specs.md``: every spec kind's keys with their type, default and meaning, read from
  the spec dataclasses (the meaning is the comment on, or just above, each field);

and the benchmarks' figures, never typed by hand: a page's line ``<!-- results: NAME -->`` becomes
``bench/results/NAME.md`` (its date, machine, command, table and ratios), as the bench wrote it.

``tests/test_docs.py`` checks both against the parsers and the dataclasses they come from.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

#: the spec kinds a user writes, by the folder their shipped examples live in.
SPECS = (
    ("audits/*.toml", "dpaudit_mix.audit.spec", "AuditSpec"),
    ("releases/*.toml (λ)", "dpaudit_mix.release.spec", "ReleaseSpec"),
    ("releases/model.toml (a finetuned model)", "dpaudit_mix.pipeline.release", "ModelReleaseSpec"),
    ("recovery/*.toml", "dpaudit_mix.recovery.spec", "RecoverySpec"),
    ("pipeline/*.toml (image track)", "dpaudit_mix.pipeline.spec", "PipelineSpec"),
    ("pipeline/shakespeare-*.toml (text track)", "dpaudit_mix.lm.spec", "TextPipelineSpec"),
    ("warmsyn/*.toml", "dpaudit_mix.synth.spec", "WarmSynSpec"),
)


#: what a key means where its spec does not comment it: the keys many specs share.
SHARED_MEANINGS = {
    "task": "the problem's task (a world's task name, e.g. digit-0 or multiclass)",
    "world": "the embedded world the pipeline runs on",
    "epsilon": "the claimed ε (in nats)",
    "epsilons": "the ε grid (in nats), one cell or method run per value",
    "delta": "δ of every claim (a probability)",
    "steps": "DP-MixMin's DP-SGD steps T",
    "clip": "DP-MixMin's clipping norm C",
    "sample_rate": "DP-MixMin's Poisson sampling rate q per step",
    "learning_rate": "DP-MixMin's step size η",
    "mix_steps": "DP-MixMin's steps T in the pipeline's mixing stage",
    "mix_clip": "DP-MixMin's clipping norm C in the pipeline's mixing stage",
    "mix_learning_rate": "DP-MixMin's step size η in the pipeline's mixing stage",
    "user_level": "neighbours differ by one user, not one example",
    "seed": "the root seed every named stream of the run derives from",
    "seeds": "seeds to run (mean ± std and paired tests are over them)",
    "confidence": "the level every bound holds at (a probability)",
    "chunk_size": "runs per checkpointed chunk (a killed run resumes from the last chunk)",
    "runs": "runs to train, half with the canary and half without",
    "canaries": "the canary kinds audited: natural (a real held-out example) and max_clip (a Dirac gradient of norm C)",
    "audit_canaries": "the canary kinds the release's audit runs",
    "natural_policy": "which example is the natural canary: index, random or most_influential",
    "natural_index": "the natural canary's index (with natural_policy = index)",
    "threats": "the attacks: black_box (the released λ only) and white_box (every noisy gradient)",
    "threshold": "the threshold rule: bonferroni (a fixed rank grid, all runs) or split",
    "one_run_canaries": "canaries m of a one-run audit",
    "audit_runs": "runs per canary of the release's audit (default: planned from detect)",
    "methods": "the mixing methods compared (uniform, dpmixmin, …)",
    "pretrain_learning_rate": "SGD step size of the public pretraining",
    "pretrain_epochs": "epochs of the public pretraining",
    "pretrain_examples": "public examples drawn by λ for pretraining",
    "finetune_learning_rate": "DP-SGD step size of the finetune",
    "finetune_epochs": "DP-SGD epochs of the finetune",
    "finetune_epochs_grid": "rows: each row runs with finetune_epochs set to one value",
    "finetune_clip": "DP-SGD clipping norm of the finetune",
    "finetune_steps": "DP-SGD steps of the finetune",
    "finetune_batch": "expected Poisson batch of the finetune",
    "protocols": "rows: each row runs with protocol set to one value",
    "search_candidates": "random search: candidate λ ~ Dirichlet(1), one chosen privately",
    "k_tasks": "the tasks of the k sweep (the number of public sources)",
    "k_epsilon": "ε of the k sweep",
    "k_rho": "ρ of the k sweep",
    "synthetic_size": "synthetic images the EDM generates",
    "edm_steps": "training steps of the EDM",
    "warmup_steps": "steps of the warm-up on synthetic data",
    "warmup_learning_rate": "step size of the warm-up",
}


def _plain(text: str) -> str:
    """A docstring's Sphinx roles (:data:`.x.Y`) as plain code."""
    return re.sub(r":\w+:`\.?([^`]+)`", r"`\1`", text)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cli_page() -> str:
    """The command-line reference, one section per command, from the parsers themselves."""
    from dpaudit_mix.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [
        "# Command line",
        "",
        "Generated from the parsers (`dpaudit-mix COMMAND --help` says the same). Exit codes: "
        "0 success, 2 bad input, 3 a violation, a refused release or a failed check, 4 an inconclusive "
        "audit or a release whose signer is not known here, 5 a fault of the machine, 130 interrupted.",
        "",
        "`dpaudit-mix --version` prints the version.",
    ]
    for name, command in sub.choices.items():
        formatter = command._get_formatter()
        out += ["", f"## `{name}`", "", command.description or "", "", "| argument | meaning |", "|---|---|"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = ", ".join(action.option_strings) or action.dest
            if action.choices:
                flag += " {" + ",".join(map(str, action.choices)) + "}"
            text = formatter._expand_help(action) if action.help else ""
            out.append(f"| `{_cell(flag)}` | {_cell(text)} |")
        examples = [line.strip() for line in (command.epilog or "").splitlines()[1:] if line.strip()]
        out += ["", "```bash", *examples, "```"]
    return "\n".join(out) + "\n"


def _meanings(cls: type) -> dict[str, str]:
    """Each field's comment: the one on its line (or its default's lines), else the block above."""
    meanings: dict[str, str] = {}
    above: list[str] = []
    lines = inspect.getsource(cls).splitlines()
    for at, line in enumerate(lines):
        stripped = line.strip()
        if line.startswith("    #") and not line.startswith("     "):
            above.append(stripped.lstrip("#: ").strip())
            continue
        field = re.match(r"^    (\w+): ", line)
        if not field:
            if not stripped.startswith(("#", ")")):
                above = []
            continue
        comment = line.split("  # ", 1)[1] if "  # " in line else ""
        if not comment and line.rstrip().endswith("("):  # a default over several lines
            for after in lines[at + 1 :]:
                if "  # " in after or after.strip().startswith("# "):
                    comment = after.split("# ", 1)[1]
                    break
                if after.strip().startswith(")"):
                    break
        meanings[field.group(1)] = _plain(comment.strip() or " ".join(above))
        above = []
    return meanings


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    return f"`{value!r}`"


def specs_page() -> str:
    """Every spec kind's keys, from the spec dataclasses (unknown keys are an error in every one)."""
    import importlib

    out = [
        "# Spec keys",
        "",
        "Generated from the spec definitions. Every key is optional unless marked required; an unknown "
        "key, a wrong type or a value out of range is exit 2 before anything runs.",
    ]
    for where, module, name in SPECS:
        cls = getattr(importlib.import_module(module), name)
        meanings = _meanings(cls)
        out += ["", f"## {where}: `{name}`", "", _plain((inspect.getdoc(cls) or "").split("\n\n")[0]), ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for field in dataclasses.fields(cls):
            if field.name.startswith("_") or not field.init:
                continue
            kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
            meaning = meanings.get(field.name) or SHARED_MEANINGS.get(field.name, "")
            out.append(f"| `{field.name}` | `{_cell(str(kind))}` | {_cell(_default(field))} | {_cell(meaning)} |")
    return "\n".join(out) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, content in (("reference/cli.md", cli_page()), ("reference/specs.md", specs_page())):
        files.append(File.generated(config, path, content=content))
    return files


#: where the benches write their figures (bench/record.py), and the line a page includes one by.
RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
INCLUDE = re.compile(r"^( *)<!-- results: ([a-z0-9_]+) -->$", flags=re.M)


def results_included(markdown: str) -> str:
    """``markdown`` with each ``<!-- results: NAME -->`` line replaced by bench/results/NAME.md,
    indented as the line is (inside a list item, say), its headings made bold lines (they belong
    to the page's list item, not its outline). A name with no results file is an error: the build
    fails rather than show a hole."""

    def included(match: re.Match[str]) -> str:
        indent, path = match.group(1), RESULTS / f"{match.group(2)}.md"
        if not path.is_file():
            raise ValueError(f"{match.group(0).strip()}: no {path.relative_to(RESULTS.parent.parent)} (run the bench)")
        text = re.sub(r"^#+ (.*)$", r"**\1**", path.read_text(encoding="utf-8").strip(), flags=re.M)
        return "\n".join(indent + line if line else "" for line in text.splitlines())

    return INCLUDE.sub(included, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Include the benches' results files where a page names them."""
    return results_included(markdown)
