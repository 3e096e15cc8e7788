"""Parameter counts and matched parameter budgets for the baselines and the group models.

``count_parameters(model)``, ``parameter_count(config)`` (no model built) and
``size_to_budget(template, target)`` (within ±2%); the search and its defaults per family:
``size_to_budget``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

from experiments.baselines import ExpRNNConfig, GPTConfig, LSTMConfig
from reference.config import GroupRNNConfig, GroupTransformerConfig, MLSTMConfig
from reference.group_rnn import GroupRNN
from reference.groups import get_group
from reference.group_transformer import GroupTransformer
from reference.mlstm import MLSTM

TOLERANCE = 0.02
MAX_SIZE = 1 << 16  # largest value any searched size field may take


def count_parameters(model):
    """Real parameters of ``model``: ``sum(p.numel())`` over ``model.parameters()``, complex ones doubled."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())


def _lstm_count(config):
    vocab, hidden, embedding = config.vocab_size, config.hidden_size, config.embedding_width
    layers = sum(4 * hidden * (inputs + hidden) + 8 * hidden  # W_ih, W_hh, b_ih, b_hh
                 for inputs in [embedding] + [hidden] * (config.num_layers - 1))
    return vocab * embedding + layers + hidden * vocab + vocab


def _exprnn_count(config):
    vocab, hidden, embedding = config.vocab_size, config.hidden_size, config.embedding_width
    return (vocab * embedding + embedding * hidden + hidden  # embedding, V and its bias
            + hidden * (hidden - 1) // 2 + hidden            # A's entries above the diagonal, modReLU's bias
            + hidden * vocab + vocab)                        # head


def _gpt_count(config):
    vocab, width, hidden = config.vocab_size, config.width, config.mlp_hidden
    block = (2 * width                        # attention LayerNorm
             + 3 * width * width + 3 * width  # fused q/k/v
             + width * width + width          # output projection
             + 2 * width                      # MLP LayerNorm
             + width * hidden + hidden        # MLP in
             + hidden * width + width)        # MLP out
    positions = config.max_length * width if config.positions == "learned" else 0  # rotary, ALiBi: none
    return (vocab * width + positions + config.num_layers * block
            + 2 * width + width * vocab + vocab)


def spec_count(specs):
    """Real numbers in a reference parameter specification ``{key: ParamSpec}``, counted as
    ``count_parameters`` counts the torch twin: every stored entry, twice for the (complex)
    group-valued parameters of a complex group."""
    return sum(math.prod(spec.shape) * (2 if spec.group is not None and spec.group.is_complex else 1)
               for spec in specs.values())


_REFERENCE_MODELS = {GroupRNNConfig: GroupRNN, GroupTransformerConfig: GroupTransformer, MLSTMConfig: MLSTM}
_COUNTS = {LSTMConfig: _lstm_count, GPTConfig: _gpt_count, ExpRNNConfig: _exprnn_count}


def parameter_count(config):
    """Real parameters of the model ``config`` describes, equal to ``count_parameters`` of the built
    torch model (tested for every family and option): from the reference model's ``param_spec``
    for the group RNN, the group Transformer and the mLSTM, in closed form for the LSTM and GPT."""
    if type(config) in _REFERENCE_MODELS:
        return spec_count(_REFERENCE_MODELS[type(config)](config).param_spec())
    if type(config) in _COUNTS:
        return _COUNTS[type(config)](config)
    raise TypeError(f"no parameter count for {type(config).__name__}; expected one of "
                    f"{[c.__name__ for c in (*_REFERENCE_MODELS, *_COUNTS)]}")


# --- search ------------------------------------------------------------------------------------

SEARCHABLE = {LSTMConfig: ("hidden_size", "embedding_dim"), ExpRNNConfig: ("hidden_size", "embedding_dim"),
              GPTConfig: ("width", "mlp_width"),
              GroupRNNConfig: ("n", "embedding_dim"), GroupTransformerConfig: ("n", "feedforward_dim")}
DEFAULT_FREE = SEARCHABLE  # (coarse, fine) per family


