"""Framework-free model configuration shared by both trees (the only module torch code imports
from ``reference``).

A config is a frozen dataclass validated in ``__post_init__``: a bad value raises a
``ValueError``/``TypeError`` naming the field before any model is built.

The facts of a group-state model's group (algebra dimension, complexity, number of state
features) are read from the group itself (``reference.groups``, NumPy only; building one
allocates nothing of size n²), never restated here.
"""

from __future__ import annotations

import functools
import math
import dataclasses
from dataclasses import dataclass

from reference.groups import GROUPS, get_group

GROUP_NAMES = tuple(GROUPS)
READOUTS = ("linear", "prototype")
MIXINGS = ("none", "scalar", "lowrank")
RECURRENCES = ("loop", "scan", "fused")  # how the torch group RNN runs its loop over time
INPUT_INITS = ("default", "spread")  # initialization of the group RNN's input map (GroupRNNConfig.input_init)
FORGETS = ("none", "constant", "gate")  # how the group RNN's state lets go of old input (GroupRNNConfig.forget)
FORGET_GROUPS = ("O", "SO", "U", "T", "BO")  # compact groups whose polar factor stays on the group
FORGET_TOLERANCE = 1e-15  # how close to 1 forget_steps takes the smallest singular value of the leaky blend


def forget_steps(alpha):
    """The Newton–Schulz steps k after which polar((1 − a)·H + a·I) has converged for every H on a
    compact group and every a ≤ ``alpha`` < 1/2.

    M = (1 − a)·H + a·I is normal, with eigenvalues (1 − a)·λ + a, |λ| = 1, so its singular values
    lie in [1 − 2a, 1] ⊂ (0, √3): the iteration P ← P·(3I − PᴴP)/2 from P = M maps each of them by
    σ ↦ σ(3 − σ²)/2, increasing on [0, 1], and k is the count that takes the worst, 1 − 2·alpha, to
    within ``FORGET_TOLERANCE`` of 1 (a fixed count: no check of convergence at run time).
    """
    sigma, steps = 1.0 - 2.0 * alpha, 0
    while 1.0 - sigma > FORGET_TOLERANCE:
        sigma, steps = sigma * (3.0 - sigma * sigma) / 2.0, steps + 1
    return steps


@functools.lru_cache(maxsize=256)
def _group(name, n, block):
    return get_group(name, n, block)


def _require_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def _require_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {list(choices)}")


def model_config(config_class, config=None, fields=None):
    """The config a model is built from: ``config`` itself, or a ``config_class`` made of the keyword
    ``fields`` (``GroupRNN(vocab_size=65, group="SO", n=8)`` as ``nn.LSTM(10, 20)`` takes its sizes);
    never both. Unknown keywords are a ``TypeError`` listing the fields."""
    fields = fields or {}
    if config is not None:
        if fields:
            raise TypeError(f"give either a {config_class.__name__} or its fields as keywords, not both "
                            f"(got a config and {sorted(fields)})")
        if not isinstance(config, config_class):
            raise TypeError(f"config must be a {config_class.__name__}, got {type(config).__name__}")
        return config
    known = [field.name for field in dataclasses.fields(config_class)]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise TypeError(f"unknown option {unknown[0]!r}; the options are the fields of "
                        f"{config_class.__name__}: {', '.join(known)}")
    missing = [field.name for field in dataclasses.fields(config_class) if field.name not in fields
               and field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING]
    if missing:
        raise TypeError(f"missing option {missing[0]!r}: {config_class.__name__} has no default for it")
    return config_class(**fields)


def _validate_group_fields(config):
    """group / n / block, and a Lie algebra of positive dimension, of a group-state model config."""
    _require_choice("group", config.group, GROUP_NAMES)
    _require_int("n", config.n, 1)
    if config.group == "BO":
        if config.block is not None:
            _require_int("block", config.block, 1)
        block = 2 if config.block is None else config.block
        if config.n % block:
            raise ValueError(f"BO needs n divisible by the block size: n={config.n}, block={block}")
    elif config.block is not None:
        raise ValueError(f"block={config.block} only applies to group 'BO', not {config.group!r}")
    if config.state_group.dim == 0:
        raise ValueError(
            f"{config.group} with n={config.n}{'' if config.block is None else f', block={config.block}'} has a "
            "0-dimensional Lie algebra: the state could never move; use n >= 2 (or block >= 2)")


