"""The Python examples of docs/torch.md and docs/jax.md run as written (CPU reference here, the kernels on an
sm_90 GPU), so that a new user's first copy-and-paste works."""

from __future__ import annotations

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def examples(page: str) -> list[str]:
    """The ```python blocks of the page's "## Example" section."""
    text = (DOCS / page).read_text()
    section = re.search(r"^## Example\n(.*?)(?=^## )", text, re.M | re.S)
    assert section, f"docs/{page}: no '## Example' section"
    blocks = re.findall(r"^```python\n(.*?)^```", section.group(1), re.M | re.S)
    assert blocks, f"docs/{page}: no python block in '## Example'"
    return blocks


@pytest.mark.parametrize("page, framework", [("torch.md", "torch"), ("jax.md", "jax")])
def test_docs_example_runs(page, framework):
    pytest.importorskip(framework)
    for block in examples(page):
        exec(compile(block, f"docs/{page} example", "exec"), {"__name__": "docs_example"})
