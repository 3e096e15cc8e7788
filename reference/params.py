"""Parameter specifications: the keys, shapes and initial distributions of a model.

A reference model is a set of plain functions of a parameter dict ``{key: ndarray}`` whose keys
and shapes are exactly those of the torch model's ``state_dict`` (tested), so converting one to
the other is ``torch.from_numpy``. Group-valued parameters carry their group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ParamSpec:
    """One parameter.

    Attributes:
        shape: array shape (Linear weights are (out, in), as in torch).
        mean, std: Euclidean init ``mean + std · N(0, 1)`` (std 0: the constant ``mean``).
        scale: typical spread of trained values; ``random_params`` draws ``mean + scale · N(0, 1)``
            (default: std) so that tests see generic, not freshly initialized, parameters.
        group: the group of a group-valued parameter ([..., n, n] elements), else None.
        haar: group-valued init is Haar random instead of the identity.
    """

    shape: tuple
    mean: float = 0.0
    std: float = 0.0
    scale: float | None = None
    group: object = None
    haar: bool = False

    def sample(self, generator, generic=False):
        """Initial value (``generic=False``) or a generic random value (``generic=True``)."""
        if self.group is not None:
            batch = self.shape[:-2]
            if generic or self.haar:
                return self.group.random(batch, generator=generator)
            return self.group.identity(batch)
        spread = (self.std if self.scale is None else self.scale) if generic else self.std
        return self.mean + spread * generator.standard_normal(self.shape)


def prefixed(prefix, specs):
    """``{prefix + key: spec}``: nest a component's specs under its attribute name."""
    return {prefix + key: spec for key, spec in specs.items()}


def sub_params(params, prefix):
    """The entries of ``params`` under ``prefix``, with the prefix removed."""
    return {key[len(prefix):]: value for key, value in params.items() if key.startswith(prefix)}


def init_params(specs, generator):
    """Initial parameters drawn from ``generator`` (a ``numpy.random.Generator``)."""
    return {key: spec.sample(generator) for key, spec in specs.items()}


def random_params(specs, generator):
    """Generic parameters: Haar for group-valued ones, ``mean + scale·N(0,1)`` otherwise."""
    return {key: spec.sample(generator, generic=True) for key, spec in specs.items()}


def check_params(specs, params):
    """Raise a ValueError naming the key unless ``params`` matches ``specs`` and lies on its groups."""
    missing, extra = sorted(set(specs) - set(params)), sorted(set(params) - set(specs))
    if missing or extra:
        raise ValueError(f"parameter keys differ from the model's: missing {missing}, unexpected {extra}")
    for key, spec in specs.items():
        value = np.asarray(params[key])
        if value.shape != tuple(spec.shape):
            raise ValueError(f"parameter {key!r} has shape {value.shape}, expected {tuple(spec.shape)}")
        if spec.group is not None:
            ok, reason = spec.group.is_member(value, explain=True)
            if not ok:
                raise ValueError(f"parameter {key!r} is not on {spec.group!r}: {reason}")


class SpecModel:
    """Base of a reference model whose ``param_spec()`` (``{key: ParamSpec}`` in state_dict order,
    defined by the subclass) lays out its parameters: the parameter dict's initial value and its
    check, read from the spec."""

    def init_params(self, generator):
        """Initial parameters from a ``numpy.random.Generator``."""
        return init_params(self.param_spec(), generator)

    def check_params(self, params):
        """Raise ValueError unless keys and shapes match and group-valued entries lie on their groups."""
        check_params(self.param_spec(), params)
