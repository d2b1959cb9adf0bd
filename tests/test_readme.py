"""The README's Python section runs as written (its blocks in order, in one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def python_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Python\n") : text.index("\n## ", text.index("## Python\n") + 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_python_section_runs() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["result"].violation is False  # type: ignore[attr-defined]
