"""WarmSyn (docs/concepts/warmsyn.md): the seed paper's ablation as a track of the stage machine (EDM synthetic data,
warm-up, DP finetune) and its report."""
