"""`LeanModule`: a LightningModule whose plain attribute writes skip `nn.Module.__setattr__`'s type checks.

Lightning's loop records the hook it is in by setting `module._current_fx_name` before and after
every hook, callback hook and strategy hook: about 45 attribute writes per optimizer step. Each goes
through `nn.Module.__setattr__`, whose `isinstance(value, Parameter)` / `Buffer` checks run through
Python-level `__instancecheck__`s, about 5% of a step of the memorizing tier's MLP on one CPU
thread. A write of a plain value (None, a string, a number) to a name that is no parameter, buffer
or submodule ends in `object.__setattr__` there anyway, so it goes there directly; every other write
(a tensor, a module, a parameter's name) takes `nn.Module`'s path unchanged.
"""

from __future__ import annotations

import lightning as L

#: Values that can never be a parameter, buffer or submodule.
PLAIN_TYPES = frozenset({type(None), str, bool, int, float})


class LeanModule(L.LightningModule):
    """The base of every LightningModule the package fits (unlearning methods, supervised training)."""

    def __setattr__(self, name: str, value) -> None:
        state = self.__dict__
        if (
            type(value) in PLAIN_TYPES
            and name not in state.get("_parameters", ())
            and name not in state.get("_buffers", ())
            and name not in state.get("_modules", ())
        ):
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)
