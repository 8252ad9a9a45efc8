"""Selection policies, sbdata's extension point: the contract, the built-in policies, the sampling helpers a
custom policy is made of, and the registry of names.

A third-party policy subclasses :class:`SelectionPolicy`, declares ``fixed_count`` and ``weighted``, and implements
``select`` (see ``examples/custom_policy.py``); it needs nothing outside this module's ``__all__``.

User API. Its ``__all__`` is the sum of its private modules' ``__all__``.
"""

from sbdata.policies import _base, _builtin, _history, _importance, _reducible, _registry, _sampling
from sbdata.policies._base import *
from sbdata.policies._builtin import *
from sbdata.policies._history import *
from sbdata.policies._importance import *
from sbdata.policies._reducible import *
from sbdata.policies._registry import *
from sbdata.policies._sampling import *

__all__ = (
    _base.__all__
    + _builtin.__all__
    + _history.__all__
    + _importance.__all__
    + _reducible.__all__
    + _registry.__all__
    + _sampling.__all__
)
