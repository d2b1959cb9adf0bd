"""The one-run wing of the audit: one training run, m canaries each in with probability ½, one
verdict (Steinke, Nasr & Jagielski 2023; Mahloujifar, Melis & Chaudhuri 2025).

:mod:`.audit` tests a claim (``audit_one_run``, ``OneRunResult``) over the guess sets of
:mod:`.guesses` and the f-DP curves of :mod:`.fdp`; :mod:`.power` simulates what an audit of this
size catches; :mod:`.estimate` is the Gaussian-pair estimate beside the bound; :mod:`.report`
writes the report; :mod:`.gradient_canaries` puts Dirac canaries on a user's own Opacus
optimizer. The wing stands on the audit's shared floor (the claim, the power law, the profile)
and never on the many-run wing.
"""

from .audit import MIN_CANARIES, OneRunResult, audit_one_run, checked_canaries, subsampled

__all__ = ["MIN_CANARIES", "OneRunResult", "audit_one_run", "checked_canaries", "subsampled"]