def _axis(config, field):
    """``(start, step, stop)`` of the values ``field`` may take in ``config`` (stop inclusive)."""
    if isinstance(config, (LSTMConfig, ExpRNNConfig)) and field in ("hidden_size", "embedding_dim"):
        return 1, 1, MAX_SIZE
    if isinstance(config, GPTConfig) and field == "width":
        step = config.num_heads * (2 if config.positions == "rotary" else 1)  # rotary: even head width
        return step, step, MAX_SIZE
    if isinstance(config, GPTConfig) and field == "mlp_width":
        return 2 * config.width, 1, 6 * config.width
    if isinstance(config, (GroupRNNConfig, GroupTransformerConfig)) and field == "n":
        step = getattr(config.state_group, "block", 1)  # BO: n moves in whole blocks
        start = next(n for n in range(step, MAX_SIZE + 1, step) if get_group(config.group, n, config.block).dim)
        return start, step, MAX_SIZE
    if isinstance(config, GroupRNNConfig) and field == "embedding_dim":
        return 1, 1, MAX_SIZE
    if isinstance(config, GroupTransformerConfig) and field == "feedforward_dim":
        return 1, 1, MAX_SIZE
    raise ValueError(f"{field!r} is not a searchable size of {type(config).__name__}; choose from "
                     f"{list(SEARCHABLE[type(config)])}")


def _bracket(config, field, target):
    """The (at most two) configs along ``field`` whose counts bracket ``target``, closer first:
    a list of ``(count, config)``."""
    start, step, stop = _axis(config, field)
    last = (stop - start) // step
    memo = {}

    def count(k):
        if k not in memo:
            candidate = dataclasses.replace(config, **{field: start + k * step})
            memo[k] = (parameter_count(candidate), candidate)
        return memo[k][0]

    high = 0
    while count(high) < target and high < last:  # double to an upper bound
        high = min(last, 2 * high + 1)
    low = high // 2 if high > 0 else 0
    if count(high) < target:
        ks = [high]
    else:
        while low < high:  # smallest k with count(k) >= target
            middle = (low + high) // 2
            if count(middle) >= target:
                high = middle
            else:
                low = middle + 1
        ks = [k for k in (high - 1, high) if k >= 0]
    return sorted((memo[k] for k in ks), key=lambda pair: abs(pair[0] - target))


def _natural(config, field):
    """The value ``field`` has in ``config`` once its None default is resolved."""
    value = getattr(config, field)
    if value is None:
        value = {"mlp_width": "mlp_hidden", "embedding_dim": "embedding_width",
                 "feedforward_dim": "feedforward_width"}[field]
        value = getattr(config, value)
    return value


def _distortion(coarse, fine, field):
    """|log(fine value / the value the coarse config would have)|: how far the fine adjustment
    moved the shape from the template's default."""
    return abs(math.log(getattr(fine, field) / _natural(coarse, field)))


