"""Dirac canaries for a user's own Opacus training, audited from that one run: ``attach`` after
``PrivacyEngine.make_private``, train unchanged, then ``Canaries.audit`` (the implementation and
what it certifies: :mod:`.audit.gradient_canaries`)."""

from .audit.one_run.gradient_canaries import Canaries, attach

__all__ = ["Canaries", "attach"]
