"""The ``words`` task: word problems on S3, A5 and S5, the running product of group elements.

``permutation_group`` numbers a group's elements and multiplies them; ``word_example``/``word_batch``
generate the sequences (NumPy, seeded by an explicit generator); ``rotation_logarithm`` gives the
faithful SO(n) representation's logarithms used by the exact construction; ``Words`` is the task
behind ``experiments.train``. The conventions, with a worked example: ``Words``.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from experiments.tasks.length_generalization import LengthGeneralizationTask, LengthsConfig
from experiments.tasks.sequences import require_generator, require_int

GROUPS = {"S3": (3, False), "A5": (5, True), "S5": (5, False)}  # name: (degree, even permutations only)


def permutation_sign(permutation):
    """+1 or −1: (−1)^(number of inversions) of a one-line permutation."""
    inversions = sum(a > b for a, b in itertools.combinations(permutation, 2))
    return -1 if inversions % 2 else 1


class PermutationGroup:
    """A group of permutations of ``degree`` points, numbered as in the module docstring.

    Attributes:
        name: ``S3``, ``A5`` or ``S5``.
        degree: n, the number of points.
        elements: [|G|, n] one-line notation of element id k (row k).
        signs: [|G|] the signs ±1.
        table: [|G|, |G|] multiplication table, ``table[a, b]`` = id of a·b (b first, then a).
    """

    def __init__(self, name, degree, even_only):
        perms = [p for p in itertools.permutations(range(degree)) if not even_only or permutation_sign(p) == 1]
        self.name, self.degree = name, degree
        self.elements = np.array(perms, dtype=np.int64)  # [|G|, n]
        self.signs = np.array([permutation_sign(p) for p in perms], dtype=np.int64)
        index = {p: k for k, p in enumerate(perms)}
        # (a·b)(i) = a(b(i)): row a indexed by row b
        self.table = np.array([[index[tuple(a[b])] for b in self.elements] for a in self.elements], dtype=np.int64)

    def __repr__(self):
        return f"PermutationGroup({self.name!r}, order={self.order})"

    @property
    def order(self):
        return len(self.elements)

    def permutation_matrices(self):
        """P_σ with P_σ e_i = e_σ(i): ``[|G|, n, n]`` (so P_{a·b} = P_a P_b)."""
        matrices = np.zeros((self.order, self.degree, self.degree))
        points = np.arange(self.degree)
        for k, sigma in enumerate(self.elements):
            matrices[k, sigma, points] = 1.0
        return matrices

    def representation(self):
        """ρ(σ) = sgn(σ)·P_σ ∈ SO(n) (n odd): ``[|G|, n, n]``, a faithful homomorphism."""
        if self.degree % 2 == 0:
            raise ValueError(f"sgn(σ)·P_σ lies in SO(n) only for odd n; {self.name} acts on {self.degree} points")
        return self.signs[:, None, None] * self.permutation_matrices()


@functools.lru_cache(maxsize=None)
def permutation_group(name):
    """The ``PermutationGroup`` called ``name`` (one of ``GROUPS``)."""
    if name not in GROUPS:
        raise ValueError(f"unknown group {name!r}; choose one of {list(GROUPS)}")
    return PermutationGroup(name, *GROUPS[name])


def _require_group(group):
    if not isinstance(group, PermutationGroup):
        raise TypeError(f"group must be a PermutationGroup (permutation_group(name)), got {type(group).__name__}")
    return group


def word_example(group, words):
    """Inputs and left-to-right running products for given words.

    Args:
        group: a ``PermutationGroup``.
        words: [B, L] element ids in [0, |G|).

    Returns:
        inputs (the words) and targets ``g_t = x_1 ⋯ x_t``, int64 ``[B, L]``.
    """
    group = _require_group(group)
    words = np.asarray(words)
    if words.ndim != 2:
        raise ValueError(f"words must have shape [B, L], got {words.shape}")
    if not np.issubdtype(words.dtype, np.integer):
        raise TypeError(f"words must be integers, got dtype {words.dtype}")
    if words.size and (words.min() < 0 or words.max() >= group.order):
        raise ValueError(f"element ids of {group.name} lie in [0, {group.order}), got values in "
                         f"[{words.min()}, {words.max()}]")
    inputs = words.astype(np.int64)
    targets = np.empty_like(inputs)
    product = np.zeros(inputs.shape[0], dtype=np.int64)  # the identity's id
    for t in range(inputs.shape[1]):
        product = group.table[product, inputs[:, t]]
        targets[:, t] = product
    return inputs, targets


def word_batch(group, generator, batch, length):
    """Uniform words over ``group`` and their running products: ``inputs, targets: [batch, length]``."""
    group = _require_group(group)
    generator = require_generator(generator)
    batch = require_int("batch", batch, 1)
    length = require_int("length", length, 1)
    return word_example(group, generator.integers(0, group.order, size=(batch, length)))


def rotation_logarithm(rotation, atol=1e-10):
    """A real logarithm of a rotation: skew L with expm(L) = R, from the real Schur form.

    R = Z T Zᵀ with Z orthogonal and T block diagonal (R is normal): 2×2 blocks [[c, −s], [s, c]]
    with s ≠ 0, and ±1 on the diagonal. Each 2×2 block gets the angle θ = atan2(s, c) ∈ (−π, π);
    the +1 entries get 0. A −1 eigenvalue has no real logarithm on its own: the −1 entries are
    paired (their number is even, since det R = 1), and each pair (i, j) becomes the rotation by π
    in the plane (e_i, e_j): L_ji = π, L_ij = −π. L is the principal logarithm where R has no
    eigenvalue −1; otherwise it is one of the logarithms of largest eigenvalue magnitude π.

    Args:
        rotation: [n, n] real, RᵀR = I and det R = 1 (within ``atol``).

    Returns:
        [n, n] real skew-symmetric L.
    """
    r = np.asarray(rotation, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] != r.shape[1]:
        raise ValueError(f"rotation must be a square matrix, got shape {r.shape}")
    n = r.shape[0]
    if not np.allclose(r.T @ r, np.eye(n), atol=atol) or np.linalg.det(r) < 0:
        raise ValueError("rotation must lie in SO(n): RᵀR = I and det R = 1")
    t, z = scipy.linalg.schur(r, output="real")
    log = np.zeros((n, n))
    minus_one, i = [], 0
    while i < n:
        if i + 1 < n and t[i + 1, i] != 0.0:  # LAPACK zeroes the subdiagonal of real eigenvalues
            angle = math.atan2(t[i + 1, i], t[i, i])
            log[i + 1, i], log[i, i + 1] = angle, -angle
            i += 2
        else:
            if t[i, i] < 0:
                minus_one.append(i)
            i += 1
    for a, b in zip(minus_one[::2], minus_one[1::2]):
        log[b, a], log[a, b] = math.pi, -math.pi
    log = z @ log @ z.T
    return (log - log.T) / 2


@dataclass(frozen=True)
class WordsConfig(LengthsConfig):
    """The word problem's lengths and group.

    Attributes:
        word_group: the group whose words are tracked (a key of ``words.GROUPS``).
    """

    word_group: str = "S5"

    def __post_init__(self):
        super().__post_init__()
        if self.word_group not in GROUPS:
            raise ValueError(f"unknown word_group {self.word_group!r}; choose one of {list(GROUPS)}")


class Words(LengthGeneralizationTask):
    """Element ids in, the id of the left-to-right running product out at every position.

    Word problems on permutation groups (docs/design.md, Tasks and data): track the running product of group elements.

    Groups: ``S3`` (6 elements, the smallest non-abelian group), ``A5`` (60, the smallest non-abelian
    simple group; NC¹-complete word problem) and ``S5`` (120).

    Elements and their ids. A permutation σ of {0, …, n−1} is written in one-line notation
    ``(σ(0), …, σ(n−1))``. ``S_n`` numbers its n! elements in lexicographic order of that tuple (the
    order of ``itertools.permutations``); ``A5`` keeps the even permutations of 5 points in the same
    order and numbers them 0 … 59. Id 0 is the identity in every group. For ``S3``::

        id  0        1        2        3        4        5
        σ   (0,1,2)  (0,2,1)  (1,0,2)  (1,2,0)  (2,0,1)  (2,1,0)

    Product convention. ``σ·τ`` is the composition "τ first, then σ": (σ·τ)(i) = σ(τ(i)). The
    permutation matrix P_σ e_i = e_σ(i) then satisfies P_{σ·τ} = P_σ P_τ. For S3: 2·1 = 3 and
    1·2 = 4 (so S3 is not abelian), 3·4 = 0 (3 and 4 are inverse 3-cycles).

    The task. Tokens x_1 … x_L are uniform element ids; the target at position t is the id of the
    running product taken **left to right**, g_t = x_1 · x_2 ⋯ x_t. This is the order of the group RNN's
    update H_t = H_{t−1} · exp(A_t): with exp(A_t) = ρ(x_t) for a representation ρ, H_t = ρ(g_t).

    >>> s3 = permutation_group("S3")
    >>> inputs, targets = word_example(s3, [[2, 1, 1], [1, 2, 3]])
    >>> targets.tolist()
    [[2, 3, 2], [1, 4, 0]]

    A faithful representation in SO(n) for odd n (``representation``): ρ(σ) = sgn(σ)·P_σ. It is a
    homomorphism (the sign is), det ρ(σ) = sgn(σ)ⁿ·sgn(σ) = 1 for odd n, and injective (P_σ is, and
    ±P_σ = P_τ forces the sign + and σ = τ, since a permutation matrix has non-negative entries).
    ``rotation_logarithm`` gives each ρ(σ) a real logarithm in so(n): such an input-driven SO(5) RNN
    tracks S5 (and A5) exactly at any length.
    """

    Config = WordsConfig

    @property
    def vocab_size(self):
        return permutation_group(self.config.word_group).order

    def sample(self, generator, batch, length):
        return word_batch(permutation_group(self.config.word_group), generator, batch, length)


TASKS = {"words": Words}