def _validate_mixing_fields(config):
    """mixing and mixing_rank of a group-state model config."""
    _require_choice("mixing", config.mixing, MIXINGS)
    if config.mixing == "lowrank":
        if config.mixing_rank is None:
            raise ValueError("mixing='lowrank' needs mixing_rank")
        _require_int("mixing_rank", config.mixing_rank, 1)
    elif config.mixing_rank is not None:
        raise ValueError(f"mixing_rank only applies to mixing='lowrank', not {config.mixing!r}")


def _validate_recurrence_fields(config):
    """recurrence, keep_state_every and truncate_every of a group RNN config."""
    _require_choice("recurrence", config.recurrence, RECURRENCES)
    if config.recurrence == "scan" and (config.recurrent or config.reproject_every is not None):
        raise ValueError("recurrence='scan' needs recurrent=False and reproject_every=None: the scan multiplies "
                         "updates that do not depend on the state, and never sees the states in between")
    if config.keep_state_every is not None:
        _require_int("keep_state_every", config.keep_state_every, 1)
        if config.recurrence != "fused":
            raise ValueError(f"keep_state_every only applies to recurrence='fused', not {config.recurrence!r}")
        if not config.state_group.is_compact:
            raise ValueError(f"keep_state_every needs a compact group, not {config.group!r}: there, rebuilding "
                             "H_{t-1} = H_t exp(A_t)^-1 in reverse is not an isometry and its rounding error is unbounded")
    if config.truncate_every is not None:
        _require_int("truncate_every", config.truncate_every, 1)
        if config.recurrence == "scan":
            raise ValueError("truncate_every only applies to recurrence='loop' or 'fused', not 'scan': the scan's "
                             "products run over the whole call")


def _validate_update_bound(config):
    """update_bound of a group RNN config: None, or a positive finite number θ."""
    bound = config.update_bound
    if bound is None:
        return
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        raise TypeError(f"update_bound must be a number or None, got {type(bound).__name__}")
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"update_bound must be a positive finite number (θ in c ← θ·tanh(c/θ)), got {bound}")


def _validate_input_init(config):
    """input_init of a group RNN config: ``spread`` needs a compact group (its angles are rotation angles)."""
    _require_choice("input_init", config.input_init, INPUT_INITS)
    if config.input_init == "spread" and not config.state_group.is_compact:
        raise ValueError(f"input_init='spread' needs a compact group, not {config.group!r}: it spreads the "
                         "rotation angles of the updates over [0, π], and GL's updates are not rotations")


def _validate_forget(config):
    """forget and forget_alpha of a group RNN config (``GroupRNNConfig.forget``)."""
    _require_choice("forget", config.forget, FORGETS)
    alpha = config.forget_alpha
    if config.forget == "none":
        if alpha is not None:
            raise ValueError(f"forget_alpha only applies with forget='constant' or 'gate', not {config.forget!r}")
        return
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"forget={config.forget!r} needs forget_alpha, a number in (0, 1/2), got {alpha!r}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"forget_alpha must lie in (0, 1/2), got {alpha}: at 1/2 the blend (1 − α)·H + α·I of an "
                         "H with eigenvalue −1 is singular and has no polar factor")
    if config.group not in FORGET_GROUPS:
        raise ValueError(f"forget needs one of the groups {', '.join(FORGET_GROUPS)}, not {config.group!r}: "
                         + ("the polar factor of an SU blend leaves det = 1" if config.group == "SU" else
                            "GL's states are not unitary, and have no polar factor to return to"))
    if config.recurrence == "scan":
        raise ValueError("forget needs recurrence='loop' or 'fused', not 'scan': the leaky update depends on the "
                         "state, so the updates are not a product of input-driven factors")
    if config.keep_state_every is not None:
        raise ValueError("forget keeps every state (keep_state_every=None): the leaky update has no exact reverse "
                         "step to rebuild a state from the next")


class _GroupState:
    """Properties shared by the configs of the group-state models (fields group, n, block), all
    read from the group."""

    @property
    def state_group(self):
        """The group of the states, a ``reference.groups`` group (the torch twin has equal facts)."""
        return _group(self.group, self.n, self.block)

    @property
    def algebra_dim(self):
        """dim g: the number of coordinates of every update."""
        return self.state_group.dim

    @property
    def is_complex(self):
        return self.state_group.is_complex

    @property
    def state_features(self):
        """len(features(H)) (docs/design.md, Models): the real numbers the state maps and the readout read."""
        return self.state_group.num_features


