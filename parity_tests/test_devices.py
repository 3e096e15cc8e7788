"""Models built on a device other than their generator's: every draw happens on the generator's
device and is copied, as CUDA requires (a CPU generator cannot fill a CUDA tensor). The meta device
stands in for CUDA, and a dispatch mode refuses what CUDA would."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from experiments.baselines import GPTLanguageModel, LSTMLanguageModel
from manifold_impl.group_rnn import GroupRNN, GroupRNNLayer
from manifold_impl.group_transformer import GroupTransformer
from manifold_impl.mlstm import MLSTM
from reference.config import GROUP_NAMES


class DrawsOnTheGeneratorsDevice(TorchDispatchMode):
    """Fails on a random op whose generator lives on another device than the tensors it fills."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        generator = kwargs.get("generator")
        if generator is not None:
            devices = {leaf.device for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)}
            if kwargs.get("device") is not None:
                devices.add(torch.device(kwargs["device"]))
            assert devices <= {generator.device}, f"{func}: a {generator.device} generator fills a tensor on {devices}"
        return func(*args, **kwargs)


def test_the_check_refuses_a_cpu_generator_filling_a_tensor_elsewhere():
    with pytest.raises(AssertionError, match="a cpu generator fills a tensor on"), DrawsOnTheGeneratorsDevice():
        torch.nn.init.normal_(torch.empty(3, device="meta"), generator=torch.Generator())


MODELS = {
    "layer": lambda group, **kw: GroupRNNLayer(3, group, 4, mixing="lowrank", mixing_rank=2, **kw),
    "group_rnn": lambda group, **kw: GroupRNN(vocab_size=7, group=group, n=4, embedding_dim=3, readout="prototype",
                                              **kw),
    "group_rnn_spread": lambda group, **kw: GroupRNN(vocab_size=7, group=group, n=4, embedding_dim=3,
                                                     input_init="spread", **kw),
    "group_transformer": lambda group, **kw: GroupTransformer(vocab_size=7, group=group, n=4, num_layers=1,
                                                              mixing="lowrank", mixing_rank=2, **kw),
    "group_transformer_similarity": lambda group, **kw: GroupTransformer(vocab_size=7, group=group, n=4,
                                                                         num_layers=1, attention="similarity", **kw),
}
OTHERS = {
    "mlstm": lambda **kw: MLSTM(vocab_size=7, embedding_dim=16, num_heads=2, **kw),
    "lstm": lambda **kw: LSTMLanguageModel(vocab_size=7, hidden_size=8, **kw),
    "gpt": lambda **kw: GPTLanguageModel(vocab_size=7, width=8, num_heads=2, num_layers=1, max_length=16, **kw),
}


@pytest.mark.parametrize("group, kind", [(group, kind) for group in GROUP_NAMES for kind in MODELS
                                         if not (kind == "group_rnn_spread" and group == "GL")])  # spread: compact only
def test_a_group_model_builds_on_another_device_than_its_generator(group, kind):
    with DrawsOnTheGeneratorsDevice():
        model = MODELS[kind](group, device="meta", generator=torch.Generator().manual_seed(0))
    assert {p.device.type for p in model.parameters()} == {"meta"}


@pytest.mark.parametrize("kind", list(OTHERS))
def test_the_other_models_build_on_another_device_than_their_generator(kind):
    with DrawsOnTheGeneratorsDevice():
        model = OTHERS[kind](device="meta", generator=torch.Generator().manual_seed(0))
    assert {p.device.type for p in model.parameters()} == {"meta"}
