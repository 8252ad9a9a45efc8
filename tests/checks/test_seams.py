"""Parts meet through methods and small returned values (docs/design.md, "Contracts at the seams").

Read from the code's syntax tree: a module of sbdata assigns only to its own object's attributes (``self.x = ...``,
``cls.x = ...``), never to another object's (``self.tracker.steps += 1``, ``passes.held_batch = ...``); an engine part
is reached one level down, never two (``self.controller.meter.requested()``). The few places that must write another
object's field are listed below with the reason; each entry must still be needed (a stale one fails).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (module, assigned expression): why the write is the right shape there
ALLOWED = {
    ("sbdata/integrations/accelerate.py", "accelerator.skip_first_batches"): "Accelerate's own patch point",
    ("sbdata/integrations/accelerate.py", "sampler.generator"): "seeds the user's sampler as Accelerate expects",
    ("sbdata/integrations/accelerate.py", "base.generator"): "the same, on the sampler Accelerate wraps",
    ("sbdata/integrations/lightning.py", "self.datamodule.trainer"): "Lightning's datamodule protocol",
    ("sbdata/integrations/transformers.py", "module.skip_first_batches"): "Transformers' own patch point",
    ("sbdata/scoring/_scorer.py", "per_sample.reduction"): "a private copy of the user's loss module",
    ("sbdata/scoring/_scorer.py", "module.training"): "restores each module's mode after scoring",
}


def _writes(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        flat = [elt for target in targets for elt in (target.elts if isinstance(target, ast.Tuple) else [target])]
        for target in flat:
            if isinstance(target, ast.Attribute) and not (
                isinstance(target.value, ast.Name) and target.value.id in ("self", "cls")
            ):
                found.append((node.lineno, ast.unparse(target)))
    return found


def _deep_reaches(path: Path) -> list[tuple[int, str]]:
    """``self.a.b.c``: a part's part's member (the outermost attribute of each chain only)."""
    found, inner = [], set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            chain, current = [node.attr], node.value
            while isinstance(current, ast.Attribute):
                inner.add(id(current))
                chain.append(current.attr)
                current = current.value
            if isinstance(current, ast.Name) and current.id == "self" and len(chain) >= 3:
                found.append((node.lineno, "self." + ".".join(reversed(chain))))
    return found


def test_no_module_writes_another_objects_fields():
    seen, problems = set(), []
    for path in sorted((ROOT / "sbdata").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        for line, target in _writes(path):
            if (name, target) in ALLOWED:
                seen.add((name, target))
            else:
                problems.append(f"{name}:{line}: assigns {target}: add a method to its owner and call it")
    assert not problems, "\n".join(problems)
    assert seen == set(ALLOWED), f"stale entries in ALLOWED: {sorted(set(ALLOWED) - seen)}"


def test_engine_parts_are_reached_one_level_down():
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {chain}: ask the part (a method or property of it) instead"
        for path in sorted((ROOT / "sbdata" / "engine").glob("*.py"))
        for line, chain in _deep_reaches(path)
    ]
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_they_forbid(tmp_path):
    source = tmp_path / "part.py"
    source.write_text(
        "class A:\n"
        "    def f(self, other):\n"
        "        self.ok = 1\n"
        "        self.tracker.steps += 1\n"
        "        other.x, self.y = 1, 2\n"
        "        self.controller.meter.requested()\n"
    )
    assert _writes(source) == [(4, "self.tracker.steps"), (5, "other.x")]
    assert _deep_reaches(source) == [(6, "self.controller.meter.requested")]
