"""The audit engine (DESIGN §6): neighbouring fits, canaries, attacks, Clopper–Pearson ε bounds."""
