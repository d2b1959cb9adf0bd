"""The audit engine (docs/concepts/audit.md): neighbouring fits, canaries, attacks, Clopper–Pearson ε bounds."""
