"""The torch + geoopt implementation: the three models and the group RNN as a drop-in layer."""

import re

import torch

# The oldest torch this tree is written for, set by its newest API: torch.compiler.is_compiling
# (torch 2.3), which the recurrence, the exponential's cache and the membership checks call to
# tell traced code from eager. Capturable optimizers with tensor rates (--cuda-graphs) are 2.1's.
TORCH_MINIMUM = (2, 3)


def check_torch_version(version):
    """Refuse, in one line, a torch ``version`` string older than ``TORCH_MINIMUM``."""
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    if (int(major), int(minor)) < TORCH_MINIMUM:
        minimum = ".".join(map(str, TORCH_MINIMUM))
        raise ImportError(f"groupstate needs torch >= {minimum} (torch.compiler.is_compiling); this is torch "
                          f"{version}: pip install 'torch>={minimum}'")


check_torch_version(torch.__version__)

from manifold_impl.group_rnn import GroupRNN, GroupRNNLayer  # noqa: E402  (after the version check)
from manifold_impl.group_transformer import GroupTransformer  # noqa: E402
from manifold_impl.mlstm import MLSTM  # noqa: E402

__all__ = ["GroupRNN", "GroupRNNLayer", "GroupTransformer", "MLSTM", "TORCH_MINIMUM", "check_torch_version"]
