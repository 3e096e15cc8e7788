"""Parity check CLI: one configuration of a model in torch against the NumPy reference, outputs
and gradients, within the tolerances of parity_tests/tolerances.py.

    python -m parity_tests.check --model group_rnn --group G --n N --seed S
    python -m parity_tests.check --model group_transformer --attention algebra|similarity --layers L
        --heads h --mixing none|scalar|lowrank [--mixing-rank r] --group G --n N --seed S
    python -m parity_tests.check --model mlstm --read plain|ns|polar [--ns-steps k] [--vocab V] [--length L]

Prints one JSON object (max errors per quantity, tolerances, ``"pass": true|false``) and exits
with status 1 when the check fails (2 on an invalid configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from experiments.cli import CommandParser
from reference.config import (
    ATTENTIONS, GROUP_NAMES, MIXINGS, MLSTM_READS, NS_COEFFICIENTS, READOUTS, GroupRNNConfig, GroupTransformerConfig,
    MLSTMConfig,
)

MODELS = ("group_rnn", "group_transformer", "mlstm")
# Options of one model only (default None), refused for the others.
TRANSFORMER_OPTIONS = ("attention", "layers", "heads", "feedforward", "feedforward_dim")
RNN_OPTIONS = ("embedding_dim", "recurrent", "reproject_every")


def build_parser():
    parser = CommandParser("parity_tests.check", __doc__)
    parser.add_argument("--model", choices=MODELS, default="group_rnn", help="the model to check")
    parser.add_argument("--seed", type=int, default=0, help="seeds the parameters and the inputs")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float64", help="the torch model's precision")
    parser.add_argument("--batch", type=int, default=2, help="sequences of the input batch")
    parser.add_argument("--length", type=int, default=8, help="tokens per sequence")
    parser.add_argument("--vocab", type=int, default=None,
                        help="vocabulary (default 13 for group_rnn and group_transformer, 80 for mlstm)")
    parser.add_argument("--device", default="cpu", help="the torch model's device")
    both = parser.add_argument_group("group_rnn and group_transformer")
    both.add_argument("--group", choices=GROUP_NAMES, help="the state's group (required)")
    both.add_argument("--n", type=int, help="the state is n×n (required)")
    both.add_argument("--block", type=int, default=None, help="block size of BO (default 2)")
    both.add_argument("--readout", choices=READOUTS, default="linear", help="the readout")
    both.add_argument("--mixing", choices=MIXINGS, default="none", help="tangent-space mixing of the updates")
    both.add_argument("--mixing-rank", type=int, default=None, help="the rank of lowrank mixing")
    rnn = parser.add_argument_group("group_rnn only")
    rnn.add_argument("--embedding-dim", type=int, default=None, help="the embedding width (default 16)")
    rnn.add_argument("--recurrent", action=argparse.BooleanOptionalAction, default=None, help="the recurrent term U(H) of the update (default on)")
    rnn.add_argument("--reproject-every", type=int, default=None, help="re-project the state every k steps")
    transformer = parser.add_argument_group("group_transformer only")
    transformer.add_argument("--attention", choices=ATTENTIONS, default=None, help="the attention (default algebra)")
    transformer.add_argument("--layers", type=int, default=None, help="layers (default 2)")
    transformer.add_argument("--heads", type=int, default=None, help="attention heads (default 4)")
    transformer.add_argument("--feedforward", action=argparse.BooleanOptionalAction, default=None,
                             help="feed-forward sublayers (default on)")
    transformer.add_argument("--feedforward-dim", type=int, default=None, help="the feed-forward width (default 4·dim g)")
    mlstm = parser.add_argument_group("mlstm")
    mlstm.add_argument("--read", choices=MLSTM_READS, default="plain", help="the memory's read")
    mlstm.add_argument("--ns-steps", type=int, default=5, help="Newton–Schulz iterations of the ns read")
    mlstm.add_argument("--ns-coeffs", choices=tuple(NS_COEFFICIENTS), default="cubic", help="Newton–Schulz coefficients")
    return parser


def build_config(args):
    """The model config the arguments describe; raises ValueError/TypeError on invalid ones."""
    if args.batch < 1 or args.length < 1:
        raise ValueError(f"batch and length must be positive, got {args.batch} and {args.length}")
    if args.model == "mlstm":
        return MLSTMConfig(vocab_size=80 if args.vocab is None else args.vocab, read=args.read,
                           ns_steps=args.ns_steps, ns_coeffs=args.ns_coeffs)
    own = TRANSFORMER_OPTIONS if args.model == "group_transformer" else RNN_OPTIONS
    foreign = [name for name in TRANSFORMER_OPTIONS + RNN_OPTIONS
               if name not in own and getattr(args, name) is not None]
    if foreign:
        flags = ", ".join("--" + name.replace("_", "-") for name in foreign)
        raise ValueError(f"not options of --model {args.model}: {flags}")
    if args.group is None or args.n is None:
        raise ValueError(f"--model {args.model} needs --group and --n")
    vocab_size = 13 if args.vocab is None else args.vocab
    if args.model == "group_transformer":
        given = {field: getattr(args, option) for field, option in (
            ("num_layers", "layers"), ("num_heads", "heads"), ("attention", "attention"),
            ("feedforward", "feedforward")) if getattr(args, option) is not None}  # else the config's defaults
        return GroupTransformerConfig(
            vocab_size=vocab_size, group=args.group, n=args.n, block=args.block, **given,
            feedforward_dim=args.feedforward_dim, readout=args.readout, mixing=args.mixing,
            mixing_rank=args.mixing_rank)
    return GroupRNNConfig(
        vocab_size=vocab_size, group=args.group, n=args.n, block=args.block,
        embedding_dim=16 if args.embedding_dim is None else args.embedding_dim, readout=args.readout,
        recurrent=True if args.recurrent is None else args.recurrent, reproject_every=args.reproject_every,
        mixing=args.mixing, mixing_rank=args.mixing_rank)


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        config = build_config(args)
    except (TypeError, ValueError) as error:
        print(json.dumps({"error": str(error), "pass": False}))
        return 2
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*is deprecated")
        from parity_tests import harness
    report = harness.parity(config, seed=args.seed, dtype=args.dtype, batch=args.batch, length=args.length,
                            device=args.device)
    print(json.dumps(report, indent=2))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
