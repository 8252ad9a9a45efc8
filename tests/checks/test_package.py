import ast
import codecs
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sbdata

ROOT = Path(__file__).resolve().parents[2]


def test_all_is_sorted_and_importable():
    assert sbdata.__all__ == sorted(sbdata.__all__)
    for name in sbdata.__all__:
        assert hasattr(sbdata, name), name


def test_import_does_not_pull_optional_dependencies():
    frameworks = "('torchdata', 'webdataset', 'lightning', 'accelerate', 'transformers')"
    modules = "sbdata, sbdata.tasks, sbdata.integrations, sbdata.distributed, sbdata.pruning, sbdata.advice"
    code = f"import sys, {modules}; print(sorted(m for m in {frameworks} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# The user's documents whose python blocks run (each file's blocks in order, in one namespace of their own): the
# README and the user guide.
GUIDE = ROOT / "docs" / "guide"
USER_DOCS = ["README.md", *sorted(str(path.relative_to(ROOT)) for path in GUIDE.glob("*.md"))]


def readme_python_blocks(document: str = "README.md") -> list[str]:
    text = (ROOT / document).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


# The optional packages, by import name, and the distribution (pyproject requirement) that brings each one.
OPTIONAL_IMPORTS = {
    "torchdata": "torchdata",
    "webdataset": "webdataset",
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "lightning_fabric": "lightning",
    "accelerate": "accelerate",
    "transformers": "transformers",
    "mnist1d": "mnist1d",
    "tqdm": "tqdm",
    "matplotlib": "matplotlib",
}
INSTALL_LINE = re.compile(r'\A# install: pip install -e (?:\.|"\.\[([\w,]+)\]")(?:\s|$)')


