"""Signed releases: an Ed25519 signature over the manifest, so a reader can tell who published it.

The manifest's own sha256 catches an accidental edit, not a deliberate one: anyone can recompute
it. A signature cannot be recomputed without the releasing machine's private key. The key pair is
made once, on the first release, in the user state folder (:func:`key_path`, owner-only
permissions, under a lock so two first releases make one key); the manifest carries the public
key and its fingerprint, and the card shows the fingerprint.

What is signed is the canonical JSON (sorted keys, no spaces) of every field of release.json but
the signature itself, the digest included; the manifest lists every other file it publishes (the
card, its figures, the weights) with its sha256, so the signature covers what a person reads too.

A signature checked against the key the manifest itself names proves only that the manifest was
not changed after someone signed it; who signed it is what a *trusted* key says: the reader's
``--public-key`` (the releaser's, received out of band), or this machine's own key.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..base.cache import user_state_dir
from ..base.errors import InputError, require

ALGORITHM = "ed25519"
#: the field of release.json that holds the signature (every other field is signed).
FIELD = "signature"


def key_path() -> Path:
    """``$DPAUDIT_MIX_SIGNING_KEY``, else ``release-signing-key.pem`` in the user state folder."""
    if os.environ.get("DPAUDIT_MIX_SIGNING_KEY"):
        return Path(os.environ["DPAUDIT_MIX_SIGNING_KEY"])
    return user_state_dir() / "release-signing-key.pem"


def _made_path(path: Path) -> Path:
    """Where the fingerprint of the key made at ``path`` is kept (public: it only remembers that
    this machine had a key, so a lost one is an error, not a new identity)."""
    return path.with_name(path.name + ".fingerprint")


def payload(manifest: dict[str, Any]) -> bytes:
    """What is signed: the canonical JSON of every field but the signature."""
    import json

    body = {k: v for k, v in manifest.items() if k != FIELD}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()


def raw_public(public: Ed25519PublicKey) -> bytes:
    """The raw 32 bytes of a public key (what a fingerprint hashes, and a ledger row records)."""
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public: Ed25519PublicKey) -> str:
    """``SHA256:`` and the hex sha256 of the raw 32-byte public key."""
    return "SHA256:" + hashlib.sha256(raw_public(public)).hexdigest()


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _private_from(path: Path, content: bytes) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(content, password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"the release signing key {path} cannot be read ({exc}); restore it") from None
    require(isinstance(key, Ed25519PrivateKey), f"the release signing key {path} is not an Ed25519 key")
    assert isinstance(key, Ed25519PrivateKey)
    return key


def signing_key() -> Ed25519PrivateKey:
    """This machine's signing key, made on first use (owner-only, under a lock beside it); one that
    others may read is refused (anyone on the machine could sign as it)."""
    path = key_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise InputError(f"cannot use the release signing key {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        made = _made_path(path)
        if not path.exists():
            if made.is_file():  # this machine made a key that has signed: never silently a new one
                raise InputError(
                    f"the release signing key {path} is missing, and this machine's key "
                    f"{made.read_text(encoding='utf-8').strip()} has signed releases and ledger rows: restore it "
                    f"(a new key's releases would not be this machine's to the ledger or a reader); to start a "
                    f"new key on purpose, remove {made} and have the ledger trust the new one"
                )
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(out, pem)
                os.fsync(out)
            finally:
                os.close(out)
            made.write_text(fingerprint(key.public_key()) + "\n", encoding="utf-8")
            return key
        info = path.lstat()
        require(stat.S_ISREG(info.st_mode), f"the release signing key {path} is not a regular file")
        require(
            info.st_mode & 0o077 == 0,
            f"the release signing key {path} can be read by others (mode {stat.S_IMODE(info.st_mode):o}); "
            f"`chmod 600 {path}` if no one else has used it, else remove it and release again",
        )
        return _private_from(path, path.read_bytes())
    finally:
        os.close(fd)


def local_public_key() -> Ed25519PublicKey | None:
    """This machine's public key, if it has released before (nothing is made here)."""
    path = key_path()
    if not path.is_file():
        return None
    return _private_from(path, path.read_bytes()).public_key()


def read_public_key(path: Path) -> Ed25519PublicKey:
    """A public key from a file: PEM (what ``dpaudit-mix signing-key`` prints) or the base64 raw key."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the public key {path}: {exc.strerror or exc}") from None
    require(len(content) <= 10_000, f"{path} is {len(content)} bytes: not a public key")
    try:
        if b"BEGIN" in content:
            key = serialization.load_pem_public_key(content)
        else:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(content.strip(), validate=True))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path} is not a public key ({exc})") from None
    require(isinstance(key, Ed25519PublicKey), f"{path} is not an Ed25519 public key")
    assert isinstance(key, Ed25519PublicKey)
    return key


def sign(manifest: dict[str, Any]) -> dict[str, str]:
    """The signature section of ``manifest`` (which must not hold one yet), by this machine's key."""
    key = signing_key()
    public = key.public_key()
    return {
        "algorithm": ALGORITHM,
        "public_key": base64.b64encode(raw_public(public)).decode(),
        "fingerprint": fingerprint(public),
        "value": base64.b64encode(key.sign(payload(manifest))).decode(),
    }


def signer() -> str:
    """The fingerprint that :func:`sign` will put into a manifest: what the card shows."""
    return fingerprint(signing_key().public_key())


@dataclass(frozen=True)
class Verdict:
    """What the signature check found: a problem (or ""), and whether the key was a trusted one."""

    problem: str
    trusted: bool
    fingerprint: str


def verify(manifest: dict[str, Any], trusted: Ed25519PublicKey | None) -> Verdict:
    """The manifest's signature, checked against ``trusted`` where given (else against the key it
    names, which proves integrity, not who signed)."""
    raw = manifest.get(FIELD)
    if not isinstance(raw, dict) or raw.get("algorithm") != ALGORITHM:
        return Verdict("signature: the manifest is not signed (no ed25519 signature section)", False, "")
    try:
        named = Ed25519PublicKey.from_public_bytes(base64.b64decode(str(raw.get("public_key")), validate=True))
        value = base64.b64decode(str(raw.get("value")), validate=True)
    except (ValueError, TypeError):
        return Verdict("signature: its public key or value is not base64 of an ed25519 key and signature", False, "")
    named_print = fingerprint(named)
    if raw.get("fingerprint") != named_print:
        return Verdict("signature: its fingerprint is not that of the public key it names", False, named_print)
    if trusted is not None and raw_public(trusted) != raw_public(named):
        return Verdict(
            f"signature: signed by key {named_print[:23]}…, not by the trusted key {fingerprint(trusted)[:23]}…",
            True,
            named_print,
        )
    try:
        named.verify(value, payload(manifest))
    except InvalidSignature:
        return Verdict(
            "signature: it does not match the manifest's contents (changed after it was signed)",
            trusted is not None,
            named_print,
        )
    return Verdict("", trusted is not None, named_print)
