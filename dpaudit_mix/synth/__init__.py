"""WarmSyn (DESIGN §12): an EDM trained on a small public in-distribution set, its synthetic data, and warm-up before DP-SGD."""