def extras_distributions() -> dict[str, set[str]]:
    """Each extra of pyproject.toml and the distributions (names only) it installs."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import pytest

        tomllib = pytest.importorskip("tomli")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {name: {re.split(r"[<>=!~; \[]", req, maxsplit=1)[0] for req in reqs} for name, reqs in extras.items()}


def with_dependencies(distributions: set[str]) -> set[str]:
    """``distributions`` and every distribution they require, installed ones only (lightning brings tqdm)."""
    import importlib.metadata

    found, todo = set(), [name.lower() for name in distributions]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [re.split(r"[<>=!~; \[(]", req, maxsplit=1)[0].lower() for req in requires if "extra ==" not in req]
    return found


def readme_block_installs(document: str = "README.md") -> list[tuple[str, list[str]]]:
    """Each python block of a user document and the extras its first line names (``# install: pip install -e .``
    for the core install, ``# install: pip install -e ".[torchdata]"`` for an extra)."""
    found = []
    for i, block in enumerate(readme_python_blocks(document)):
        named = INSTALL_LINE.match(block)
        assert named, f"{document} python block {i} does not open with the install it needs (# install: ...):\n{block}"
        found.append((block, sorted(named.group(1).split(",")) if named.group(1) else []))
    return found


# Runs in a fresh interpreter: the blocks in order, in one namespace, each with only its own install importable.
RUN_BLOCKS = """
import importlib.metadata, json, sys, traceback

spec = json.load(sys.stdin)
document = spec.get("document", "README.md")
optional = spec["optional"]
origin = {name: frozenset() for name in sys.modules}  # the distributions allowed when each module was imported
namespace = {"__name__": "readme"}
absent = set()  # the distributions the running block may not use: their metadata reads as not installed either
metadata_version = importlib.metadata.version


def version(name):  # what libraries ask before importing an optional package (torchmetrics: matplotlib)
    if name.lower() in absent:
        raise importlib.metadata.PackageNotFoundError(name)
    return metadata_version(name)


importlib.metadata.version = version
hideable = {*optional, "sbdata"}  # what a block with more extras may have imported that a later one may not see
for i, (block, allowed) in enumerate(spec["blocks"]):
    allowed = frozenset(allowed)
    hidden = {  # torch's own modules stay: torch registers operators once per process
        m: sys.modules.pop(m)
        for m in list(sys.modules)
        if m.split(".")[0] in hideable and not origin.get(m, frozenset()) <= allowed
    }
    refused = [name for name, distribution in optional.items() if distribution not in allowed]
    absent = {distribution for distribution in optional.values() if distribution not in allowed}
    sys.modules.update(dict.fromkeys(refused))  # None: `import` raises ModuleNotFoundError, find_spec says absent
    try:
        exec(compile(block, f"{document} python block {i}", "exec"), namespace)
    except BaseException as error:
        print(f"{document} python block {i} failed: {error!r}\\n{block}")
        traceback.print_exc()
        sys.exit(1)
    for name in refused:
        del sys.modules[name]
    for name in sys.modules:
        origin.setdefault(name, allowed)
    sys.modules.update(hidden)
"""


@pytest.mark.parametrize("document", USER_DOCS)
def test_readme_python_blocks_run_in_order_with_exactly_their_installs(document):
    """Every python block of the README and of each page of the user guide runs, in order (a page's blocks share
    one namespace, each page its own), with exactly the install its first line names.

    Building one environment per extra would take minutes of CI per extra, so the blocks run in one fresh
    interpreter of the test environment (which has every extra) where the missing installs are simulated: before
    each block, every optional package (torchdata, webdataset, lightning, accelerate, transformers, mnist1d, tqdm,
    matplotlib) that the block's named extras do not bring is entered in ``sys.modules`` as ``None``, so that
    ``import`` raises the ``ModuleNotFoundError`` a core install would and ``importlib.util.find_spec`` reports it
    absent (a meta path finder that raised would break the probes torch makes with ``find_spec``; one that returned
    nothing could not stop the next finder); modules imported by an earlier block with more extras (``sbdata.nodes``)
    are hidden from a later block with fewer. A block that needs an extra it does not name fails, naming itself.
    """
    distributions = extras_distributions()
    blocks = readme_block_installs(document)
    if not blocks:
        assert "```python" not in (ROOT / document).read_text()
        return
    runs = []
    for i, (block, extras) in enumerate(blocks):
        unknown = sorted(set(extras) - set(distributions))
        assert not unknown, f"{document} python block {i} names extras pyproject.toml lacks: {unknown}"
        named = set().union(*(distributions[e] for e in extras))
        runs.append((block, sorted(with_dependencies(named) & set(OPTIONAL_IMPORTS.values()))))
    spec = json.dumps({"optional": OPTIONAL_IMPORTS, "blocks": runs, "document": document})
    run = subprocess.run(
        [sys.executable, "-c", RUN_BLOCKS], input=spec, capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_block_runner_refuses_an_extra_the_block_does_not_name():
    blocks = [("import torch\nimport sbdata\n", []), ("from sbdata.nodes import SBSelector\n", ["torchdata"])]
    blocks += [("from sbdata.nodes import SBSelector\n", [])]  # imported above with torchdata: hidden here
    spec = json.dumps({"optional": OPTIONAL_IMPORTS, "blocks": blocks})
    run = subprocess.run([sys.executable, "-c", RUN_BLOCKS], input=spec, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1
    assert "README.md python block 2 failed" in run.stdout and "torchdata" in run.stdout + run.stderr


def test_the_install_line_names_the_extras():
    assert INSTALL_LINE.match("# install: pip install -e .\nimport torch").group(1) is None
    assert (
        INSTALL_LINE.match('# install: pip install -e ".[torchdata,webdataset]"\n').group(1) == "torchdata,webdataset"
    )
    assert not INSTALL_LINE.match("# install: pip install sbdata[torchdata]\n")


def readme_option_names() -> list[str]:
    """The option names in the first column of the guide's options table (``split`` / ``forward`` share a row)."""
    text = (GUIDE / "wrap_a_loader.md").read_text()
    table = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`(\w+)`", row)]


def test_readme_options_table_lists_exactly_the_engine_keyword_options():
    parameters = inspect.signature(sbdata.SelectionEngine.__init__).parameters.values()
    engine = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    readme = readme_option_names()
    assert len(readme) == len(set(readme)), readme
    assert sorted(readme) == sorted(engine), (set(engine) - set(readme), set(readme) - set(engine))


def test_package_ships_its_type_marker():
    assert (ROOT / "sbdata" / "py.typed").exists()
    assert 'sbdata = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


# ----------------------------------------------------------------- modules outside the engine use its public surface
# Front ends, the lockstep driver, the integrations and every other folder reach other objects only through their
# public methods and properties (docs/design.md): no `x._name` on anything but self/cls/super(), and never into the
# engine's parts.
ENGINE_PARTS = {"sb_step", "emitter", "tracker", "controller"}
# Underscored names of torch and the standard library that are their documented or only way to a fact: a tensor's
# in-place version counter, the caller's frame, a namedtuple's fields, a module's own children and buffers.
FOREIGN = {"_version", "_getframe", "_fields", "_modules", "_buffers", "_foreach_lerp_"}
# Every module outside the engine's folder: the front ends, the lockstep, the integrations, pruning, advice, ...
BOUNDARY_FILES = sorted(
    p.relative_to(ROOT).as_posix() for p in (ROOT / "sbdata").rglob("*.py") if p.parent.name != "engine"
)


def _names_engine(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "engine") or (
        isinstance(node, ast.Attribute) and node.attr == "engine"
    )


def private_reads(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each attribute read past an object's public surface."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        dunder = node.attr.startswith("__") and node.attr.endswith("__")
        if node.attr.startswith("_") and not dunder and node.attr not in FOREIGN:
            own = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
            inherited = isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super"
            if not (own or inherited):
                found.append((node.lineno, f".{node.attr}"))
        elif node.attr in ENGINE_PARTS and _names_engine(owner):
            found.append((node.lineno, f"engine.{node.attr}"))
    return sorted(found)


def test_the_scanner_finds_each_private_read():
    source = """
a = engine._passes.step
b = self.engine._intake
c = self.sb.engine.sb_step.cache
d = loader.engine.emitter
e = engine.tracker.samples_seen
f = other._hidden()
fine = self._order, super()._save_rng_state(d), engine.step, self.engine.pool, type(x).__name__, output.pop()
"""
    assert [what for _, what in private_reads(source)] == [
        "._passes", "._intake", "engine.sb_step", "engine.emitter", "engine.tracker", "._hidden",
    ]  # fmt: skip


def test_front_ends_read_no_private_attribute_of_the_engine_or_its_parts():
    offenders = [
        f"{name}:{line}: {what}" for name in BOUNDARY_FILES for line, what in private_reads((ROOT / name).read_text())
    ]
    assert len(BOUNDARY_FILES) >= 40
    assert not offenders, "add a public method or property to SelectionEngine instead:\n" + "\n".join(offenders)


# ----------------------------------------------------------------- decoding security: no pickle-enabling call
def _is_codec(node: ast.expr) -> bool:
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    try:
        codecs.lookup(node.value)
    except LookupError:
        return False
    return True


def pickle_enabling_calls(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each call in ``source`` that can unpickle data: a WebDataset ``decode`` (its default
    decoders include pickle for ``.pyd``/``.pickle``), ``torch.load`` without ``weights_only=True``, ``pickle.load``
    and ``allow_pickle=True``. ``bytes.decode()`` on a name or an item is not a WebDataset stage and is allowed."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value if isinstance(func, ast.Attribute) else None
        owner_name = owner.id if isinstance(owner, ast.Name) else ""
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        if name == "decode" and (isinstance(owner, ast.Call) or owner_name in ("wds", "webdataset")):
            if not (len(node.args) == 1 and not node.keywords and _is_codec(node.args[0])):
                found.append((node.lineno, "webdataset decode"))
        elif name in ("Decoder", "autodecode") or (name == "Unpickler" and owner_name == "pickle"):
            found.append((node.lineno, name))
        elif name == "load" and owner_name == "torch":
            weights_only = keywords.get("weights_only")
            if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                found.append((node.lineno, "torch.load"))
        elif name in ("load", "loads") and owner_name in ("pickle", "cPickle", "dill"):
            found.append((node.lineno, f"{owner_name}.{name}"))
        allow = keywords.get("allow_pickle")
        if allow is not None and not (isinstance(allow, ast.Constant) and allow.value is False):
            found.append((node.lineno, "allow_pickle"))
    return found


def test_the_scanner_finds_each_pickle_enabling_call():
    source = """
ds = wds.WebDataset(urls).decode()
ds = wds.WebDataset(urls).shuffle(9).decode("pil")
stage = wds.decode("torch")
state = torch.load(path)
state = torch.load(path, WEIGHTS_ONLY_OFF)
obj = pickle.loads(blob)
arr = np.load(path, allow_pickle=True)
fine = torch.load(path, weights_only=True), sample["cls"].decode(), key.decode(), raw.getvalue().decode("utf-8")
fine = np.load(path), np.lib.format.read_array(f, allow_pickle=False), pickle.dumps(state)
""".replace("WEIGHTS_ONLY_OFF", "weights_only=" + "False")  # spelt out of line: no grep hit on a fixture
    assert [what for _, what in pickle_enabling_calls(source)] == [
        "webdataset decode",
        "webdataset decode",
        "webdataset decode",
        "torch.load",
        "torch.load",
        "pickle.loads",
        "allow_pickle",
    ]


def test_no_python_file_in_the_repository_enables_pickle():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if any(part.startswith(".") or part in ("build", "dist") for part in path.relative_to(ROOT).parts):
            continue
        for line, what in pickle_enabling_calls(path.read_text()):
            offenders.append(f"{relative}:{line}: {what}")
    assert not offenders, (
        "pickle-enabling calls (README, 'Decoding security'): decode .npy with allow_pickle=False and .cls as int, "
        f"and load states with torch.load(..., weights_only=True): {offenders}"
    )
