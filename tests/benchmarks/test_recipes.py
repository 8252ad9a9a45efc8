"""Every recipe's smoke run end to end (structure and arithmetic, never a measured time), every command the docs name
parses, and the lab's shape: domains as plug-ins (no switch on a domain's name outside ``domains/``), one run
function, the lab below the recipes."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.recipes.frontier_suites import SUITES
from tests.benchmarks.test_domains import fashion_files

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def bench(*args, timeout=600):
    done = subprocess.run([sys.executable, "-m", "benchmarks", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def frontier_smoke(tmp_path, suite, *extra):
    out = tmp_path / suite
    bench("frontier", suite, "--smoke", "--out", out, *extra)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    table = (out / "table.md").read_text()
    return runs, summary, table


@pytest.mark.slow
def test_frontier_smoke_from_scratch(tmp_path):
    runs, summary, table = frontier_smoke(tmp_path, "scratch-cnn")
    families = {r["family_arm"] for r in runs}
    assert {"plain", "topk-0.25", "topk-0.5", "random-0.25", "sampler-topk-0.25", "auto-epochs"} <= families
    assert all(r["config"]["score_mode"] == "eval" for r in runs)  # the suite's records were made in eval mode
    auto = [r for r in runs if r["family_arm"] == "auto-epochs"]
    assert auto and all(r["paired_plain_cpu_seconds"] > 0 for r in auto)
    assert "limit" in table and "per seed" in table
    assert summary["suite"] == "scratch-cnn"


@pytest.mark.slow
def test_frontier_smoke_continued_and_lm(tmp_path):
    runs, _, _ = frontier_smoke(tmp_path, "continued")
    assert {"warm-topk-0.25", "warm-prune", "warm-sampler-topk-0.25"} <= {r["family_arm"] for r in runs}
    assert (tmp_path / "continued" / "pretrained.json").exists()
    runs, _, _ = frontier_smoke(tmp_path, "continued-lm")
    assert all("nats_mix" in r for r in runs) and "reducible-0.25" in {r["family_arm"] for r in runs}


@pytest.mark.slow
def test_frontier_smoke_on_fashion_mnist_from_files_the_test_writes(tmp_path):
    data = fashion_files(tmp_path / "idx", train=600, test=200)
    runs, _, table = frontier_smoke(tmp_path, "fashion-cnn", "--data", data)
    assert "fashion_mnist (real data)" in table
    assert {"plain", "topk-0.25-bf16", "sampler-topk-0.25"} <= {r["family_arm"] for r in runs}
    assert all(r["config"]["score_mode"] == "batch" for r in runs)
    machine = json.loads((tmp_path / "fashion-cnn" / "machine.json").read_text())
    assert machine["domain"] == "fashion_mnist" and machine["kind"] == "real" and machine["data"]["samples"] == 600


@pytest.mark.slow
def test_auto_and_advise_smokes(tmp_path):
    bench("auto", "short-noisy", "--smoke", "--out", tmp_path / "auto", "--frontier", tmp_path / "none")
    runs = [json.loads(line) for line in (tmp_path / "auto" / "short-noisy" / "runs.jsonl").read_text().splitlines()]
    assert {r["arm"] for r in runs} >= {"user", "auto", "auto-epochs"}
    bench("advise", "scratch-cnn", "--smoke", "--out", tmp_path / "advise", "--frontier", tmp_path / "none")
    assert (tmp_path / "advise" / "scratch-cnn").is_dir()


def documented_commands():
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(BENCH.rglob("README.md"))]
    found = set()
    for path in texts:
        for match in re.finditer(r"python -m benchmarks ([^`\n|]*)", path.read_text()):
            words = [w for w in match.group(1).split() if not w.startswith(("<", "["))]
            command = []
            for w in words:  # up to the first placeholder or prose
                if not re.fullmatch(r"[\w./=,-]+", w) or w in ("and", "or", "then"):
                    break
                command.append(w)
            if command:
                found.add(tuple(command))
    return sorted(found)


@pytest.mark.parametrize("command", documented_commands(), ids=" ".join)
def test_every_command_the_docs_name_parses(command):
    """The recipe, its suite and its options as the docs spell them, checked by the recipe's own parser."""
    bench(*command, "--help", timeout=120)


def test_the_docs_name_benchmark_commands():
    assert len(documented_commands()) >= 4


def test_every_suite_names_a_domain_and_family_that_exist():
    from benchmarks.domains import domain

    for suite in SUITES.values():
        assert suite.family in domain(suite.domain).families, suite.name


def _python(folder):
    return sorted((BENCH / folder).rglob("*.py"))


def test_no_switch_on_a_domains_name_outside_domains():
    pattern = re.compile(r"""(domain|\.name|dom)\s*(==|!=|in)\s*[("'\[]""")
    offenders = [f"{p.relative_to(ROOT)}:{i}" for folder in ("lab", "recipes") for p in _python(folder)
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]  # fmt: skip
    assert offenders == []


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield ("." * node.level) + node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def test_the_lab_is_below_the_domains_and_the_recipes_and_takes_sbdata_in_one_module():
    for path in _python("lab"):
        for name in _imports(path):
            assert not name.startswith(("benchmarks.domains", "benchmarks.recipes")), (path, name)
            if name.startswith("sbdata"):
                assert path.name == "_sb.py", (path, name)
    for path in _python("domains") + _python("recipes"):
        for name in _imports(path):
            assert not name.startswith("sbdata"), (path, name)  # through benchmarks.lab._sb
    for path in _python("domains"):
        assert not any(name.startswith("benchmarks.recipes") for name in _imports(path)), path


def test_one_training_run_function():
    defined = [p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*.py")
               if re.search(r"^def (train_run|train)\(", p.read_text(), re.M)]  # fmt: skip
    assert defined == ["lab/run.py"]