def size_to_budget(template, target, free=None, tolerance=TOLERANCE):
    """A copy of ``template`` with its free size fields set so that its parameter count is within
    ``tolerance`` of ``target`` (relative): the closest such count along the first free field, else
    along the second at each bracketing value of the first (see the module docstring).

    Args:
        template: an ``LSTMConfig``, ``GPTConfig`` or ``GroupRNNConfig``; fields not searched are
            kept (vocabulary, group, layers, heads, readout, ...); the free fields' values are
            ignored except the fine field's default (None = 4·width for GPT's ``mlp_width``).
        target: the parameter budget (a positive number).
        free: one field name or a (coarse, fine) pair; default ``DEFAULT_FREE`` of the family.
        tolerance: allowed relative deviation |count − target| / target, in (0, 1).

    Raises:
        ValueError: no size within the tolerance (the message gives the nearest counts), or an
            unknown field, target or tolerance.

    - ``count_parameters(model)``: real parameters of any ``nn.Module``; a complex parameter counts
      twice (its real and imaginary parts). Group-valued parameters count every stored entry, not the
      dimension of the group (an n×n orthogonal H_0 counts n², although O(n) has n(n−1)/2 dimensions).
    - ``parameter_count(config)``: the same number from a config alone, no torch model built: for the
      group RNN, the group Transformer and the mLSTM, from the reference model's own parameter
      specification (``param_spec``: the keys and shapes of the torch ``state_dict``, tested equal,
      so the layout is stated once, in the model); for ``LSTMConfig`` and ``GPTConfig`` (torch only)
      in closed form.
    - ``size_to_budget(template, target)``: a config whose count is within ``tolerance`` (default ±2%)
      of ``target``, found by search over the template's free size fields; a clear ``ValueError`` when
      no size does.

    Search. Counts grow monotonically with every size field, so along one field the search doubles,
    then bisects, to the two sizes that bracket the target (closer first). If the closer one is within
    the tolerance it is the answer: the template's other sizes keep their defaults. Otherwise a second
    free field makes a fine adjustment: it is searched the same way at each of the two bracketing
    values of the first, and among the results within the tolerance the one whose fine value moved
    least from its default (in ratio) wins. Defaults per family:

    | config | free fields (coarse, fine) | coarse steps | fine range | fine default |
    |---|---|---|---|---|
    | ``LSTMConfig`` | ``hidden_size``, ``embedding_dim`` | 1 | 1 … 2¹⁶ | = hidden_size |
    | ``GPTConfig`` | ``width``, ``mlp_width`` | ``num_heads`` (rotary: 2×) | 2·width … 6·width | 4·width |
    | ``GroupRNNConfig`` | ``n``, ``embedding_dim`` | 1 (``block`` for BO) | 1 … 2¹⁶ | the template's (32) |

    (n starts at the smallest size whose Lie algebra is not 0-dimensional, asked of the group.)

    The fine field is needed because one step of the coarse one can move the count by more than the
    4% window: n enters the dense group RNN's count as n⁴ (one step is ≈ 4/n, 20% at n = 20; T's and
    BO's as n², through their n-by-2n and n/2-by-2n state maps), GPT's width
    moves in steps of ``num_heads``, and at a large vocabulary the LSTM's count is dominated by the
    embedding and head, linear in H. Pass ``free=`` to choose other fields (one or two of a family's
    searchable fields, ``SEARCHABLE``); with one field a miss is an error.

        >>> from reference.config import GroupRNNConfig, GroupTransformerConfig
        >>> config = size_to_budget(GroupRNNConfig(vocab_size=65, group="O"), 100_000)
        >>> config.n, config.embedding_dim, parameter_count(config)
        (19, 60, 99953)
    """
    if type(template) not in DEFAULT_FREE:
        raise TypeError(f"cannot size {type(template).__name__}; expected one of "
                        f"{[c.__name__ for c in DEFAULT_FREE]}")
    if isinstance(target, bool) or not isinstance(target, numbers.Real) or not target > 0:
        raise ValueError(f"target must be a positive number of parameters, got {target!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real) or not 0 < tolerance < 1:
        raise ValueError(f"tolerance must lie in (0, 1), got {tolerance!r}")
    free = DEFAULT_FREE[type(template)] if free is None else ((free,) if isinstance(free, str) else tuple(free))
    if not 1 <= len(free) <= 2 or len(set(free)) != len(free):
        raise ValueError(f"free must name one or two different size fields, got {free!r}")
    for field in free:
        _axis(template, field)  # validates the name

    def hits(count):
        return abs(count - target) <= tolerance * target

    coarse = _bracket(template, free[0], target)
    if hits(coarse[0][0]):
        return coarse[0][1]
    tried = [count for count, _ in coarse]
    if len(free) == 2:
        found = []
        for _, config in coarse:
            fine = _bracket(config, free[1], target)
            if hits(fine[0][0]):
                found.append((_distortion(config, fine[0][1], free[1]), fine[0][1]))
            tried += [count for count, _ in fine]
        if found:
            return min(found, key=lambda pair: pair[0])[1]
    nearest = sorted(set(tried), key=lambda count: abs(count - target))[:4]
    raise ValueError(
        f"no {type(template).__name__} with free {' and '.join(free)} has a parameter count within "
        f"±{tolerance:.0%} of {target:,}: the nearest counts are {', '.join(f'{c:,}' for c in nearest)}. "
        "Free another size field, change the fixed ones, or widen the tolerance")


__all__ = ["DEFAULT_FREE", "SEARCHABLE", "TOLERANCE", "count_parameters", "parameter_count",
           "size_to_budget", "spec_count"]