@dataclass(frozen=True)
class GroupRNNConfig(_GroupState):
    """Group-state RNN language model (docs/design.md, Models).

    Attributes:
        vocab_size: number of token ids V; inputs must lie in [0, V).
        group: the state's group.
        n: the state is an n×n matrix.
        block: block size b of ``BO`` (default 2); must be None for the other groups. A larger b
            (4 to 8) makes the state k = n/b independent O(b) heads, each moved by its own
            coordinates of the update.
        embedding_dim: token embedding width F.
        readout: ``linear`` (R·features(H) + c) or ``prototype`` (τ·Re tr(H^H P_v)).
        recurrent: include the state term U(H_{t-1}) in the update.
        reproject_every: apply ``nearest`` to the state every k steps (None: never).
        mixing: tangent-space mixing of A_t (docs/design.md, Models): ``none``, ``scalar`` or ``lowrank``.
        mixing_rank: rank r of ``lowrank`` mixing (required there, None otherwise).
        recurrence: how the torch model runs the loop over time (the reference has one plain
            loop; all three compute the same function): ``fused`` (default; one autograd node
            for the whole sequence with a written-out backward), ``loop`` (autograd through
            every step) or ``scan`` (associative scan of the updates; only without the
            recurrent term and without re-projection).
        keep_state_every: ``fused`` only, compact groups only: instead of keeping every state
            for the backward pass, keep every k-th and rebuild the others in reverse from
            H_{t-1} = H_t · exp(A_t)ᴴ (None: keep every state).
        truncate_every: truncated backpropagation through time inside a call: no gradient flows
            back from the steps after H_j into H_j where k divides the global step index j (the
            loss's own reading of H_j still reaches it); the states and the loss are unchanged.
            The remedy for long recurrent sequences, whose gradients grow like e^{λT} (the
            ``GroupRNNLayer`` docstring). ``loop`` and ``fused`` only (None: backpropagate through
            the whole call).
        input_init: initialization of the input map (``INPUT_INITS``): ``default`` (W ~ N(0, 1/(F·dim g)),
            b = 0) or ``spread`` (the default draws, then W, b and, where needed, the embedding set so
            that every token's update has rotation angles drawn uniformly in [0, π]; compact groups
            only; see ``reference.group_rnn.spread_updates`` and ``fit_input_map``).
        update_bound: θ > 0 bounds every coordinate of the update after mixing, m ← θ·tanh(m/θ), so
            that |m_k| < θ (None: unbounded, the paper's update). On T a coordinate is a rotation
            angle, on BO(2) √2 times one (the basis (E_ij − E_ji)/√2), so θ = π, resp. π√2, keeps
            every angle of a step inside (−π, π); on the other groups it bounds the coordinates,
            not the angles.
        forget: how the state lets go of old input (``FORGETS``): ``none`` (the paper's update),
            or the leaky update H_t = polar((1 − α_t)·H_{t−1} + α_t·I)·exp(A_t), which contracts
            the previous state toward the identity before the step, with α_t = ``forget_alpha``
            (``constant``) or α_t = forget_alpha·σ(w·[d_t, features(H_{t−1})] + b) (``gate``, d_t
            = W e_t + b the drive; σ(b) starts near 0). The polar factor is taken by
            ``forget_steps(forget_alpha)`` Newton–Schulz steps; groups ``FORGET_GROUPS`` (SU's polar
            factor leaves det = 1, GL has none), ``recurrence`` ``loop`` or ``fused``, every state kept.
        forget_alpha: α of ``constant``, the largest α of ``gate``: in (0, 1/2), where the blend
            stays invertible (its singular values are at least 1 − 2α); None without ``forget``.
        num_layers: L stacked cells, as in ``nn.LSTM``: layer ℓ + 1 is driven by features(H_t^ℓ) of
            the layer below in place of the embedding (``upper_layer_config``), the readout reads
            the top layer's H_t^L, and the state of the model is ``[L, B, n, n]`` for L > 1
            (``[B, n, n]``, as without depth, for L = 1). Every layer has its own H_0 and maps, and
            every option above.
    """

    vocab_size: int
    group: str = dataclasses.field(default="O", metadata={"choices": GROUP_NAMES})
    n: int = 8
    block: int | None = None
    embedding_dim: int = 32
    readout: str = "linear"
    recurrent: bool = True
    reproject_every: int | None = None
    mixing: str = "none"
    mixing_rank: int | None = None
    recurrence: str = "fused"
    keep_state_every: int | None = None
    truncate_every: int | None = None
    input_init: str = "default"
    update_bound: float | None = None
    forget: str = dataclasses.field(default="none", metadata={"choices": FORGETS})
    forget_alpha: float | None = None
    num_layers: int = 1

    def __post_init__(self):
        _require_int("vocab_size", self.vocab_size, 1)
        _validate_group_fields(self)
        _require_int("embedding_dim", self.embedding_dim, 1)
        _require_choice("readout", self.readout, READOUTS)
        if not isinstance(self.recurrent, bool):
            raise TypeError(f"recurrent must be a bool, got {type(self.recurrent).__name__}")
        if self.reproject_every is not None:
            _require_int("reproject_every", self.reproject_every, 1)
        _validate_mixing_fields(self)
        _validate_recurrence_fields(self)
        _validate_input_init(self)
        _validate_update_bound(self)
        _validate_forget(self)
        _require_int("num_layers", self.num_layers, 1)


