"""The identity of a sensitive data set: what the privacy budget belongs to, whatever is released from it.

A λ release reads a problem (the proxies' log-likelihoods of the sensitive examples), a model
release reads the sensitive images themselves; both spend the budget of the same people. So the
ledger keys both by the sensitive data's content — each example with its label (and user), in a
canonical order — not by the arrays a release happened to read (docs/concepts/release.md).

Each example is known by the sha256 of its values (images as float32, so uint8 files, float32
files and image folders that decode to the same pixels are the same examples; texts as UTF-8)
and its label; the data set by the sorted multiset of those, users known only by the multiset of
their examples (so relabelling users changes nothing). It survives row order, file format and
dtype; it does not survive added, removed or duplicated examples: those are other data as far as
a ledger can tell.

A :class:`Partition` names a split of that data into disjoint parts (the pipeline's split A, on
which λ is fitted, and split B, on which the model is finetuned), by the sorted digests of each
part's examples: the same split, made again, is the same partition; another split is another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: the identity of a data set carries this prefix in its digest, so it can never equal a digest of rows.
VERSION = b"dpaudit-mix sensitive data v1"
#: what a problem file's metadata calls the identity of the sensitive data it was made from.
META_KEY = "sensitive_sha256"
#: how a ledger entry names the part of the data a phase ran on: all of it, or one side of a partition.
ALL = "all"


def example_digests(examples: np.ndarray | Sequence[str], labels: np.ndarray | None = None) -> list[bytes]:
    """The sha256 of each example (its values, then its label): images as float32, texts as UTF-8."""
    if isinstance(examples, np.ndarray) and examples.dtype.kind in "fiub":
        rows = np.ascontiguousarray(examples, dtype=np.float32).reshape(len(examples), -1)
        shape = str(examples.shape[1:]).encode()
        values: list[bytes] = [shape + b"\0" + row.tobytes() for row in rows]
    else:
        values = [b"text\0" + str(text).encode("utf-8") for text in examples]
    if labels is None:
        return [hashlib.sha256(v).digest() for v in values]
    ids = np.asarray(labels, dtype=np.int64)
    if len(ids) != len(values):
        raise ValueError(f"{len(values)} examples but {len(ids)} labels")
    return [hashlib.sha256(v + b"\0label" + ids[i].tobytes()).digest() for i, v in enumerate(values)]


def _user_ranks(digests: list[bytes], users: np.ndarray) -> list[int]:
    """Each example's user as the rank of that user's signature (the sha256 of their sorted examples)."""
    mine: dict[int, list[bytes]] = {}
    for digest, user in zip(digests, users.tolist(), strict=True):
        mine.setdefault(int(user), []).append(digest)
    signature = {u: hashlib.sha256(b"".join(sorted(d))).digest() for u, d in mine.items()}
    rank = {s: i for i, s in enumerate(sorted(set(signature.values())))}
    return [rank[signature[int(u)]] for u in users.tolist()]


def sensitive_sha256(
    examples: np.ndarray | Sequence[str], labels: np.ndarray | None = None, users: np.ndarray | None = None
) -> str:
    """The identity of a sensitive data set: its examples (with labels and users, where it has
    them) as a multiset, whatever their order or encoding."""
    digests = example_digests(examples, labels)
    if users is not None:
        ids = np.asarray(users)
        if ids.shape != (len(digests),):
            raise ValueError(f"{len(digests)} examples but users of shape {ids.shape}")
        ranks = _user_ranks(digests, ids)
        rows = sorted(d + r.to_bytes(8, "little") for d, r in zip(digests, ranks, strict=True))
        head = f" {len(digests)} examples, {len(set(ranks))} users ".encode()
    else:
        rows = sorted(digests)
        head = f" {len(digests)} examples, no users ".encode()
    return hashlib.sha256(VERSION + head + b"".join(rows)).hexdigest()


def is_digest(value: object) -> bool:
    """Whether ``value`` reads as a sha256 (64 lower-case hex digits)."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


@dataclass(frozen=True)
class Partition:
    """Disjoint parts of one data set, each known by the sorted digests of its examples."""

    digest: str  # names the split: the same parts, made again, give the same digest

    @classmethod
    def of(cls, digests: Sequence[bytes], parts: dict[str, np.ndarray]) -> Partition:
        """The partition of examples (their :func:`example_digests`) into ``parts`` (name → row indices)."""
        body = hashlib.sha256(VERSION + b" partition")
        for name in sorted(parts):
            body.update(f"\0{name}\0".encode() + b"".join(sorted(digests[int(i)] for i in parts[name])))
        return cls(body.hexdigest())

    def part(self, name: str) -> str:
        """How a ledger entry names one part: ``<partition digest>:<part>``."""
        return f"{self.digest}:{name}"


def split_part(part: str) -> tuple[str, str] | None:
    """``(partition, side)`` of a part a ledger entry names; None for :data:`ALL`."""
    if part == ALL:
        return None
    partition, _, side = part.rpartition(":")
    return partition, side


def is_part(value: object) -> bool:
    """Whether ``value`` names a part: :data:`ALL`, or a partition's digest and a side's name."""
    if value == ALL:
        return True
    if not isinstance(value, str):
        return False
    partition, _, side = value.rpartition(":")
    return is_digest(partition) and side.isidentifier()
