"""WarmSyn (DESIGN §12): the seed paper's ablation as a track of the stage machine (EDM synthetic data,
warm-up, DP finetune) and its report."""
