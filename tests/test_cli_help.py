"""`--help` is the reference a user reads first: every option of every command says what it is
and its default, every command has a one-line description and examples that parse, and
`--version` prints the package's version."""

from __future__ import annotations

import argparse
import shlex

import pytest

from dpaudit_mix import accounting
from dpaudit_mix.audit import claim
from dpaudit_mix.base.version import __version__
from dpaudit_mix.cli import build_parser, main
from dpaudit_mix.cli.common import phases_of


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_option_of_every_command_has_help_with_its_default() -> None:
    silent, no_default = [], []
    for name, parser in _commands().items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                silent.append(label)
            elif action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
                no_default += [] if "default" in formatter._get_help_string(action) else [label]
    assert silent == [] and no_default == []
    assert len(_commands()) >= 17


def test_every_command_has_a_description_and_examples_that_parse() -> None:
    for name, parser in _commands().items():
        assert parser.description and "\n" not in parser.description.strip(), name
        assert parser.epilog and parser.epilog.startswith("examples:"), name
        examples = [line.split("  #")[0].strip() for line in parser.epilog.splitlines()[1:]]
        assert examples and all(e.startswith(f"dpaudit-mix {name} ") for e in examples), name
        for example in examples:
            build_parser().parse_args(shlex.split(example)[1:])  # a usage error raises InputError


def test_every_examples_claim_is_what_its_accountant_gives() -> None:
    """An example that states ε beside its phases states the ε they spend: one a user copies
    runs, not one the claim check refuses (σ = 1.1 at q = 0.01, T = 3000 spends 2.68, not 2)."""
    checked = 0
    for parser in _commands().values():
        for line in parser.epilog.splitlines()[1:]:
            args = build_parser().parse_args(shlex.split(line.split("  #")[0])[1:])
            if getattr(args, "epsilon", None) is None or getattr(args, "noise_multiplier", None) is None:
                continue
            accountant = getattr(args, "accountant", accounting.DEFAULT_ACCOUNTANT)
            claim.checked_claim(  # a claim its phases do not spend raises InputError
                args.epsilon,
                args.delta,
                phases=phases_of(args),
                confidence=0.95,
                threshold="bonferroni",
                accountant=accountant,
            )
            checked += 1
    assert checked >= 2


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"dpaudit-mix {__version__}"