def layer_prefixes(config):
    """The parameter-key prefixes of a group RNN's layers, bottom first: ``cell.`` (the first
    layer, the only one without depth), then ``cell_l1.``, ``cell_l2.``, … (``nn.LSTM``'s ``_l1``)."""
    return ["cell."] + [f"cell_l{layer}." for layer in range(1, config.num_layers)]


def upper_layer_config(config):
    """The config of a group RNN's layers above the first: driven by features(H_t) of the layer
    below (``embedding_dim`` = ``state_features``) with the default input map (``spread`` fits
    the first layer's map to the token embeddings and has nothing to fit here)."""
    return dataclasses.replace(config, embedding_dim=config.state_features, input_init="default", num_layers=1)


def rnn_layer_config(input_size, group, n, **cell_options):
    """The ``GroupRNNConfig`` of a ``GroupRNNLayer``: the cell's fields, validated as the model's.

    ``input_size`` takes the place of ``embedding_dim``; a layer has no vocabulary, and
    ``vocab_size=1`` is a placeholder that no part of the cell reads.
    """
    _require_int("input_size", input_size, 1)
    return GroupRNNConfig(vocab_size=1, group=group, n=n, embedding_dim=input_size, **cell_options)


LAYER_OPTIONS = ("block", "recurrent", "reproject_every", "mixing", "mixing_rank", "recurrence", "keep_state_every",
                 "truncate_every", "update_bound", "forget", "forget_alpha", "num_layers")  # the cell's fields a GroupRNNLayer takes as keywords


def rnn_layer_repr(config, batch_first):
    """What a ``GroupRNNLayer`` prints, as ``nn.LSTM`` does: ``10, group='SO', n=6`` and every option
    that differs from its default."""
    defaults = {field.name: field.default for field in dataclasses.fields(GroupRNNConfig)}
    options = [f"{name}={getattr(config, name)!r}" for name in LAYER_OPTIONS
               if getattr(config, name) != defaults[name]]
    return ", ".join([f"{config.embedding_dim}, group={config.group!r}, n={config.n}", *options]
                     + (["batch_first=True"] if batch_first else []))


# --- mLSTM (docs/design.md, Models) ---------------------------------------------------------------

MLSTM_READS = ("plain", "ns", "polar")
# Newton–Schulz coefficients (a, b, c) of X ← a X + b (X Xᵀ) X + c (X Xᵀ)² X.
NS_COEFFICIENTS = {"cubic": (1.5, -0.5, 0.0), "quintic": (3.4445, -4.7750, 2.0315)}
MLSTM_NORM_EPS = 1e-5      # LayerNorm / per-head GroupNorm (xlstm's default)
MLSTM_CELL_EPS = 1e-6      # added to the read's normalizer max(|qᵀn|, exp(−m))
NS_NORM_FLOOR = 1e-6       # X_0 = C / max(‖C‖_F, NS_NORM_FLOOR)


