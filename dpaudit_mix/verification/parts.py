"""The parts of a release a verification check exercises and a mutant may break: what a release
kind asks verify-accountant to check (names only: a release imports no check to name them)."""

ACCOUNTANT, WIRING, LEARNER = "accountant", "wiring", "learner"
OPACUS, USER_DPSGD = "opacus", "user-dpsgd"  # the pipeline's DP-SGD: its Opacus finetune, its user-level step
