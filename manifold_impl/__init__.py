"""The torch + geoopt implementation: the three models and the group RNN as a drop-in layer."""

from manifold_impl.group_rnn import GroupRNN, GroupRNNLayer
from manifold_impl.group_transformer import GroupTransformer
from manifold_impl.mlstm import MLSTM

__all__ = ["GroupRNN", "GroupRNNLayer", "GroupTransformer", "MLSTM"]
