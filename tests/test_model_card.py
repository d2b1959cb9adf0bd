"""The model card's words on its metrics (release/model_card.py): a warning per AUC at or below
chance, one where the DP finetune lowered the headline AUC below the pretrained model's, and the
baselines' columns beside the released model's."""

from __future__ import annotations

from dpaudit_mix.release.model_card import _metrics_table, _warnings


def test_an_auc_at_or_below_chance_is_warned_about_and_one_above_is_not() -> None:
    found = _warnings({"digit-0": 0.5, "digit-1": 0.218, "digit-2": 0.51, "macro_auc": 0.41, "accuracy": 0.05}, {})
    text = [line for _, line in found]
    assert len(text) == 3 and all("at or below chance" in line for line in text)
    assert {line.split(" = ")[0].removeprefix("Warning: ") for line in text} == {"digit-0", "digit-1", "macro_auc"}


def test_a_finetune_that_lowers_the_headline_auc_below_its_start_is_warned_about() -> None:
    lowered = _warnings({"auc": 0.7}, {"pretrained_only": {"auc": 0.8}, "chance": {"auc": 0.5}})
    assert [line for _, line in lowered] == [
        "Warning: the DP finetune lowered auc from the pretrained model's 0.800 to 0.700: at this ε its noise "
        "cost more than the sensitive data taught."
    ]
    assert _warnings({"auc": 0.8}, {"pretrained_only": {"auc": 0.7}}) == []


def test_the_metrics_table_has_a_column_per_baseline() -> None:
    table = _metrics_table({"auc": 0.9}, {"pretrained_only": {"auc": 0.8}, "chance": {"auc": 0.5}})
    assert table == [
        ["metric", "released model", "pretrained on λ, no finetune", "chance"],
        ["auc", "0.9000", "0.8000", "0.5000"],
    ]
    assert _metrics_table({"auc": 0.9}, {}) == [["metric", "released model"], ["auc", "0.9000"]]