@dataclass(frozen=True)
class MLSTMConfig:
    """mLSTM language model with an optionally orthogonalized read (docs/design.md, Models).

    The defaults are the specification's layer (width 94, 4 heads, inner width 192, head dim 48). The
    inner width is ``proj_factor · embedding_dim`` rounded up to a multiple of
    ``round_proj_up_to_multiple_of``, as in ``xlstm``'s ``mLSTMLayerConfig``.

    Attributes:
        vocab_size: number of token ids V; inputs must lie in [0, V).
        embedding_dim: model width d.
        num_heads: heads of the mLSTM cell; must divide the inner width.
        proj_factor: up-projection factor (> 0).
        round_proj_up_to_multiple_of: the inner width is rounded up to a multiple of this.
        qkv_proj_blocksize: block size of the block-diagonal q/k/v maps; must divide the inner width.
        conv1d_kernel_size: kernel of the depthwise causal convolution (≥ 1).
        read: ``plain`` (R(C) = C), ``ns`` (Newton–Schulz) or ``polar`` (its SVD limit, forward only).
        ns_steps: Newton–Schulz iterations k (≥ 1).
        ns_coeffs: ``cubic`` or ``quintic`` (see NS_COEFFICIENTS).
        polar_rtol: ``polar`` maps singular values σ > polar_rtol · σ_max to 1, the rest to 0.
    """

    vocab_size: int
    embedding_dim: int = 94
    num_heads: int = 4
    proj_factor: float = 2.0
    round_proj_up_to_multiple_of: int = 64
    qkv_proj_blocksize: int = 4
    conv1d_kernel_size: int = 4
    read: str = "plain"
    ns_steps: int = 5
    ns_coeffs: str = "cubic"
    polar_rtol: float = 1e-5

    def __post_init__(self):
        _require_int("vocab_size", self.vocab_size, 1)
        _require_int("embedding_dim", self.embedding_dim, 1)
        _require_int("num_heads", self.num_heads, 1)
        if isinstance(self.proj_factor, bool) or not isinstance(self.proj_factor, (int, float)):
            raise TypeError(f"proj_factor must be a number, got {type(self.proj_factor).__name__}")
        if not self.proj_factor > 0:
            raise ValueError(f"proj_factor must be positive, got {self.proj_factor}")
        _require_int("round_proj_up_to_multiple_of", self.round_proj_up_to_multiple_of, 1)
        _require_int("qkv_proj_blocksize", self.qkv_proj_blocksize, 1)
        _require_int("conv1d_kernel_size", self.conv1d_kernel_size, 1)
        inner = self.inner_dim
        if inner % self.num_heads:
            raise ValueError(
                f"num_heads={self.num_heads} does not divide the inner width {inner} "
                f"(proj_factor={self.proj_factor} · embedding_dim={self.embedding_dim}, rounded up to a "
                f"multiple of {self.round_proj_up_to_multiple_of}): the head dimension must be an integer")
        if inner % self.qkv_proj_blocksize:
            raise ValueError(f"qkv_proj_blocksize={self.qkv_proj_blocksize} does not divide the inner width {inner}")
        _require_choice("read", self.read, MLSTM_READS)
        _require_int("ns_steps", self.ns_steps, 1)
        _require_choice("ns_coeffs", self.ns_coeffs, tuple(NS_COEFFICIENTS))
        if isinstance(self.polar_rtol, bool) or not isinstance(self.polar_rtol, (int, float)):
            raise TypeError(f"polar_rtol must be a number, got {type(self.polar_rtol).__name__}")
        if not 0 < self.polar_rtol < 1:
            raise ValueError(f"polar_rtol must lie in (0, 1), got {self.polar_rtol}")

    @property
    def inner_dim(self):
        """Width of the up-projected branch: ceil(proj_factor · d / r) · r (192 by default)."""
        multiple = self.round_proj_up_to_multiple_of
        return int(math.ceil(self.proj_factor * self.embedding_dim / multiple) * multiple)

    @property
    def head_dim(self):
        """Per-head key/value dimension: inner width / num_heads (48 by default)."""
        return self.inner_dim // self.num_heads


# --- Group-state Transformer (docs/design.md, Models) ---------------------------------------------

ATTENTIONS = ("algebra", "similarity")
FEEDFORWARD_EXPANSION = 4  # default feed-forward width: FEEDFORWARD_EXPANSION · dim g


