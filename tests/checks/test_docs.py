"""The user's documents: a README that starts with the product, links that resolve, and a glossary entry for every
term of the project's own vocabulary that a user meets in the README, the user guide or keep="auto"'s messages.

(The python blocks of the README and the guide run in tests/checks/test_package.py.)"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide"
USER_DOCS = [ROOT / "README.md", *sorted(GUIDE.glob("*.md"))]
# Where keep="auto" builds the messages it warns with and puts on loader.stats.auto_reason
AUTO_MESSAGES = [ROOT / "sbdata" / "auto" / "_trials.py", ROOT / "sbdata" / "auto" / "_control.py"]

# The project's own words (and the measurement words it uses in a sense of its own). Each one used in a user's
# document or in auto's messages needs an entry in docs/guide/glossary.md.
JARGON = [
    "frontier",
    "critical batch",
    "first verdict",
    "capture",
    "branch trial",
    "forward-equivalents",
    "nats/byte",
    "tau",
    "trial",
    "window",
    "settle",
    "whole batches",
    "SB step",
    "SB batch",
    "loader batch",
    "keep",
    "pool",
    "policy",
    "top-k",
    "schedule",
    "scoring pass",
    "score_mode",
    "LossCache",
    "staleness",
    "observe",
    "warm cache",
    "standard error",
    "bar",
    "exit test",
    "speed-up",
    "progress per second",
    "recipe",
    "control",
    "interleaved",
    "lockstep",
    "min_kept",
    "KeptColumn",
    "variance model",
]


def glossary_terms() -> set[str]:
    text = (GUIDE / "glossary.md").read_text()
    return {term.lower() for term in re.findall(r"^- \*\*(.+?)\*\*", text, flags=re.MULTILINE)}


def auto_message_text() -> str:
    """The literal parts of every string in the modules that build keep="auto"'s messages."""
    parts = []
    for path in AUTO_MESSAGES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                parts.append(node.value)
    return "\n".join(parts)


def used(term: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text, flags=re.IGNORECASE) is not None


def test_every_jargon_term_used_has_a_glossary_entry():
    text = "\n".join(path.read_text() for path in USER_DOCS if path.name != "glossary.md") + auto_message_text()
    terms = glossary_terms()
    missing = [term for term in JARGON if used(term, text) and term.lower() not in terms]
    assert not missing, f"used in the README, the guide or auto's messages but not in the glossary: {missing}"


def test_the_jargon_check_can_fail():
    assert used("tau", "the spread (tau 1.77)") and not used("tau", "restaurant")
    assert used("whole batches", "Decided: train on whole batches.") and not used("SB step", "an SB steps")
    assert "frontier" in glossary_terms()


def test_the_readme_starts_with_the_product():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"the README has {len(lines)} lines: move detail into docs/guide/"
    assert "```python" in lines[:30], "the README's first runnable python block must be within its first 30 lines"


def test_relative_links_of_the_user_documents_resolve():
    broken = []
    for path in USER_DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+://", target) or target.startswith("#"):
                continue
            file = target.split("#", 1)[0]
            if not (path.parent / file).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, broken
