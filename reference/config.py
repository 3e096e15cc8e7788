"""Framework-free model configuration shared by both trees (the only module torch code imports
from ``reference``).

A config is a frozen dataclass validated in ``__post_init__``: a bad value raises a
``ValueError``/``TypeError`` naming the field before any model is built.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP_NAMES = ("O", "SO", "U", "SU", "T", "BO", "GL")
COMPLEX_GROUPS = ("U", "SU", "T")
READOUTS = ("linear", "prototype")
MIXINGS = ("none", "scalar", "lowrank")


def algebra_dim(group, n, block=None):
    """Real dimension of the Lie algebra (SPEC §1 table) without building the group."""
    block = 2 if block is None else block
    return {
        "O": n * (n - 1) // 2,
        "SO": n * (n - 1) // 2,
        "U": n * n,
        "SU": n * n - 1,
        "T": n,
        "BO": (n // block) * block * (block - 1) // 2,
        "GL": n * n,
    }[group]


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def _require_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {list(choices)}")


@dataclass(frozen=True)
class GroupRNNConfig:
    """Group-state RNN language model (SPEC §2).

    Attributes:
        vocab_size: number of token ids V; inputs must lie in [0, V).
        group: one of GROUP_NAMES.
        n: the state is an n×n matrix.
        block: block size b of ``BO`` (default 2); must be None for the other groups.
        embedding_dim: token embedding width F.
        readout: ``linear`` (R·realvec(H) + c) or ``prototype`` (τ·Re tr(H^H P_v)).
        recurrent: include the state term U(H_{t-1}) in the update.
        reproject_every: apply ``nearest`` to the state every k steps (None: never).
        mixing: tangent-space mixing of A_t (SPEC §4): ``none``, ``scalar`` or ``lowrank``.
        mixing_rank: rank r of ``lowrank`` mixing (required there, None otherwise).
    """

    vocab_size: int
    group: str = "O"
    n: int = 8
    block: int | None = None
    embedding_dim: int = 32
    readout: str = "linear"
    recurrent: bool = True
    reproject_every: int | None = None
    mixing: str = "none"
    mixing_rank: int | None = None

    def __post_init__(self):
        _require_int("vocab_size", self.vocab_size, 1)
        _require_choice("group", self.group, GROUP_NAMES)
        _require_int("n", self.n, 1)
        if self.group == "BO":
            if self.block is not None:
                _require_int("block", self.block, 1)
            block = 2 if self.block is None else self.block
            if self.n % block:
                raise ValueError(f"BO needs n divisible by the block size: n={self.n}, block={block}")
        elif self.block is not None:
            raise ValueError(f"block={self.block} only applies to group 'BO', not {self.group!r}")
        if self.algebra_dim == 0:
            raise ValueError(
                f"{self.group} with n={self.n}{'' if self.block is None else f', block={self.block}'} has a "
                "0-dimensional Lie algebra: the state could never move; use n >= 2 (or block >= 2)")
        _require_int("embedding_dim", self.embedding_dim, 1)
        _require_choice("readout", self.readout, READOUTS)
        if not isinstance(self.recurrent, bool):
            raise TypeError(f"recurrent must be a bool, got {type(self.recurrent).__name__}")
        if self.reproject_every is not None:
            _require_int("reproject_every", self.reproject_every, 1)
        _require_choice("mixing", self.mixing, MIXINGS)
        if self.mixing == "lowrank":
            if self.mixing_rank is None:
                raise ValueError("mixing='lowrank' needs mixing_rank")
            _require_int("mixing_rank", self.mixing_rank, 1)
        elif self.mixing_rank is not None:
            raise ValueError(f"mixing_rank only applies to mixing='lowrank', not {self.mixing!r}")

    @property
    def algebra_dim(self):
        """dim g: the number of coordinates the cell produces per step."""
        return algebra_dim(self.group, self.n, self.block)

    @property
    def is_complex(self):
        return self.group in COMPLEX_GROUPS

    @property
    def state_features(self):
        """len(realvec(H)): n² real numbers, 2n² for the complex groups."""
        return self.n * self.n * (2 if self.is_complex else 1)
