"""A problem file's identity, signed by the machine that made it.

A problem made by ``dpaudit-mix problem`` (from a world or a data manifest) carries the identity
of the sensitive data set it came from (``meta_sensitive_sha256``): the key of that data's one
budget. A key anyone can write into a file is a budget anyone can shed (re-save the file without
it) or take over (write another data set's), so the ``problem`` command signs the identity
together with the file's rows (their digest) with its release key, and the gate believes it only
under a valid signature by a key it trusts (this machine's, or one the ledger trusts) over these
very rows. A problem without an identity, or with one that does not verify, is refused unless
its spec says ``identity = "rows"``: then it is keyed by its rows, and its card says so.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..base.identity import META_KEY, is_digest
from ..problem import Problem, data_sha256
from . import signing
from .ledger_chain import canonical

#: the metadata that carry the signature (``meta_`` in the file, as every metadata key).
SIGNER, PUBLIC_KEY, SIGNATURE = "identity_signer", "identity_public_key", "identity_signature"


def _statement(problem: Problem) -> bytes:
    """What is signed: the identity and the rows it is the identity of."""
    return canonical({"sensitive_sha256": problem.meta.get(META_KEY), "data_sha256": data_sha256(problem)}).encode()


def sealed(problem: Problem) -> Problem:
    """``problem`` with its identity signed by this machine's release key (unchanged without one)."""
    if not is_digest(problem.meta.get(META_KEY)):
        return problem
    key = signing.signing_key()
    public = key.public_key()
    seal = {
        SIGNER: signing.fingerprint(public),
        PUBLIC_KEY: base64.b64encode(signing.raw_public(public)).decode(),
        SIGNATURE: base64.b64encode(key.sign(_statement(problem))).decode(),
    }
    return dataclasses.replace(problem, meta={**problem.meta, **seal})


def verified(problem: Problem, trusted: dict[str, Any]) -> str:
    """Why ``problem``'s identity is not to be believed ("" where it is): none, no signature, a
    signer not in ``trusted`` (fingerprint → public key), or a signature that does not hold over
    its identity and rows."""
    meta = problem.meta
    if not is_digest(meta.get(META_KEY)):
        return "it carries no identity of the data it was made from"
    signer = meta.get(SIGNER)
    if not isinstance(signer, str) or SIGNATURE not in meta:
        return "its identity is not signed"
    key = trusted.get(signer)
    if not isinstance(key, Ed25519PublicKey):
        return f"its identity is signed by {signer[:23]}…, a key neither this machine nor the ledger trusts"
    try:
        key.verify(base64.b64decode(str(meta[SIGNATURE]), validate=True), _statement(problem))
    except (InvalidSignature, ValueError):
        return "its identity's signature does not hold over its identity and rows (edited, or another file's)"
    return ""
