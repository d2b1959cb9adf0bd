"""The problem file (docs/design.md §2): per-example proxy log-likelihoods, the model-agnostic input.

MixMin's objective sees the proxies only through log p_i(y_j | x_j), so every tool in the
package takes this file rather than models.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .base import npz
from .base.atomic import write_npz
from .base.errors import InputError, present, require
from .base.identity import META_KEY, is_digest

#: log-likelihoods may exceed 0 by this much (float round-off of a probability of 1).
LOGP_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Problem:
    """A mixing problem: ``logp[j, i] = log p_i(y_j | x_j)`` for n examples and k sources.

    Attributes:
      logp: the n × k log-likelihoods of the sensitive examples under each source's proxy.
      sources: the k sources' names.
      users: each example's user (user-level DP), or None.
      heldout_logp: held-out examples' log-likelihoods (the canary pool), or None.
      task: the task the proxies predict.
      meta: what the file records of its making (its data's identity among it).
      heldout_users: the held-out examples' users, or None.
    """

    logp: np.ndarray
    sources: tuple[str, ...]
    users: np.ndarray | None = None
    heldout_logp: np.ndarray | None = None
    task: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    heldout_users: np.ndarray | None = None  # a user id per held-out row: user-level natural canaries

    def __post_init__(self) -> None:
        validate(self)

    @property
    def n(self) -> int:
        return int(self.logp.shape[0])

    @property
    def k(self) -> int:
        return int(self.logp.shape[1])

    def subset(self, rows: np.ndarray) -> Problem:
        """The problem restricted to the examples ``rows`` (held-out part unchanged)."""
        users = None if self.users is None else self.users[rows]
        return Problem(
            self.logp[rows], self.sources, users, self.heldout_logp, self.task, self.meta, self.heldout_users
        )

    def select_sources(self, columns: np.ndarray) -> Problem:
        """The problem over a subset of the public sources."""
        held = None if self.heldout_logp is None else self.heldout_logp[:, columns]
        names = tuple(self.sources[c] for c in columns)
        return Problem(self.logp[:, columns], names, self.users, held, self.task, self.meta, self.heldout_users)


def checked_logp(logp: object, name: str = "logp") -> np.ndarray:
    """``logp`` as a float64 (n, k) array of log-probabilities, k >= 2, or one InputError: what every
    function taking a bare array checks, as the problem file's loader does."""
    try:
        array = np.asarray(logp)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a 2-D array of numbers") from None
    array = npz.numeric(array, name)
    _check_logp(name, array, None)
    require(array.shape[1] >= 2, f"a mixture needs k >= 2 sources, got k = {array.shape[1]}")
    return array


def _check_logp(name: str, logp: np.ndarray, k: int | None) -> None:
    require(logp.ndim == 2, f"{name} must be a 2-D array (n, k), got shape {logp.shape}")
    require(logp.shape[0] >= 1, f"{name} has no examples (n = 0)")
    if k is not None:
        require(logp.shape[1] == k, f"{name} has {logp.shape[1]} sources, expected {k}")
    require(bool(np.all(np.isfinite(logp))), f"{name} contains NaN or infinite values")
    worst = float(logp.max())
    require(
        worst <= LOGP_TOLERANCE,
        f"{name} holds a positive log-likelihood ({worst:g}); values must be log-probabilities <= 0",
    )


def validate(problem: Problem) -> None:
    """Raise :class:`InputError` unless ``problem`` is usable by every tool."""
    logp = problem.logp
    require(isinstance(logp, np.ndarray) and np.issubdtype(logp.dtype, np.floating), "logp must be a float array")
    require(logp.ndim == 2, f"logp must be a 2-D array (n, k), got shape {logp.shape}")
    require(logp.shape[1] >= 2, f"a mixture needs k >= 2 sources, got k = {logp.shape[1]}")
    _check_logp("logp", logp, None)
    require(
        len(problem.sources) == logp.shape[1],
        f"sources has {len(problem.sources)} names but logp has {logp.shape[1]} columns",
    )
    if problem.users is not None:
        _check_users("users", problem.users, logp.shape[0])
    if problem.heldout_logp is not None:
        _check_logp("heldout_logp", problem.heldout_logp, logp.shape[1])
    if problem.heldout_users is not None:
        held = present(problem.heldout_logp, "heldout_users given without heldout_logp")
        _check_users("heldout_users", problem.heldout_users, held.shape[0])


def _check_users(name: str, users: np.ndarray, rows: int) -> None:
    require(
        isinstance(users, np.ndarray) and users.ndim == 1 and users.shape[0] == rows,
        f"{name} must have one id per row ({rows}), got shape {np.shape(users)}",
    )
    require(np.issubdtype(users.dtype, np.integer), f"{name} must be integer ids")


def _real(path: Path, name: str, array: np.ndarray) -> np.ndarray:
    """A log-likelihood array as float64: real floats and integers only (no bool, complex, text)."""
    return npz.numeric(array, f"problem file {path}: '{name}'")


#: the identity of the data keeps this many bits of each log-likelihood (float32): a float64
#: moved by one ulp, or stored as float32, is the same data.
IDENTITY_DTYPE = np.float32


def data_sha256(problem: Problem) -> str:
    """The identity of the data a mixture is fitted on, which the privacy budget belongs to: the
    multiset of its rows, each (its log-likelihoods as float32, columns in a canonical order of
    their sorted values; its user), users known only by the multiset of their rows. So it
    survives row order, source (column) order and names, float dtype and one-ulp moves, user
    relabelling, and any file, task or extra arrays that carry them. It does not survive other
    proxies (other log-likelihoods), or added, removed or duplicated rows: those are other data
    as far as the ledger can tell.
    """
    raw = problem.logp.astype(IDENTITY_DTYPE)
    order = sorted(range(problem.k), key=lambda c: np.sort(raw[:, c]).tobytes())  # whatever the row order
    values = np.ascontiguousarray(raw[:, order])
    digest = hashlib.sha256(f"v3 {problem.n}x{problem.k} ".encode())
    if problem.users is None:
        digest.update(b"no users")
        labels = np.zeros(problem.n, dtype=np.int64)
    else:
        labels = _canonical_users(values, problem.users)
        digest.update(f"{len(np.unique(problem.users))} users".encode())
    rows = np.lexsort((labels, *values.T[::-1]))  # by values, then by canonical user
    digest.update(values[rows].tobytes())
    digest.update(labels[rows].tobytes())
    return digest.hexdigest()


def _canonical_users(values: np.ndarray, users: np.ndarray) -> np.ndarray:
    """Each row's user as the rank of that user's signature (the sha256 of their sorted rows)."""
    ids, which = np.unique(users, return_inverse=True)
    grouped = np.argsort(which, kind="stable")
    ends = np.searchsorted(which[grouped], np.arange(1, len(ids) + 1))
    signatures = []
    for start, end in zip([0, *ends[:-1]], ends, strict=True):
        mine = values[grouped[start:end]]
        signatures.append(hashlib.sha256(mine[np.lexsort(mine.T[::-1])].tobytes()).digest())
    rank = {signature: i for i, signature in enumerate(sorted(set(signatures)))}
    return np.array([rank[signatures[u]] for u in which], dtype=np.int64)


def budget_key(problem: Problem) -> tuple[str, str]:
    """(the ledger key of the data ``problem`` spends, what it hashes): the identity of the
    sensitive data set it was made from (``"sensitive"``; written into its metadata by the world
    that built it), else its rows' :func:`data_sha256` (``"rows"``: a problem file from elsewhere)."""
    named = problem.meta.get(META_KEY)
    if is_digest(named):
        return str(named), "sensitive"
    return data_sha256(problem), "rows"


def exact_data_sha256(problem: Problem) -> str:
    """The identity ledgers before 0.2.0's canonical one used (exact ``logp`` and ``users``):
    read, so that what those releases spent keeps counting."""
    digest = hashlib.sha256()
    for array in (problem.logp.astype(np.float64), problem.users):
        if array is None:
            digest.update(b"no users")
            continue
        array = np.ascontiguousarray(array, dtype=np.float64 if array.dtype.kind == "f" else np.int64)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """A problem file's bytes, read once: callers hash these and :func:`loads` them, so what is
    hashed is what is used even if the file is replaced meanwhile."""
    return npz.read_file(Path(path), "problem file")


def load(path: str | os.PathLike[str]) -> Problem:
    """Load and validate a problem file; every failure is an :class:`~.errors.InputError`."""
    return loads(read_bytes(path), Path(path))


def loads(content: bytes, path: str | os.PathLike[str]) -> Problem:
    """Validate and decode the bytes of a problem file (``path`` names it in messages)."""
    path = Path(path)
    data = npz.loads(content, f"problem file {path}")
    for key in ("logp", "sources"):
        require(key in data, f"problem file {path} lacks the required array '{key}'")
    meta = {key[len("meta_") :]: str(value) for key, value in data.items() if key.startswith("meta_")}
    for key in ("users", "heldout_users"):
        if key in data:
            require(
                data[key].dtype.kind in "iu",
                f"problem file {path}: '{key}' must be integer ids, got dtype {data[key].dtype}",
            )
    return Problem(
        logp=_real(path, "logp", data["logp"]),
        sources=tuple(str(s) for s in data["sources"]),
        users=data.get("users"),
        heldout_logp=None if "heldout_logp" not in data else _real(path, "heldout_logp", data["heldout_logp"]),
        task=str(data.get("task", "")),
        meta=meta,
        heldout_users=data.get("heldout_users"),
    )


def dumps(problem: Problem) -> bytes:
    """The ``.npz`` bytes of ``problem`` (no pickled objects)."""
    buffer = io.BytesIO()
    np.savez(buffer, **_arrays(problem))  # type: ignore[arg-type]  # numpy's stub reads ** as allow_pickle
    return buffer.getvalue()


def _arrays(problem: Problem) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {
        "logp": problem.logp,
        "sources": np.array(problem.sources, dtype=str),
        "task": np.array(problem.task),
    }
    if problem.users is not None:
        arrays["users"] = problem.users
    if problem.heldout_logp is not None:
        arrays["heldout_logp"] = problem.heldout_logp
    if problem.heldout_users is not None:
        arrays["heldout_users"] = problem.heldout_users
    for key, value in problem.meta.items():
        arrays[f"meta_{key}"] = np.array(value)
    return arrays


def save(problem: Problem, path: str | os.PathLike[str]) -> None:
    """Write ``problem`` atomically as ``.npz`` (no pickled objects)."""
    write_npz(path, **_arrays(problem))
