"""The many-run wing of the audit: neighbouring runs with and without a canary, each scored once,
and the Clopper–Pearson bounds on the attack's error rates (docs/concepts/audit.md).

:mod:`.scores` audits a claim from in- and out-scores (``audit_scores``, ``AuditResult``), with
the tie handling of :mod:`.ties` and :mod:`.sorted_scores` and the checks of
:mod:`.diagnostics`; :mod:`.engine` runs the neighbouring fits of an audit spec in resumable
:mod:`.chunks`, :mod:`.result` and :mod:`.words` say what they found, :mod:`.report` writes it,
and :mod:`.score_file` reads the score files of ``audit-scores``. The wing stands on the audit's
shared floor; it may read the one-run wing (a score file may hold one run's canaries), never the
other way.
"""

from .scores import AuditResult, audit_scores

__all__ = ["AuditResult", "audit_scores"]