@dataclass(frozen=True)
class GroupTransformerConfig(_GroupState):
    """Group-state Transformer language model (docs/design.md, Models); see ``reference/group_transformer.py``.

    Attributes:
        vocab_size: number of token ids V; inputs must lie in [0, V).
        group: the state's group.
        n: token states are n×n matrices.
        block: block size b of ``BO`` (default 2); must be None for the other groups.
        num_layers: L ≥ 1 layers of (attention sublayer, feed-forward sublayer).
        num_heads: h ≥ 1. Heads are full copies, not slices: every head of ``algebra`` attention
            has its own query/key/value maps into all dim g coordinates (the head outputs are
            summed, docs/design.md (Models)), and every head of ``similarity`` attention its own inverse
            temperature β_h and step η_h. So any h works for any group (no divisibility).
        attention: ``algebra`` (learned q/k/v in the Lie algebra) or ``similarity`` (scores
            β·Re tr(H_iᴴ H_j), no q/k/v maps).
        feedforward: include the feed-forward sublayer in every layer (False: attention only).
        feedforward_dim: hidden width F of the feed-forward MLP (default FEEDFORWARD_EXPANSION ·
            dim g); must be None when ``feedforward`` is False.
        readout: ``linear`` (R·features(H) + c) or ``prototype`` (τ·Re tr(H^H P_v)).
        mixing: tangent-space mixing of every sublayer's update (docs/design.md, Models): ``none``, ``scalar``
            or ``lowrank``.
        mixing_rank: rank r of ``lowrank`` mixing (required there, None otherwise).

    There is no maximum length: positions enter through the one-parameter subgroup exp(i·Ω),
    defined for every i.
    """

    vocab_size: int
    group: str = dataclasses.field(default="O", metadata={"choices": GROUP_NAMES})
    n: int = 8
    block: int | None = None
    num_layers: int = 2
    num_heads: int = 4
    attention: str = "algebra"
    feedforward: bool = True
    feedforward_dim: int | None = None
    readout: str = "linear"
    mixing: str = "none"
    mixing_rank: int | None = None

    def __post_init__(self):
        _require_int("vocab_size", self.vocab_size, 1)
        _validate_group_fields(self)
        _require_int("num_layers", self.num_layers, 1)
        _require_int("num_heads", self.num_heads, 1)
        _require_choice("attention", self.attention, ATTENTIONS)
        if not isinstance(self.feedforward, bool):
            raise TypeError(f"feedforward must be a bool, got {type(self.feedforward).__name__}")
        if self.feedforward_dim is not None:
            if not self.feedforward:
                raise ValueError("feedforward_dim only applies with feedforward=True")
            _require_int("feedforward_dim", self.feedforward_dim, 1)
        _require_choice("readout", self.readout, READOUTS)
        _validate_mixing_fields(self)

    @property
    def feedforward_width(self):
        """Hidden width F of the feed-forward MLP (0 without the feed-forward sublayer)."""
        if not self.feedforward:
            return 0
        return FEEDFORWARD_EXPANSION * self.algebra_dim if self.feedforward_dim is None else self.feedforward_dim

    @property
    def num_sublayers(self):
        """S: sublayers in the whole stack (2 per layer with the feed-forward sublayer, else 1)."""
        return self.num_layers * (2 if self.feedforward else 1)


# --- learning rates of the group RNN's maps --------------------------------------------------

MAP_LR_REFERENCE = ("O", 16)  # the group of the reference shape, at which the plain update learns


def map_lr_scales(config):
    """Multipliers ``(s_W, s_U)`` of the learning rate of the group RNN's input map W (``[dim g, F]``)
    and state map U (``[dim g, num_features]``) under the ``n_aware`` rule.

    Adam moves every entry of a map by about lr, whatever the entry's scale. While H ≈ I, the
    features of H hold n ones (those of the diagonal, n = ‖features(I)‖₁) and the n matching
    columns of U take the same step, so one step changes the drive W e + U features(H) by
    ∝ lr·√dim g through W and ∝ lr·n·√dim g through U. The rule holds both changes at those of the
    reference shape O(n₀), n₀ = 16 (``MAP_LR_REFERENCE``), where the plain update learns:

        s_W = min(1, √(dim g₀ / dim g))          s_U = min(1, n₀·√dim g₀ / (n·√dim g))

    with dim g₀ = 120. O(30): s_W = √(120/435) ≈ 0.525, s_U ≈ 0.280; O(16) and every smaller
    shape: 1, 1. The cap at 1 keeps the rule a brake only: below the reference the uncapped rule
    would raise the maps' rates (O(8): × 2.07 and × 4.14), which nothing measured supports, and
    runs the plain update already trains stay as they are. dim g and n are read from the group.

    Args:
        config: a ``GroupRNNConfig``.

    Returns:
        ``(s_W, s_U)``, floats in (0, 1].

    Raises:
        TypeError: ``config`` is not a ``GroupRNNConfig``.
    """
    if not isinstance(config, GroupRNNConfig):
        raise TypeError(f"map_lr_scales needs a GroupRNNConfig, got {type(config).__name__}")
    reference, group = _group(*MAP_LR_REFERENCE, None), config.state_group
    input_scale = math.sqrt(reference.dim / group.dim)
    state_scale = reference.n * math.sqrt(reference.dim) / (group.n * math.sqrt(group.dim))
    return min(1.0, input_scale), min(1.0, state_scale)
