"""The typed options: one TypedDict that matches the engine's signature, and Literal types that match the values the
components accept."""

import inspect
import typing

import pytest
import torch.nn.functional as F
from torch import nn

import sbdata
from sbdata import EngineOptions, SBCollator, SBLoader, SelectionEngine
from sbdata.distributed._collectives import SYNC_MODES
from sbdata.engine._options import NanPolicy, PolicyName, ScoreMode, ScoreName, SyncMode, check_fingerprint, fingerprint
from sbdata.engine._sb_step import NAN_POLICIES
from sbdata.policies import POLICIES
from sbdata.scoring._gradnorm import SCORES
from sbdata.scoring._scorer import SCORE_MODES


def engine_keyword_options() -> list[str]:
    parameters = inspect.signature(SelectionEngine.__init__).parameters.values()
    return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


def annotation(value: object) -> str:
    return getattr(value, "__forward_arg__", value)  # TypedDict stores string annotations as ForwardRefs


def test_typed_dict_lists_every_engine_keyword_option_with_its_type():
    engine_annotations = SelectionEngine.__init__.__annotations__
    assert list(EngineOptions.__annotations__) == engine_keyword_options()
    for name, declared in EngineOptions.__annotations__.items():
        assert annotation(declared) == engine_annotations[name], name
    assert not EngineOptions.__required_keys__  # total=False: every option may be left out
    typing.get_type_hints(EngineOptions)  # every annotation resolves


ACCEPTED = [
    (PolicyName, POLICIES),
    (ScoreMode, SCORE_MODES),
    (ScoreName, SCORES),
    (NanPolicy, NAN_POLICIES),
    (SyncMode, SYNC_MODES),
]


@pytest.mark.parametrize("alias, values", ACCEPTED)
def test_literal_types_list_exactly_the_accepted_values(alias, values):
    assert sorted(typing.get_args(alias)) == sorted(values)


@pytest.mark.parametrize("front_end", [SBLoader, SBCollator])
def test_front_ends_take_the_typed_options(front_end):
    options = inspect.signature(front_end.__init__).parameters["options"]
    assert options.kind is inspect.Parameter.VAR_KEYWORD
    assert options.annotation == "Unpack[EngineOptions]"


def test_the_option_aliases_name_the_public_types():
    from sbdata.engine import LossFn
    from sbdata.engine._options import PolicyArg

    assert typing.get_args(PolicyArg)[-1] is sbdata.SelectionPolicy
    assert LossFn is not None


def test_fingerprint_names_the_option_that_differs():
    model = nn.Linear(2, 2)
    saved = SelectionEngine(model, F.cross_entropy, policy="rank", batch_size=4).fingerprint()
    assert saved == fingerprint(sbdata.RankWeighted(), None, 4, False)
    check_fingerprint(saved, dict(saved))
    with pytest.raises(ValueError, match=r"batch_size=4 but this loader has batch_size=8"):
        check_fingerprint(saved, {**saved, "batch_size": 8})
    with pytest.raises(ValueError, match="not a SelectionEngine state"):
        check_fingerprint(None, saved)


SNIPPET = """
import torch.nn.functional as F
from torch import nn
from sbdata import HistoryPercentile, SBCollator, SBLoader, Schedule
from sbdata.wds import sb_select

model = nn.Linear(2, 2)
SBLoader([], model, F.cross_entropy, keep=0.5, policy="rank", schedule=Schedule(), batch_size=4)
SBLoader([], model, nn.CrossEntropyLoss(), policy=HistoryPercentile(), nan_policy="keep", sync="global")
SBCollator(model, F.cross_entropy, keep=0.3, id_key=-1)
sb_select(model, F.cross_entropy, keep=0.5, split=lambda b: (b[0], b[1]))
SBLoader([], model, F.cross_entropy, kep=0.5)  # line 12
SBLoader([], model, F.cross_entropy, policy="biggest")  # line 13
sb_select(model, F.cross_entropy, batch_size="64")  # line 14
"""


@pytest.mark.slow  # mypy analyses torch: about 20 s
def test_a_type_checker_checks_the_front_ends_options(tmp_path):
    api = pytest.importorskip("mypy.api")
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET)
    stdout, _, _ = api.run([str(path), "--no-incremental", "--ignore-missing-imports", "--python-version", "3.10"])
    own = [line for line in stdout.splitlines() if line.startswith(str(path)) and ": error:" in line]
    assert [int(line.split(":")[1]) for line in own] == [12, 13, 14], stdout
    assert '"kep"' in own[0] and "Literal['biggest']" in own[1] and '"batch_size"' in own[2]
